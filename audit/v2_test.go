package audit_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/batonlock/baton/audit"
	"github.com/batonlock/baton/internal/opstest"
	"github.com/batonlock/baton/protocol"
	"github.com/batonlock/baton/server"
)

// TestV2ClaimFields: records about version 2 claims carry the protocol,
// session id, claim id, mode and label; version 1 records carry protocol
// 1, their session and claim 0.
func TestV2ClaimFields(t *testing.T) {
	var out bytes.Buffer
	al := audit.New(&out, audit.Config{})
	srv, rec, addr := startServer(t, al)

	v1 := opstest.Dial(t, addr)
	v1.Acquire("rw", 10*time.Second)
	v1.Expect(protocol.TypeAcquired, 0)
	r := opstest.DialV2(t, addr, 10*time.Second, "reader")
	r.Claim(5, protocol.ModeShared, 0, "rw")
	r.ExpectV2(protocol.TypeQueued, 5, 0)
	v1.Close()
	tok := r.ExpectV2(protocol.TypePromoted, 5, 0).Token
	by := server.Peer{Addr: "127.0.0.1:1"}
	info, _ := srv.Lock("rw")
	if err := srv.ForceReleaseClaimBy("rw", server.ClaimRef{Token: tok}, by); err != nil {
		t.Fatal(err)
	}
	r.ExpectV2(protocol.TypeRevoked, 5, protocol.CodeClosedByAdmin)
	rec.WaitCount(t, server.EventReleased, 2)
	srv.Close()
	al.Close()

	rs := parse(t, out.Bytes())
	want := []struct {
		event    string
		protocol int
		claim    uint64
		mode     string
		label    string
	}{
		{audit.Granted, 1, 0, "exclusive", ""},
		{audit.Released, 1, 0, "exclusive", ""},
		{audit.Granted, 2, 5, "shared", "reader"},
		{audit.ForceRelease, 2, 5, "shared", "reader"},
		{audit.Released, 2, 5, "shared", "reader"},
	}
	if len(rs) != len(want) {
		t.Fatalf("got %d records, want %d:\n%s", len(rs), len(want), out.String())
	}
	for i, w := range want {
		got := rs[i]
		if got.Event != w.event || got.Protocol != w.protocol || got.Claim == nil || *got.Claim != w.claim ||
			got.Mode != w.mode || got.Label != w.label || got.Session == 0 {
			t.Errorf("record %d = %+v, want %+v", i, got, w)
		}
	}
	if rs[2].Session != uint64(info.Holder.Session) || rs[2].Token != tok {
		t.Errorf("granted record session %d token %d, want %d and %d", rs[2].Session, rs[2].Token, info.Holder.Session, tok)
	}
}

// TestResumeRecords: a kept session and each re-assertion are recorded,
// the re-assertion with its result, token or code.
func TestResumeRecords(t *testing.T) {
	var out bytes.Buffer
	al := audit.New(&out, audit.Config{})
	srv, rec, addr := startServer(t, al)
	opstest.PassGate(t, addr)
	s := opstest.Dial(t, addr)
	s.Send(protocol.AppendFrame(protocol.AppendPreamble(nil), protocol.Frame{
		Type: protocol.TypeHello, LeaseMS: 30000, Flags: protocol.HelloResumable, Label: "r"}))
	w := s.ReadV2()
	s.Claim(1, protocol.ModeExclusive, 0, "a")
	tok := s.ExpectV2(protocol.TypeGranted, 1, 0).Token
	s.Close()
	rec.WaitCount(t, server.EventSessionKept, 1)
	n := opstest.DialV2(t, addr, 30*time.Second, "n")
	re := protocol.Frame{Type: protocol.TypeClaim, Claim: 1, Flags: protocol.ClaimReassert, Mode: protocol.ModeExclusive,
		Name: "a", Token: tok, Session: w.Session, Secret: w.Secret, Node: w.Node}
	n.Send(protocol.AppendFrame(nil, re))
	n.ExpectV2(protocol.TypeGranted, 1, 0)
	re.Claim = 2
	n.Send(protocol.AppendFrame(nil, re))
	n.ExpectV2(protocol.TypeRefused, 2, protocol.CodeReassertRefused)
	rec.WaitCount(t, server.EventReasserted, 2)
	srv.Close()
	al.Close()

	var got []audit.Record
	for _, r := range parse(t, out.Bytes()) {
		if r.Event == audit.SessionKept || r.Event == audit.Reasserted {
			got = append(got, r)
		}
	}
	if len(got) != 3 {
		t.Fatalf("got %d resume records, want 3:\n%s", len(got), out.String())
	}
	if k := got[0]; k.Event != audit.SessionKept || k.Session != w.Session || k.Label != "r" || k.Protocol != 2 {
		t.Errorf("kept record %+v", k)
	}
	if a := got[1]; a.Result != "adopted" || a.Token != tok || a.Lock != "a" || a.Claim == nil || *a.Claim != 1 || a.Code != "" {
		t.Errorf("adopted record %+v", a)
	}
	if r := got[2]; r.Result != "refused" || r.Code != "0x04" || r.Token != 0 {
		t.Errorf("refused record %+v", r)
	}
}
