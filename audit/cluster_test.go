package audit_test

import (
	"bytes"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton/audit"
)

// A cluster node's membership and ring changes are audit lines with the
// common fields (lock, identity and remote_addr empty), in the order
// they were applied.
func TestClusterRecords(t *testing.T) {
	var buf bytes.Buffer
	l := audit.New(&buf, audit.Config{Logger: slog.New(slog.DiscardHandler)})
	at := time.Date(2026, 12, 1, 3, 4, 5, 6e6, time.UTC)
	m := &audit.ClusterMember{ID: "n4", State: "joining", RaftAddr: "10.0.0.4:7080", ProtocolAddr: "10.0.0.4:7070", AdminAddr: "10.0.0.4:7072"}
	l.Cluster(audit.ClusterEvent{Event: audit.ClusterJoin, Time: at, Member: m, RingVersion: 3, Ring: []string{"n1", "n2", "n3"}, CommittedAt: at, LogIndex: 40})
	l.Cluster(audit.ClusterEvent{Event: audit.ClusterRing, Time: at, RingVersion: 4, Ring: []string{"n1", "n2", "n3", "n4"}, CommittedAt: at, LogIndex: 42, Replayed: true})
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s", buf.String())
	recs := parse(t, buf.Bytes())
	if len(recs) != 2 {
		t.Fatalf("%d records, want 2", len(recs))
	}
	j, r := recs[0], recs[1]
	if j.Event != "cluster_join" || j.Member == nil || *j.Member != *m || j.LogIndex != 40 || j.Replayed || j.Lock != "" || j.RingVersion != nil || j.Ring != nil {
		t.Errorf("join record %+v", j)
	}
	if r.Event != "cluster_ring" || r.RingVersion == nil || *r.RingVersion != 4 || !slices.Equal(r.Ring, []string{"n1", "n2", "n3", "n4"}) ||
		r.CommittedAt != "2026-12-01T03:04:05.006Z" || !r.Replayed || r.Member != nil {
		t.Errorf("ring record %+v", r)
	}
	if !strings.Contains(buf.String(), `"ring":["n1","n2","n3","n4"]`) {
		t.Errorf("no ring members in %s", buf.String())
	}
}
