package server

import (
	"encoding/json"
	"time"

	"github.com/batonlock/baton/internal/locktable"
	"github.com/batonlock/baton/internal/rangelock"
	"github.com/batonlock/baton/protocol"
)

// SetAfterTableEntry sets the hook that runs between an ACQUIRE's entry
// into the table and the reply to it.
func SetAfterTableEntry(srv *Server, h func(addr string)) { srv.afterTableEntry = h }

// TokenGate is the instant before which the server grants nothing (the
// first second of the process, with the default token source).
func TokenGate(srv *Server) time.Time {
	srv.init()
	return srv.gate
}

// EndKept ends every kept session (resume.go) at once, as their lease
// passing would, drops the range locks kept for resumable sessions
// (rangeresume.go), and returns how many sessions were kept.
func EndKept(srv *Server) int {
	srv.mu.Lock()
	now := time.Now()
	var ds []delivery
	n := 0
	for _, k := range srv.resume.byID {
		ds = append(ds, srv.endKeptLocked(now, k, locktable.ReasonExpired)...)
		n++
	}
	for o, k := range srv.ranges.kept {
		delete(srv.ranges.kept, o)
		srv.forgetRangeSessionLocked(k.sid)
		ds = append(ds, srv.rangePushes(srv.ranges.table.CloseSession(now, k.sid), nil)...)
	}
	srv.mu.Unlock()
	srv.deliver(ds)
	return n
}

// RangeCounts returns the sizes of the server's range-lock table.
func RangeCounts(srv *Server) rangelock.Counts {
	srv.init()
	srv.mu.Lock()
	defer srv.mu.Unlock()
	return srv.ranges.table.Counts()
}

// LiveResumable returns the number of open resumable sessions the server
// indexes by origin (resume.go).
func LiveResumable(srv *Server) int {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	return len(srv.resume.live)
}

// ForceRelease is ForceReleaseBy with no administrator named.
func (srv *Server) ForceRelease(name string) error { return srv.ForceReleaseBy(name, Peer{}) }

// Kick is KickBy with no administrator named.
func (srv *Server) Kick(name, addr string) error { return srv.KickBy(name, addr, Peer{}) }

// RevokeRanges applies a changed Authorizer to the range locks alone.
func (srv *Server) RevokeRanges(holders bool) int { return srv.revokeRanges(holders) }

// AttachRelayed, DetachRelayed and RelayedSession reach the relay's
// bookkeeping of version 2 claims, which no caller outside the server
// drives.
func (srv *Server) AttachRelayed(sid SessionID, claim uint32, addr string) error {
	return srv.attachRelayed(locktable.SessionID(sid), claim, addr)
}

func (srv *Server) DetachRelayed(sid SessionID, claim uint32) (string, error) {
	return srv.detachRelayed(locktable.SessionID(sid), claim)
}

func (srv *Server) RelayedSession(origin string, clientSession uint64) (SessionID, bool) {
	sid, ok := srv.relayedSession(origin, clientSession)
	return SessionID(sid), ok
}

// The cluster side (clusterhook.go), as the server's tests call it.
func (srv *Server) Export(newOwner func(name string) string) (map[string]json.RawMessage, error) {
	return srv.exportNames(newOwner)
}
func (srv *Server) Install(from string, state json.RawMessage) error {
	return srv.installState(from, state)
}
func (srv *Server) Evict(gone func(name string) bool)        { srv.evictNames(gone) }
func (srv *Server) SetLeaseCeiling(d time.Duration)          { srv.setLeaseCeiling(d) }
func (srv *Server) LongestLease() time.Duration              { return srv.longestLease() }
func (srv *Server) EndSessions(code protocol.Code) int       { return srv.endSessions(code) }
func (srv *Server) RingChanged()                             { srv.ringChanged() }
func (srv *Server) Relayed() (now, total int64)              { return srv.relayedConns() }
func (srv *Server) RelayedClaims() (claims, upstreams int64) { return srv.relayedClaimCount() }
func (srv *Server) RelayedWatches() int64                    { return srv.relayedWatchCount() }
func (srv *Server) HopPoolIdle() int                         { return srv.hopPoolIdle() }
func (srv *Server) OwnerDials() int64                        { return srv.ownerDialCount() }

// HoldAgain holds claim id on name again on the session with label, as
// if an upstream's failure had handed it back while it was also entered
// (the duplicate a hold must survive), and starts the hold's retries.
func HoldAgain(srv *Server, label string, id uint32, name string) bool {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	for _, s := range srv.claims {
		if s.v2 == nil || s.v2.label != label {
			continue
		}
		rel := s.v2.rel.Load()
		s.v2.omu.Lock()
		rel.held = append(rel.held, protocol.Frame{Type: protocol.TypeClaim, Claim: id, Name: name, Mode: protocol.ModeExclusive})
		s.v2.omu.Unlock()
		s.scheduleHeld(rel, 1)
		return true
	}
	return false
}
