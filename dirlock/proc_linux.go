package dirlock

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// identityOverride, when set (by tests only), changes the identity this
// process writes and judges with: a test can make a process look as if
// it ran on another host.
var identityOverride func(Owner) Owner

// Where this machine's identity is read (variables so that a test can
// play another machine).
var (
	machineIDPath = "/etc/machine-id"
	bootIDPath    = "/proc/sys/kernel/random/boot_id"
)

// The reads of another process's state (variables so that a test can
// play a /proc that hides it: a hidepid mount).
var (
	readProcStat = func(pid int) ([]byte, error) { return os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat") }
	signalZero   = func(pid int) error { return syscall.Kill(pid, 0) }
)

// machineID reads /etc/machine-id; "" when it is missing, empty,
// "uninitialized" or otherwise not a machine id: records then identify
// only this boot (see judge).
func machineID() string {
	b, err := os.ReadFile(machineIDPath)
	if err != nil {
		return ""
	}
	if id := strings.TrimSpace(string(b)); validMachineID(id) {
		return id
	}
	return ""
}

// selfIdentity returns this process's Owner, without a nonce.
func selfIdentity() (Owner, error) {
	boot, err := os.ReadFile(bootIDPath)
	if err != nil {
		return Owner{}, fmt.Errorf("%w: cannot read the boot id: %v", ErrNotSupported, err)
	}
	host, err := os.Hostname()
	if err != nil {
		return Owner{}, fmt.Errorf("%w: cannot read the host name: %v", ErrNotSupported, err)
	}
	ns, err := os.Readlink("/proc/self/ns/pid")
	if err != nil {
		return Owner{}, fmt.Errorf("%w: cannot read the pid namespace: %v", ErrNotSupported, err)
	}
	// "pid:[4026531836]"
	ns = strings.TrimSuffix(strings.TrimPrefix(ns, "pid:["), "]")
	pid := os.Getpid()
	start, _, err := procStat(pid)
	if err != nil {
		return Owner{}, fmt.Errorf("%w: cannot read this process's start time: %v", ErrNotSupported, err)
	}
	o := Owner{Hostname: host, MachineID: machineID(), BootID: strings.TrimSpace(string(boot)), PIDNS: ns, PID: pid, Start: start}
	if identityOverride != nil {
		o = identityOverride(o)
	}
	return o, nil
}

// procStat reads the start time (field 22) and state (field 3) of pid
// from /proc/PID/stat.
func procStat(pid int) (start uint64, state byte, err error) {
	b, err := readProcStat(pid)
	if err != nil {
		return 0, 0, err
	}
	// The command name (field 2) is in parentheses and may contain
	// anything: count fields after the last ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: no ')'", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: %d fields after the name", pid, len(f))
	}
	start, err = strconv.ParseUint(f[19], 10, 64) // field 22
	if err != nil {
		return 0, 0, fmt.Errorf("/proc/%d/stat: start time: %v", pid, err)
	}
	return start, f[0][0], nil
}

// processState judges a pid of this host and pid namespace. kill(pid, 0)
// decides existence (it sees every process, even where /proc hides other
// users' ones: a hidepid mount gives ENOENT or EACCES, kill EPERM); /proc
// decides which incarnation it is. Anything this process cannot read
// counts as alive: only proof of death frees a lock.
func processState(pid int, start uint64) Verdict {
	if err := signalZero(pid); errors.Is(err, syscall.ESRCH) {
		return Dead
	}
	got, state, err := procStat(pid)
	if err != nil {
		if err := signalZero(pid); errors.Is(err, syscall.ESRCH) {
			return Dead // exited between the two looks
		}
		return Alive
	}
	if got != start || state == 'Z' || state == 'X' {
		return Dead
	}
	return Alive
}
