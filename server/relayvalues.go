package server

import (
	"time"

	"github.com/batonlock/baton/internal/clustercore"
	"github.com/batonlock/baton/protocol"
)

// Values through the claim relay (docs/design/2026-12-07-cluster-relay.md, "Values through a
// relaying node"). A client session that asked for values has its
// upstreams ask for them too (upstreamHello), so a CLAIM with a value is
// relayed like any claim, in frames of up to 2048 bytes, and a PROCLAIM
// of a relayed claim goes on the claim's upstream; the owner's
// PROCLAIMED is its answer, in the session's answer order. The claim's
// CLAIM frame keeps the latest value, which a failover's re-assertion
// carries to the name's next owner.

// relayProclaim answers PROCLAIM f of a claim the session relays or
// holds back (relayInUse). Called by the reader with srv.mu held.
func (s *session) relayProclaim(now time.Time, f protocol.Frame) {
	v := s.v2
	v.omu.Lock()
	defer v.omu.Unlock()
	rel := v.rel.Load()
	answer := func(b []byte) { rel.add(v, &outEntry{B: b, At: rel.answerAt()}) }
	if i := rel.heldIndex(f.Claim); i >= 0 {
		// Held back (its owner warms the name up): it is claimed with
		// the new value when it goes.
		rel.held[i].Value = f.Value
		rel.held[i].Flags |= protocol.ClaimValue
		answer(protocol.AppendProclaimed(nil, f.Claim, protocol.ProclaimSet))
		return
	}
	rc := rel.claims[f.Claim]
	switch {
	case rc == nil || rc.State == clustercore.ClaimReleasing || rc.State == clustercore.ClaimEnded:
		answer(protocol.AppendProclaimed(nil, f.Claim, protocol.ProclaimNotInUse))
	case rc.State == clustercore.ClaimMoving || rc.up == nil || !rc.up.values || rc.up.dead:
		// Moving to a new owner, or relayed to a node of an earlier
		// revision: the value cannot be changed there now.
		answer(protocol.AppendRefused(nil, f.Claim, protocol.CodeUnsupportedFeature, "the claim's owner cannot take a value now"))
	default:
		rc.Req.Value = f.Value
		rc.Req.Flags |= protocol.ClaimValue
		slot := &outEntry{Pending: true, At: rel.answerAt(), Up: rc.up, Claim: f.Claim}
		rel.add(v, slot)
		rc.up.send(protocol.AppendProclaim(nil, f.Claim, f.Value), upReq{Sent: clustercore.Sent{Kind: protocol.TypeProclaim, At: now}, slot: slot, rc: rc})
	}
}

// upstreamFrames returns the largest frame an upstream reads, and its
// read buffer's size: larger when it asked for values.
func upstreamFrames(values bool) (maxLen, bufLen int) {
	if values {
		return protocol.MaxValuesFrameLen, v2ValuesReadBuf
	}
	return protocol.MaxFrameLen, v2ReadBuf
}
