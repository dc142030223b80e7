//go:build linux

package faultinject

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Fault kinds of the cluster suite: each hits a node (Fault.Node), never
// a worker. Their Fault.Worker is empty.
const (
	FaultNodeKill      = "kill"       // SIGKILL of the node
	FaultNodeStop      = "stop"       // SIGSTOP, later SIGCONT, of the node
	FaultNodeCut       = "cut"        // the node's cluster link down, later up
	FaultNodeClientCut = "client-cut" // the node's client link down, later up
	FaultNodeRestart   = "restart"    // SIGKILL, then the node again on its data directory
	// FaultNodeTerm: SIGTERM (a planned stop: the node hands its names
	// over and leaves the ring), then the node again on its data
	// directory at once, as in a rolling restart.
	FaultNodeTerm    = "term"
	FaultNodeIsolate = "isolate" // both links down, later up
	// FaultNodePartition: the node and one other cannot reach each
	// other, later can; both still reach the rest of the cluster.
	FaultNodePartition = "partition"
)

// ClusterFault is one fault of the cluster suite: Kind (a FaultNode*
// constant) on the node in Role ("owner" of the lock, Raft "leader", or
// "follower": neither; with a variant, "owner-brief"), from Start to End
// (Mono). OwnerLost is set when the node owned the lock when it was hit;
// Removed is when the other nodes were seen to have removed it (0: they
// did not).
//
// Workers are the worker processes connected to the node when it was
// hit, and Died, for a kill, a restart or a term, when the node's
// process was reaped.
type ClusterFault struct {
	Kind, Role, Node string
	OwnerLost        bool
	Start, End       int64
	Removed          int64
	Workers          []string
	Died             int64
}

// Label is "kind-role", the row of the per-fault report.
func (f ClusterFault) Label() string { return f.Kind + "-" + f.Role }

// FaultStats are the figures of one kind of fault (a Label) over a run:
// what happened from the start of each such fault to the start of the
// next fault of any kind.
type FaultStats struct {
	Faults   int
	Grants   int // "acquired" records
	Accepted int // operations the fence accepted
	Refused  int // operations the fence refused (stale tokens)
	Failed   int // operations without an answer from the database
	Overlaps int // overlaps between confirmed owners that began then
	// NextGrant is, per fault that hit the lock's owner, the time from
	// the fault's start to the next grant.
	NextGrant []time.Duration
	// Removal is, per fault after which the node was removed, the time
	// from the fault's start to the removal.
	Removal []time.Duration
}

// ClusterReport is what CheckCluster found.
type ClusterReport struct {
	*Report
	ByFault map[string]*FaultStats // by Label; "before" is the run up to the first fault
}

// String summarizes the report: the run's figures, then a row per kind
// of fault.
func (r *ClusterReport) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "workers %d, grants %d (ownership intervals the workers logged)\n", r.Workers, r.Grants)
	fmt.Fprintf(&b, "faults injected: %s\n", formatCounts(r.Faults))
	fmt.Fprintf(&b, "writes and reads: %d accepted (%d reads), %d stale refused by the fence (%d reads), %d failed; %d sent after the holder had lost the lock\n",
		r.Accepted, r.Reads, r.Rejected, r.ReadsRef, r.Failed, r.Late)
	fmt.Fprintf(&b, "pairs of shared holders at once: %d, of them claims of one session: %d\n", r.ReaderPairs, r.SessionPairs)
	fmt.Fprintf(&b, "version 2 sessions lost: %d, ending %d held claims (at most %d at once)\n", r.SessionLosses, r.LostClaims, r.MaxLostClaims)
	fmt.Fprintf(&b, "%-26s %6s %6s %9s %8s %6s %8s  %-16s %s", "fault", "faults", "grants", "accepted", "refused", "failed", "overlaps", "to removal", "owner hit: to next grant")
	for _, k := range slices.Sorted(maps.Keys(r.ByFault)) {
		s := r.ByFault[k]
		fmt.Fprintf(&b, "\n%-26s %6d %6d %9d %8d %6d %8d  %-16s %s", k, s.Faults, s.Grants, s.Accepted, s.Refused, s.Failed, s.Overlaps, seconds(s.Removal), seconds(s.NextGrant))
	}
	fmt.Fprintf(&b, "\nviolations: %d", len(r.Violations))
	const shown = 20 // an unsafe setup has hundreds
	for _, v := range r.Violations[:min(len(r.Violations), shown)] {
		fmt.Fprintf(&b, "\n  - %s", v)
	}
	if len(r.Violations) > shown {
		fmt.Fprintf(&b, "\n  ... and %d more", len(r.Violations)-shown)
	}
	return b.String()
}

