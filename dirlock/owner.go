package dirlock

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
)

// Owner names a process: where it runs and which incarnation of a pid
// it is. It is written into the lock's entry name, so it is read
// atomically with the entry.
type Owner struct {
	Hostname string // os.Hostname: for people, and never enough to identify a machine
	// MachineID is /etc/machine-id: what tells two machines apart (cloned
	// VMs and containers may share a host name). "" when the record was
	// written by an older version, or on a machine without a valid one.
	MachineID string
	BootID    string // /proc/sys/kernel/random/boot_id: changes at every boot
	PIDNS     string // the pid namespace's inode (/proc/self/ns/pid): pids mean something only inside it
	PID       int
	Start     uint64 // the process's start time in clock ticks since boot (/proc/PID/stat field 22)
	Nonce     string // random, one per acquisition: makes every entry name unique
}

func (o Owner) String() string {
	m := o.MachineID
	if m == "" {
		m = "unknown"
	}
	return fmt.Sprintf("pid %d (started at tick %d) on host %q (machine %s, boot %s, pid namespace %s)", o.PID, o.Start, o.Hostname, m, o.BootID, o.PIDNS)
}

// noMachineID stands for an unknown machine id in a file name (a
// machine id is 32 hex digits, so it cannot be one).
const noMachineID = "none"

// id is o's part of a file name: fields separated by dots, none of
// which contains a dot (the host name is escaped):
// HOST.MACHINEID.BOOTID.PIDNS.PID.START.NONCE. Older versions wrote the
// same without MACHINEID; they cannot parse this name, so they treat it
// as a record they cannot read and never break it.
func (o Owner) id() string {
	m := o.MachineID
	if m == "" {
		m = noMachineID
	}
	return strings.Join([]string{escapeHost(o.Hostname), m, o.BootID, o.PIDNS,
		strconv.Itoa(o.PID), strconv.FormatUint(o.Start, 10), o.Nonce}, ".")
}

// parseID reads a name written by id, or by an older version (six
// fields, no machine id: MachineID is "").
func parseID(s string) (Owner, bool) {
	f := strings.Split(s, ".")
	machine := ""
	switch len(f) {
	case 7:
		machine = f[1]
		f = append(f[:1], f[2:]...)
		if !validMachineID(machine) {
			if machine != noMachineID {
				return Owner{}, false
			}
			machine = ""
		}
	case 6:
	default:
		return Owner{}, false
	}
	host, ok := unescapeHost(f[0])
	pid, err1 := strconv.Atoi(f[3])
	start, err2 := strconv.ParseUint(f[4], 10, 64)
	if !ok || err1 != nil || err2 != nil || pid <= 0 || f[1] == "" || f[2] == "" || f[5] == "" {
		return Owner{}, false
	}
	return Owner{Hostname: host, MachineID: machine, BootID: f[1], PIDNS: f[2], PID: pid, Start: start, Nonce: f[5]}, true
}

// validMachineID reports whether s has the form of /etc/machine-id: 32
// lower-case hex digits, not all zero (systemd's machine-id(5)).
func validMachineID(s string) bool {
	if len(s) != 32 || strings.Trim(s, "0") == "" {
		return false
	}
	for i := range len(s) {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// withNonce returns o with a fresh nonce.
func (o Owner) withNonce() Owner {
	var b [8]byte
	rand.Read(b[:])
	o.Nonce = hex.EncodeToString(b[:])
	return o
}

// escapeHost keeps letters, digits and '-' and writes every other byte
// as %XX, so the result has no dot and maps back exactly.
func escapeHost(h string) string {
	var b strings.Builder
	for i := 0; i < len(h); i++ {
		c := h[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

func unescapeHost(s string) (string, bool) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		if i+2 >= len(s) {
			return "", false
		}
		v, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
		if err != nil {
			return "", false
		}
		b.WriteByte(byte(v))
		i += 2
	}
	return b.String(), true
}

// Entry kinds: the first field of the name of the lock directory's one
// entry.
const (
	kindOwner   = "owner"   // held by the named process
	kindRelease = "release" // the named process is releasing it
	kindBreak   = "break"   // the named process is breaking it: the previous holder is dead
)

// parseEntry splits an entry name "KIND.ID".
func parseEntry(name string) (kind string, o Owner, ok bool) {
	kind, rest, found := strings.Cut(name, ".")
	if !found || (kind != kindOwner && kind != kindRelease && kind != kindBreak) {
		return "", Owner{}, false
	}
	o, ok = parseID(rest)
	return kind, o, ok
}

// Verdict is what this host can say about a process named in the lock
// directory.
type Verdict int

const (
	// Alive: the process runs on this host (or this host cannot prove it
	// dead: a pid it may not inspect counts as alive).
	Alive Verdict = iota + 1
	// Dead: provably dead: this host rebooted since, or no process has
	// that pid, or the process with that pid started at another time, or
	// it has exited and waits to be reaped.
	Dead
	// CannotJudge: the process is on another machine (or in another pid
	// namespace, or its record has no machine id and comes from another
	// boot); no one here can tell whether it is dead or only slow.
	CannotJudge
)

func (v Verdict) String() string {
	switch v {
	case Alive:
		return "alive"
	case Dead:
		return "dead"
	case CannotJudge:
		return "cannot judge from this host"
	}
	return "unknown"
}

// judge is the exact local death check: only a process on self's
// machine is ever judged; a reboot of this machine kills every process of
// the previous boot.
//
// A machine is self's only if the machine id and the host name both match
// (the host name alone is shared by cloned VMs and containers; requiring
// it too keeps two clones that kept one machine id apart unless they also
// share a host name). Without a machine id on both sides (a record of an
// older version, or a machine without /etc/machine-id), nothing proves the
// machine across a reboot: only a record of this very boot is judged, and
// any other boot cannot be judged (an operator frees it).
func judge(o, self Owner) Verdict {
	if o.Hostname != self.Hostname {
		return CannotJudge
	}
	if o.MachineID == "" || self.MachineID == "" {
		if o.BootID != self.BootID || o.PIDNS != self.PIDNS {
			return CannotJudge
		}
		return processState(o.PID, o.Start)
	}
	if o.MachineID != self.MachineID {
		return CannotJudge
	}
	if o.BootID != self.BootID {
		return Dead
	}
	if o.PIDNS != self.PIDNS {
		return CannotJudge
	}
	return processState(o.PID, o.Start)
}
