package baton

import (
	"time"

	"github.com/batonlock/baton/protocol"
)

// heartbeatFrame is shared read-only by every v1Lock.
var heartbeatFrame = protocol.AppendHeartbeat(nil)

// scheduleHeartbeat arms the timer for the next heartbeat if one may be
// sent (none in flight). l.mu must be held.
//
// The timer is a time.AfterFunc: no goroutine exists between heartbeats,
// and at most one heartbeat is ever in flight, so callbacks never overlap.
func (l *v1Lock) scheduleHeartbeat() {
	next, ok := l.rule.NextHeartbeat()
	if !ok {
		return
	}
	d := time.Until(next)
	if l.timer == nil {
		l.timer = time.AfterFunc(d, l.heartbeat)
	} else {
		l.timer.Reset(d)
	}
}

// heartbeat sends one HEARTBEAT. The send is recorded before the write so
// that its reply can never arrive first. The write may take until the
// give-up deadline; a write that fails ends the claim (close on doubt).
func (l *v1Lock) heartbeat() {
	l.mu.Lock()
	if l.done {
		l.mu.Unlock()
		return
	}
	if _, ok := l.rule.NextHeartbeat(); !ok {
		l.mu.Unlock()
		return
	}
	l.rule.SentHeartbeat(time.Now())
	deadline := l.rule.Deadline()
	l.writers.Add(1) // before done can be set, so Release waits for the write
	l.mu.Unlock()
	defer l.writers.Done()
	if err := l.conn.SetWriteDeadline(deadline); err != nil {
		l.finish(connErr(err))
		return
	}
	if _, err := l.conn.Write(heartbeatFrame); err != nil {
		l.finish(connErr(err))
	}
}
