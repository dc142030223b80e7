package rangelock_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/locktable"
	"github.com/batonlock/baton/internal/rangelock"
)

// BenchmarkSetUnlock is the uncontended path: a non-blocking lock of one
// range on a free key, then its unlock, leaving the table empty.
func BenchmarkSetUnlock(b *testing.B) {
	table := rangelock.New(&locktable.CounterTokens{})
	req := rangelock.Request{Key: "/data/db.sqlite", NS: rangelock.POSIX, Owner: ownA, Type: rangelock.Write, Range: rng(100, 199)}
	setUnlock(b, table, req)
}

// setUnlock locks req and unlocks it again, b.N times.
func setUnlock(b *testing.B, table *rangelock.Table, req rangelock.Request) {
	b.Helper()
	b.ReportAllocs()
	for b.Loop() {
		if ans, _, err := table.Set(epoch, req); err != nil || ans.State != rangelock.Granted {
			b.Fatalf("Set: %+v, %v", ans, err)
		}
		if _, err := table.Unlock(epoch, req.Key, req.NS, req.Owner, req.Range); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkNamedClaimRelease is the same for a named exclusive claim on an
// open version 2 session of the lock table, for comparison.
func BenchmarkNamedClaimRelease(b *testing.B) {
	table := locktable.New(&locktable.CounterTokens{})
	if err := table.Open(epoch, 1, locktable.SessionParams{Lease: time.Minute}); err != nil {
		b.Fatal(err)
	}
	req := locktable.ClaimRequest{Name: "/data/db.sqlite", Mode: locktable.Exclusive, NoWait: true}
	b.ReportAllocs()
	for b.Loop() {
		if st, _, err := table.Claim(epoch, 1, 1, req); err != nil || st.State != locktable.Owner {
			b.Fatalf("Claim: %+v, %v", st, err)
		}
		if _, err := table.Release(epoch, locktable.Key{Session: 1, Claim: 1}); err != nil {
			b.Fatal(err)
		}
	}
}

// crowded returns a table with owners owners holding perOwner one-byte
// ranges each on one key, interleaved over the file with one-byte gaps
// (so nothing merges): even owners hold writes, odd ones reads. The
// byte at offset 2·(j·owners+i) is owner i's j-th range; odd offsets are
// free.
func crowded(b *testing.B, owners, perOwner int) *rangelock.Table {
	b.Helper()
	table := rangelock.New(&locktable.CounterTokens{})
	for j := range perOwner {
		for i := range owners {
			typ := rangelock.Read
			if i%2 == 0 {
				typ = rangelock.Write
			}
			off := uint64(2 * (j*owners + i))
			req := rangelock.Request{Key: "k", NS: rangelock.POSIX, Owner: rangelock.Owner{Session: rangelock.SessionID(i + 1), ID: 1},
				Type: typ, Range: rng(off, off)}
			if ans, _, err := table.Set(epoch, req); err != nil || ans.State != rangelock.Granted {
				b.Fatalf("Set: %+v, %v", ans, err)
			}
		}
	}
	if n := table.Counts().Ranges; n != owners*perOwner {
		b.Fatalf("%d ranges, want %d", n, owners*perOwner)
	}
	return table
}

// The 100,000-range benchmarks: 100 owners hold 1,000 ranges each on one
// key. A query or set on a free byte in the middle conflicts with
// nobody, so it visits every owner: the worst case.
const (
	crowdOwners   = 100
	crowdPerOwner = 1000
	crowdMiddle   = crowdOwners * crowdPerOwner // a free (odd) offset in the middle
	crowdMiddleUp = crowdMiddle + 1
	// crowdLast is a byte the last owner (odd: a reader) holds in the
	// middle: 2·(499·100 + 99).
	crowdLast = 2 * ((crowdPerOwner/2-1)*crowdOwners + crowdOwners - 1)
)

var outsider = rangelock.Owner{Session: 1000, ID: 1}

func BenchmarkQuery100kRanges(b *testing.B) {
	table := crowded(b, crowdOwners, crowdPerOwner)
	b.ReportAllocs()
	for b.Loop() {
		if l, ok, err := table.Query("k", rangelock.POSIX, outsider, rangelock.Write, rng(crowdMiddleUp, crowdMiddleUp)); ok || err != nil {
			b.Fatalf("Query of a free byte: %v, %v, %v", l, ok, err)
		}
	}
}

func BenchmarkQueryConflict100kRanges(b *testing.B) {
	table := crowded(b, crowdOwners, crowdPerOwner)
	b.ReportAllocs()
	for b.Loop() {
		// The byte before is the last owner's (a read): a write conflicts
		// with it, after every other owner was asked.
		if _, ok, err := table.Query("k", rangelock.POSIX, outsider, rangelock.Write, rng(crowdLast-1, crowdLast+1)); !ok || err != nil {
			b.Fatalf("Query: %v, %v", ok, err)
		}
	}
}

// BenchmarkSetUnlock100kRanges locks a free byte in the middle for one
// of the owners (its slice of 1,000 ranges grows by one) and unlocks it.
func BenchmarkSetUnlock100kRanges(b *testing.B) {
	table := crowded(b, crowdOwners, crowdPerOwner)
	o := rangelock.Owner{Session: 1, ID: 1}
	req := rangelock.Request{Key: "k", NS: rangelock.POSIX, Owner: o, Type: rangelock.Write, Range: rng(crowdMiddleUp, crowdMiddleUp)}
	setUnlock(b, table, req)
}

// BenchmarkSetUnlockOneOwner100kRanges is the worst case of the slices:
// one owner holds all 100,000 ranges, and a lock in the middle moves half
// of them.
func BenchmarkSetUnlockOneOwner100kRanges(b *testing.B) {
	table := crowded(b, 1, crowdOwners*crowdPerOwner)
	o := rangelock.Owner{Session: 1, ID: 1}
	req := rangelock.Request{Key: "k", NS: rangelock.POSIX, Owner: o, Type: rangelock.Write, Range: rng(crowdMiddleUp, crowdMiddleUp)}
	setUnlock(b, table, req)
}

// BenchmarkConflict100kRanges is a non-blocking request that conflicts
// (EAGAIN): an outsider's write over a byte the last owner reads.
func BenchmarkConflict100kRanges(b *testing.B) {
	table := crowded(b, crowdOwners, crowdPerOwner)
	req := rangelock.Request{Key: "k", NS: rangelock.POSIX, Owner: outsider, Type: rangelock.Write, Range: rng(crowdLast-1, crowdLast+1)}
	b.ReportAllocs()
	for b.Loop() {
		if ans, _, err := table.Set(epoch, req); err != nil || ans.State != rangelock.Conflict {
			b.Fatalf("Set: %+v, %v", ans, err)
		}
	}
}

// BenchmarkWaitOneByte is the cost of one more waiting request on a byte
// that queue waiting write requests of distinct owners already wait for,
// each owner holding a byte of its own (so that the deadlock search runs):
// the new request and its cancel.
func BenchmarkWaitOneByte(b *testing.B) {
	for _, queue := range []int{100, 2400} {
		b.Run(strconv.Itoa(queue), func(b *testing.B) {
			table := rangelock.New(&locktable.CounterTokens{})
			own := func(i int) rangelock.Owner { return rangelock.Owner{Session: 1, ID: rangelock.OwnerID(i)} }
			holder := rangelock.Owner{Session: 2, ID: 1}
			if _, _, err := table.Set(epoch, rangelock.Request{Key: "k", NS: rangelock.POSIX, Owner: holder, Type: rangelock.Write, Range: rng(0, 0)}); err != nil {
				b.Fatal(err)
			}
			for i := range queue + 1 {
				off := uint64(i + 1)
				if _, _, err := table.Set(epoch, rangelock.Request{Key: "k", NS: rangelock.POSIX, Owner: own(i), Type: rangelock.Write, Range: rng(off, off)}); err != nil {
					b.Fatal(err)
				}
			}
			wait := func(i int, tag uint64) {
				if ans, _, err := table.Set(epoch, rangelock.Request{Key: "k", NS: rangelock.POSIX, Owner: own(i), Type: rangelock.Write, Range: rng(0, 0), Wait: true, Tag: tag}); err != nil || ans.State != rangelock.Waiting {
					b.Fatalf("Set: %+v, %v", ans, err)
				}
			}
			for i := range queue {
				wait(i, uint64(i))
			}
			b.ReportAllocs()
			for b.Loop() {
				wait(queue, uint64(queue))
				if _, err := table.Cancel(epoch, 1, uint64(queue)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
