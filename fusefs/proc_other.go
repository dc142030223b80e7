//go:build !linux

package fusefs

// descendsFrom: only Linux's /proc is followed; elsewhere only the
// processes that set the locks count.
func descendsFrom(pid uint32, ancestors []uint32) bool {
	for _, a := range ancestors {
		if a == pid {
			return true
		}
	}
	return false
}
