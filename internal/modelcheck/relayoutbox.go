package modelcheck

import (
	"time"

	"github.com/batonlock/baton/internal/clustercore"
)

// outboxReleases reports whether a relaying node's ordered outbox lets
// the answer to a client's request, read readAgo ticks ago, leave now:
// the real pessimism rule (clustercore's Outbox and Confirmation), which
// the models run instead of a copy. The upstream protecting the session
// was confirmed at a send confAgo ticks ago, unless moving: a claim or
// key moving to a new owner and not adopted yet (Confirmation.Block).
// Ticks count back from an arbitrary present, a second each. push queues
// the answer as a push, with no read time, so no confirmation holds it
// back: the mutations that let a node answer unconfirmed break the real
// rule that way, as a bug in the server would.
func outboxReleases(confAgo, readAgo int, moving, push bool) bool {
	now := time.Unix(1<<20, 0)
	ago := func(ticks int) time.Time { return now.Add(-time.Duration(ticks) * time.Second) }
	var c clustercore.Confirmation
	if moving {
		c.Block()
	} else {
		c.Upstream(ago(confAgo), true)
	}
	answer := &clustercore.Entry[int8]{B: []byte{1}, At: ago(readAgo)}
	if push {
		answer.At = time.Time{}
	}
	var box clustercore.Outbox[int8]
	return len(box.Add(nil, answer, c)) > 0
}
