package audit_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton/audit"
	"github.com/batonlock/baton/protocol"
	"github.com/batonlock/baton/server"
)

// TestRangeRecordShapes: range grants, releases and an administrator's
// release of an owner's ranges are audit records, one per request, with
// the key, session, owner, namespace, type and the range as fcntl's
// start and length (0: to the end of the file); a revocation counter
// event is not a record of its own.
func TestRangeRecordShapes(t *testing.T) {
	var out bytes.Buffer
	al := audit.New(&out, audit.Config{})
	at := time.Date(2025, 3, 1, 11, 0, 0, 123000000, time.UTC)
	p := server.Peer{Identity: "spiffe://prod/mount", Addr: "10.0.0.7:41000"}
	sre := server.Peer{Identity: "spiffe://prod/sre", Addr: "127.0.0.1:50000"}
	base := server.Event{Time: at, Lock: "mount:etc/passwd", Peer: p, Protocol: protocol.Version2, Session: 12, Label: "host-a"}
	ev := func(k server.EventKind, r server.RangeLock, f func(*server.Event)) server.Event {
		e := base
		e.Kind, e.Range = k, &r
		if f != nil {
			f(&e)
		}
		return e
	}
	for _, e := range []server.Event{
		ev(server.EventRangeGranted, server.RangeLock{Owner: 7, Type: "write", Start: 10, End: 19}, func(e *server.Event) {
			e.Token, e.Waited = 42, 250*time.Millisecond
		}),
		ev(server.EventRangeReleased, server.RangeLock{Owner: 7, Type: "write", Start: 15, End: 19, Ranges: 1}, func(e *server.Event) { e.Action = "unlock" }),
		ev(server.EventRangeForceRelease, server.RangeLock{Flock: true, Owner: 9}, func(e *server.Event) { e.Admin = sre }),
		ev(server.EventRangeRevoked, server.RangeLock{Flock: true, Owner: 9, Type: "read", End: protocol.MaxRangeEnd}, func(e *server.Event) { e.Action = "admin" }),
		ev(server.EventRangeReleased, server.RangeLock{Flock: true, Owner: 9, Type: "read", End: protocol.MaxRangeEnd, Ranges: 1}, func(e *server.Event) { e.Action = "force" }),
	} {
		al.Observe(e)
	}
	al.Close()
	parse(t, out.Bytes())
	const head = `"time":"2025-03-01T11:00:00.123Z","event":`
	const who = `"lock":"mount:etc/passwd","identity":"spiffe://prod/mount","remote_addr":"10.0.0.7:41000"`
	const sess = `"protocol":2,"session":12,"label":"host-a"`
	want := strings.Join([]string{
		`{` + head + `"range_granted",` + who + `,"token":42,"wait_ms":250,` + sess + `,"range":{"ns":"posix","owner":7,"type":"write","start":10,"length":10}}`,
		`{` + head + `"range_released",` + who + `,"reason":"unlock",` + sess + `,"range":{"ns":"posix","owner":7,"type":"write","start":15,"length":5,"ranges":1}}`,
		`{` + head + `"range_force_release",` + who + `,"admin_identity":"spiffe://prod/sre","admin_addr":"127.0.0.1:50000",` + sess + `,"range":{"ns":"flock","owner":9,"start":0,"length":0}}`,
		`{` + head + `"range_released",` + who + `,"reason":"force",` + sess + `,"range":{"ns":"flock","owner":9,"type":"read","start":0,"length":0,"ranges":1}}`,
	}, "\n") + "\n"
	if got := out.String(); got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
}
