package clustercore

import "github.com/batonlock/baton/protocol"

// Self-stop of a cluster node cut off from its Raft quorum
// (docs/design/2026-12-01-ha-failover-design.md, "Failover design", rule
// 2): after T_self without quorum contact it serves nothing. Its names
// may then be given to another node, so it must not confirm anything a
// client would count as held: by the pessimism rule any answer confirms
// the request it answers (a client's lease is anchored at the send time
// of its latest answered request). So the check is made on the one path
// every answer takes, the session's write, after the request was read
// and before its answer is written: a node out of contact writes,
// instead of the answer, the retryable ERROR 0x03 and ends the session.
// A request read before the check was sent before the node stopped, so
// an answer written after a passing check (however late the write)
// confirms no later send time. Package server (selfstop.go, session.go)
// asks the Router for the contact and makes the writes.

// SelfStopBlocks reports whether a write to a session must not go out
// as it is: the node is out of quorum contact (inContact false), and
// the session is not closing already (a closing session's write is its
// last: the ERROR frame that SessionLastWrite builds).
func SelfStopBlocks(inContact, closing bool) bool {
	return !inContact && !closing
}

// SessionLastWrite is what a session's closing write carries: for a
// version 2 session the frames still pending, then the session-level
// ERROR(code), in one write (nothing goes after it), built on pending's
// storage; for a version 1 session the ERROR frame. A node out of
// quorum contact (inContact false) drops the pending frames, which
// would confirm their requests. A self-stop closes with ERROR 0x03
// (CodeNotOwner) and inContact false: the ERROR alone, in place of the
// answer.
func SessionLastWrite(pending []byte, v2 bool, code protocol.Code, inContact bool) []byte {
	switch {
	case !v2:
		return protocol.AppendError(make([]byte, 0, protocol.MaxErrorLen), code, "")
	case !inContact:
		pending = nil
	}
	return protocol.AppendSessionError(pending, code, "")
}
