//go:build !linux

package dirlock

import "fmt"

var identityOverride func(Owner) Owner

// selfIdentity needs Linux's boot id and /proc: the exact death check is
// not available elsewhere.
func selfIdentity() (Owner, error) {
	return Owner{}, fmt.Errorf("%w: the death check needs Linux's /proc", ErrNotSupported)
}

func processState(pid int, start uint64) Verdict { return Alive }
