package fusefs

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"syscall"
	"testing"

	"github.com/batonlock/baton/protocol"
	"github.com/batonlock/baton/ranges"
)

// TestErrnoRangeUnavailable: a cluster node's "not served for now" is
// ENOLCK for fcntl and flock, and its reason is logged once a minute
// however many requests fail; the other lock errors keep their errnos.
func TestErrnoRangeUnavailable(t *testing.T) {
	var logs bytes.Buffer
	l := &lockFS{o: Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))}}
	for _, op := range []string{"setlk", "getlk", "unlock", "release", "setlk"} {
		if got := l.errno(op, fmt.Errorf("wrapped: %w", ranges.ErrUnavailable)); got != syscall.ENOLCK {
			t.Errorf("%s: ErrRangeUnavailable is %v, want ENOLCK", op, got)
		}
	}
	out := logs.String()
	if n := strings.Count(out, "\n"); n != 1 || !strings.Contains(out, "not served for now") || !strings.Contains(out, "ENOLCK") {
		t.Errorf("logged %d lines, want one saying why:\n%s", n, out)
	}
	for err, want := range map[error]syscall.Errno{
		ranges.ErrConflict: syscall.EAGAIN,
		ranges.ErrDeadlock: syscall.EDEADLK,
		ranges.ErrInvalid:  syscall.EINVAL,
		ranges.ErrLimit:    syscall.ENOLCK,
		// A key the server's ACL refuses (docs/security.md).
		protocol.ErrNotAuthorized: syscall.EACCES,
	} {
		if got := l.errno("setlk", err); got != want {
			t.Errorf("%v is %v, want %v", err, got, want)
		}
	}
	// A session's cap is not a cluster node's "not served": nothing more
	// is logged for it.
	if n := strings.Count(logs.String(), "\n"); n != 1 {
		t.Errorf("logged %d lines after a limit, want still one:\n%s", n, logs.String())
	}
}
