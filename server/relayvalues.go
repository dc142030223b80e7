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
	i := rel.heldIndex(f.Claim)
	rc := rel.claims[f.Claim]
	upValues := rc != nil && rc.up != nil && rc.up.values && !rc.up.dead
	switch way, answer := clustercore.Relay2ProclaimOf(f, claimOf(rc), i >= 0, upValues); way {
	case clustercore.Relay2ProclaimHeld:
		clustercore.Relay2SetValue(&rel.held[i], f.Value)
		rel.add(v, &outEntry{B: answer, At: rel.answerAt()})
	case clustercore.Relay2ProclaimAnswer:
		rel.add(v, &outEntry{B: answer, At: rel.answerAt()})
	default:
		clustercore.Relay2SetValue(&rc.Req, f.Value)
		slot := rel.place(v, rel.answerAt(), rc.up, f.Claim)
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
