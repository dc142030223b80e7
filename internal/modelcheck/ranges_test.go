package modelcheck

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// TestRangesModel explores the real range-lock table. The first bounds
// run everywhere, the race detector included; the larger ones only
// without it. State counts are pinned: a change means the model or the
// table's reachable behaviour changed, which deserves a look.
func TestRangesModel(t *testing.T) {
	t.Parallel()
	type bound struct {
		cfg    RangeConfig
		states int
	}
	bounds := []bound{
		{RangeConfig{Owners: 2, Positions: 1}, 242},
		{RangeConfig{Owners: 2, Positions: 1, Flock: true, NoWait: true}, 1910},
	}
	if !raceEnabled {
		bounds = append(bounds,
			bound{RangeConfig{Owners: 2, Positions: 2}, 4176},
			bound{RangeConfig{Owners: 3, Positions: 1}, 7574},
			bound{RangeConfig{Owners: 3, Sessions: 2, Positions: 1}, 7110},
			bound{RangeConfig{Owners: 2, Positions: 1, Keys: 2}, 19616},
		)
	}
	for _, b := range bounds {
		t.Run(b.cfg.String(), func(t *testing.T) {
			rep := CheckRanges(b.cfg)
			t.Log(rep)
			if rep.Violation != nil {
				t.Fatal(rep.Violation)
			}
			if rep.States < 100 || rep.Transitions <= rep.States {
				t.Fatalf("explored only %d states and %d transitions", rep.States, rep.Transitions)
			}
			if b.states != 0 && rep.States != b.states {
				t.Errorf("%d states, want %d", rep.States, b.states)
			}
		})
	}
}

func TestRangeMutantsAreCaught(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mutation string
		cfg      RangeConfig
		property string
		steps    int
		mention  string
	}{
		{MutOvertakeWaiter, RangeConfig{Owners: 2, Positions: 1}, PropFairFIFO, 3, "o1 was granted write [0,0] on a ahead of o2"},
		{MutOvertakeWaiter, RangeConfig{Owners: 3, Positions: 2, NoWait: true}, PropFairFIFO, 3, "ahead of"},
		{MutNoDeadlockCheck, RangeConfig{Owners: 2, Positions: 1}, PropDeadlockComplete, 3, "a deadlock was queued"},
		{MutNoDeadlockCheck, RangeConfig{Owners: 2, Positions: 1, Keys: 2}, PropDeadlockComplete, 3, "a deadlock was queued"},
		{MutFalseDeadlock, RangeConfig{Owners: 3, Positions: 1}, PropDeadlockSound, 4, "o3's request was refused as a deadlock"},
		{MutUnlockWhole, RangeConfig{Owners: 2, Positions: 1}, PropRangeSemantics, 2, "want [s1/o10 read [1,EOF]]"},
	} {
		t.Run(tc.mutation+"/"+tc.cfg.String(), func(t *testing.T) {
			tc.cfg.New = NewRangeMutant(tc.mutation)
			rep := CheckRanges(tc.cfg)
			t.Logf("%v", rep)
			v := rep.Violation
			if v == nil {
				t.Fatalf("the checker found no violation in %d states", rep.States)
			}
			if v.Property != tc.property {
				t.Fatalf("violated %q, want %q", v.Property, tc.property)
			}
			if v.Steps() != tc.steps {
				t.Errorf("counterexample has %d steps, want the shortest, %d", v.Steps(), tc.steps)
			}
			if !strings.Contains(v.Error(), tc.mention) {
				t.Errorf("counterexample does not mention %q", tc.mention)
			}
		})
	}
	if NewRangeMutant("nope") != nil {
		t.Error("an unknown mutation was accepted")
	}
}

// Below the size at which a mutation can act, the wrapped table must
// pass, or the test above would prove nothing about the checker: a false
// deadlock needs an owner that waits for a third one.
func TestRangeMutantsAreOtherwiseFaithful(t *testing.T) {
	t.Parallel()
	cfg := RangeConfig{Owners: 2, Positions: 1, Flock: true, NoWait: true, New: NewRangeMutant(MutFalseDeadlock)}
	if rep := CheckRanges(cfg); rep.Violation != nil {
		t.Errorf("%s: %v", MutFalseDeadlock, rep.Violation)
	} else {
		t.Log(rep)
	}
}

// TestRangesRandomWalks goes beyond the exhaustive bounds: random walks
// over larger configurations (three owners in two sessions, three byte
// positions, two files, flock and non-blocking requests), every step
// checked fully against the reference record. A failing walk is printed
// step by step.
func TestRangesRandomWalks(t *testing.T) {
	t.Parallel()
	walks, steps := 400, 40
	if raceEnabled {
		walks = 100
	}
	for _, cfg := range []RangeConfig{
		{Owners: 3, Sessions: 2, Positions: 3, Keys: 2, Flock: true, NoWait: true},
		{Owners: 3, Positions: 3},
	} {
		cfg = cfg.withDefaults()
		rnd := rand.New(rand.NewPCG(1, uint64(cfg.Owners*10+cfg.Keys)))
		for w := range walks {
			r := newRangeRun(&cfg)
			var path []rangeOp
			for range steps {
				ops := r.enabled()
				if len(ops) == 0 {
					break
				}
				op := ops[rnd.IntN(len(ops))]
				path = append(path, op)
				if _, f := r.step(op, true); f != nil {
					t.Fatalf("%s, walk %d: %s: %s\n%s", cfg, w, f.prop, f.detail, strings.Join(describeRanges(&cfg, path), "\n"))
				}
			}
		}
		t.Logf("%s: %d walks of up to %d steps", cfg, walks, steps)
	}
}
