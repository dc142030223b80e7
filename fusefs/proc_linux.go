package fusefs

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
)

// descendsFrom reports whether process pid (a thread id, as FUSE gives
// it) is one of the processes ancestors names, or was started by one of
// them, directly or not, following the parents in /proc. A process
// whose parent cannot be read ends the search.
func descendsFrom(pid uint32, ancestors []uint32) bool {
	want := map[int]bool{}
	for _, a := range ancestors {
		want[int(a)] = true
		if tgid, _ := procStatus(int(a), "Tgid:"); tgid > 0 {
			want[tgid] = true
		}
	}
	p := int(pid)
	if tgid, _ := procStatus(p, "Tgid:"); tgid > 0 {
		p = tgid
	}
	for range 64 { // deeper trees than this are not followed
		if want[p] {
			return true
		}
		ppid, err := procStatus(p, "PPid:")
		if err != nil || ppid <= 1 {
			return false
		}
		p = ppid
	}
	return false
}

// procStatus reads a numeric field of /proc/PID/status.
func procStatus(pid int, field string) (int, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	for l := range bytes.Lines(b) {
		if rest, ok := bytes.CutPrefix(l, []byte(field)); ok {
			return strconv.Atoi(string(bytes.TrimSpace(rest)))
		}
	}
	return 0, fmt.Errorf("fusefs: no %s in /proc/%d/status", field, pid)
}
