//go:build unix

package audit

import (
	"os"
	"syscall"
)

// deleted reports whether f's file has no name left in the file system.
func deleted(f *os.File) bool {
	fi, err := f.Stat()
	if err != nil {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && st.Nlink == 0
}
