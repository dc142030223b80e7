//go:build !linux

package fusefs

import (
	"context"
	"syscall"
)

// asCaller runs op as the mount process: only Linux has per-thread file
// system credentials.
func asCaller(ctx context.Context, op func() syscall.Errno) syscall.Errno { return op() }
