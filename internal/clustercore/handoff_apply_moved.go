package clustercore

import (
	"strconv"
	"strings"

	"github.com/batonlock/baton/internal/locktable"
	"github.com/batonlock/baton/protocol"
)

// The prior owner's side of a hand-off on its upstream sessions
// (docs/design/2026-12-02-cluster-handoff.md, "Continuing version 2
// claims across a planned change"): which origin a session stands for,
// and MOVED, the hop-only REVOKED(claim, 0x06) that tells a relaying
// node a claim continues at the new owner, sent at the export and again
// as the answer to a RELEASE of that claim read later.
// server/move_export.go keeps the sessions and their writes.

// CodeMoved is the claim-level code of MOVED (docs/protocol-v2-ring.md):
// sent only on an upstream session; a relaying node never passes it on.
const CodeMoved protocol.Code = 0x06

// AppendMoved appends MOVED(id) to b.
func AppendMoved(b []byte, id uint32) []byte {
	return protocol.AppendRevoked(b, id, CodeMoved, "moved")
}

// HandoffOrigin is the origin a session stands for: this node (node)
// and the session's id here, or, for a session a relaying node opened
// (forwarded), the relaying node and the client's session there, read
// from via, the hop header's "node/session" (ok false when via names
// none).
func HandoffOrigin(node string, id uint64, forwarded bool, via string) (o locktable.Origin, ok bool) {
	if !forwarded {
		return locktable.Origin{Node: node, Session: id}, true
	}
	i := strings.LastIndexByte(via, '/')
	if i <= 0 {
		return locktable.Origin{}, false
	}
	n, err := strconv.ParseUint(via[i+1:], 10, 64)
	if err != nil {
		return locktable.Origin{}, false
	}
	return locktable.Origin{Node: via[:i], Session: n}, true
}

// HandoffMoved are the claims of an upstream session handed over to a
// new owner whose RELEASE, read after the export, is answered MOVED:
// the claim lives on there, and the relaying node sends that RELEASE
// on once the new owner adopted it.
type HandoffMoved map[uint32]bool

// Mark records that claims ids were handed over, and returns the set
// (made when m is nil). The relaying node is sent MOVED(id) for each
// (AppendMoved), in order with everything else on the session.
func (m HandoffMoved) Mark(ids []locktable.ClaimID) HandoffMoved {
	if m == nil {
		m = HandoffMoved{}
	}
	for _, id := range ids {
		m[uint32(id)] = true
	}
	return m
}

// Release answers RELEASE(id) read on the session: MOVED when claim id
// was handed over, once (the id is free afterwards); nil when it was
// not, and the RELEASE is the table's.
func (m HandoffMoved) Release(id uint32) []byte {
	if !m[id] {
		return nil
	}
	delete(m, id)
	return AppendMoved(nil, id)
}

// Claimed forgets that id was handed over: a CLAIM uses the id again.
func (m HandoffMoved) Claimed(id uint32) { delete(m, id) }