// CheckCluster checks a run of the cluster suite, in which every fault
// hits a node and none a worker: properties 1, 2, 3 and 5 of Check. A
// worker is never frozen and its clock never stops, so by the client
// rule it gives up its claim (its context is cancelled) 0.8 of a lease
// after its last confirmed heartbeat whatever happens to its node or its
// connection; an ownership interval (from fn's start to the loss seen or
// fn's return) is the worker's belief, and two conflicting ones must not
// overlap, with no exception: the death of the node a worker is
// connected to resets the worker's connection, but the lock's owner
// keeps a relayed claim until its lease has passed unless the relaying
// node said that the client hung up. (The nodes' audit logs are not
// checked: property 4 is about one server's log.)
func CheckCluster(in Input, faults []ClusterFault) *ClusterReport {
	in.Faults = nil
	r := &Report{RejectedBy: map[string]int{}, Overlaps: map[string]int{}, Faults: map[string]int{}, GrantsBy: map[string]int{}}
	for _, f := range faults {
		r.Faults[f.Label()]++
	}
	ivs := intervals(in, r)
	checkFence(in, ivs, r)
	checkExclusion(in, ivs, r)
	checkWrites(in, ivs, r)
	checkSessions(in, ivs, r)
	r.Grants = len(ivs)

	cr := &ClusterReport{Report: r, ByFault: map[string]*FaultStats{}}
	fs := slices.Clone(faults)
	slices.SortFunc(fs, func(a, b ClusterFault) int { return int(a.Start - b.Start) })
	// window returns the stats of the fault in force at t.
	window := func(t int64) *FaultStats {
		label := "before"
		for _, f := range fs {
			if f.Start > t {
				break
			}
			label = f.Label()
		}
		s := cr.ByFault[label]
		if s == nil {
			s = &FaultStats{}
			cr.ByFault[label] = s
		}
		return s
	}
	for _, f := range fs {
		window(f.Start).Faults++
	}
	var grants []int64
	for _, rec := range in.Records {
		switch {
		case rec.Ev == "acquired":
			window(rec.T).Grants++
			grants = append(grants, rec.T)
		case rec.Ev == "write" && rec.Err != "":
			window(rec.T0).Failed++
		case rec.Ev == "write" && rec.OK:
			window(rec.T0).Accepted++
		case rec.Ev == "write":
			window(rec.T0).Refused++
		}
	}
	slices.Sort(grants)
	for _, f := range fs {
		if !f.OwnerLost {
			continue
		}
		if i, _ := slices.BinarySearch(grants, f.Start); i < len(grants) {
			s := window(f.Start)
			s.NextGrant = append(s.NextGrant, time.Duration(grants[i]-f.Start))
		}
	}
	for _, f := range fs {
		if f.Removed != 0 {
			s := window(f.Start)
			s.Removal = append(s.Removal, time.Duration(f.Removed-f.Start))
		}
	}
	for _, p := range overlaps(ivs) {
		window(p[1].start).Overlaps++
	}
	return cr
}

// seconds formats durations as "1.2s 3.4s", or "-" for none.
func seconds(ds []time.Duration) string {
	if len(ds) == 0 {
		return "-"
	}
	var out []string
	for _, d := range ds {
		out = append(out, fmt.Sprintf("%.1fs", d.Seconds()))
	}
	return strings.Join(out, " ")
}

// overlaps returns the pairs of conflicting ownership intervals that
// overlap: the earlier token's still open when the later token's began
// (two shared claims do not conflict).
func overlaps(ivs map[ivKey]*interval) [][2]*interval {
	all := slices.Collect(maps.Values(ivs))
	slices.SortFunc(all, func(a, b *interval) int {
		if a.tok != b.tok {
			if a.tok < b.tok {
				return -1
			}
			return 1
		}
		return strings.Compare(a.w, b.w)
	})
	var out [][2]*interval
	for i, a := range all {
		for _, b := range all[i+1:] {
			if b.tok == a.tok || a.end <= b.start || (a.shared && b.shared) {
				continue
			}
			out = append(out, [2]*interval{a, b})
		}
	}
	return out
}
