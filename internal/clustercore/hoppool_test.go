package clustercore

import (
	"fmt"
	"testing"
	"time"
)

// hopStep is one event given to a HopPool at `at` milliseconds, with
// what it must answer (res) and the pool's length and target after it.
type hopStep struct {
	at   int
	op   string // use, next, took, missed, refill, fill, fillnext, dial, dialfail, remove, return, arm, sweep, drain
	h    int    // the handle of dial, remove, return
	born int    // return: when h was born
	live bool   // fillnext, dial: the caller still has the pool; sweep: its owner is listed
	res  string
	len  int
	tgt  int
}

var hopTestPolicy = HopPolicy{MaxAge: 300 * time.Millisecond, IdleAfter: time.Second, RetryAfter: 100 * time.Millisecond}

func hopRun(p *HopPool[int], t0 time.Time, s hopStep) string {
	now := t0.Add(time.Duration(s.at) * time.Millisecond)
	pol := hopTestPolicy
	switch s.op {
	case "use":
		return fmt.Sprint(p.Use(now, pol))
	case "next":
		h, ok := p.Next()
		return fmt.Sprint(h, ok)
	case "took":
		p.Took()
		return ""
	case "missed":
		return fmt.Sprint(p.Missed(now, pol))
	case "refill":
		return fmt.Sprint(p.Refill(now, pol))
	case "fill":
		return fmt.Sprint(p.Fill(now, pol))
	case "fillnext":
		return fmt.Sprint(p.FillNext(now, pol, s.live))
	case "dial":
		return fmt.Sprint(p.Dialled(now, pol, s.h, true, s.live))
	case "dialfail":
		return fmt.Sprint(p.Dialled(now, pol, 0, false, s.live))
	case "remove":
		p.Remove(s.h)
		return ""
	case "return":
		return fmt.Sprint(p.Return(now, pol, s.h, t0.Add(time.Duration(s.born)*time.Millisecond)))
	case "arm":
		at, arm := p.Arm(pol)
		return fmt.Sprint(at.Sub(t0).Milliseconds(), arm)
	case "sweep":
		sw := p.Sweep(now, pol, s.live)
		return fmt.Sprintf("close=%v drained=%v forget=%v fill=%v", sw.Close, sw.Drained, sw.Forget, sw.Fill)
	case "drain":
		return fmt.Sprint(p.Drain())
	}
	panic("unknown op " + s.op)
}

// hopFilled is a pool used at 0 and filled with handles 1..n at
// 10, 20, ... ms, its filler still running.
func hopFilled(n int) []hopStep {
	steps := []hopStep{{at: 0, op: "use", res: "[]", tgt: HopPoolSize}, {at: 0, op: "missed", res: "true", tgt: HopPoolSize}}
	for i := 1; i <= n; i++ {
		steps = append(steps, hopStep{at: 10 * i, op: "dial", h: i, live: true, res: "true", len: i, tgt: HopPoolSize})
	}
	return steps
}

func TestHopPoolPolicy(t *testing.T) {
	cases := []struct {
		name  string
		steps []hopStep
	}{
		{"a relay takes the oldest; expired ones are dropped first", append(hopFilled(3),
			hopStep{at: 315, op: "use", res: "[1]", len: 2, tgt: 16},
			hopStep{at: 315, op: "next", res: "2 true", len: 1, tgt: 16},
			hopStep{at: 316, op: "next", res: "3 true", len: 0, tgt: 16},
			hopStep{at: 316, op: "next", res: "0 false", len: 0, tgt: 16},
		)},
		{"one filler at a time, up to the target", append(hopFilled(1),
			hopStep{at: 20, op: "fill", res: "false", len: 1, tgt: 16},
			hopStep{at: 20, op: "fillnext", live: true, res: "true", len: 1, tgt: 16},
			hopStep{at: 20, op: "fillnext", live: false, res: "false", len: 1, tgt: 16},
			hopStep{at: 20, op: "fill", res: "true", len: 1, tgt: 16},
		)},
		{"no fill once the owner was not relayed to for IdleAfter", append(hopFilled(1),
			hopStep{at: 1001, op: "fillnext", live: true, res: "false", len: 1, tgt: 16},
			hopStep{at: 1001, op: "fill", res: "false", len: 1, tgt: 16},
			hopStep{at: 1001, op: "use", res: "[1]", len: 0, tgt: 16},
			hopStep{at: 1001, op: "fill", res: "true", len: 0, tgt: 16},
		)},
		{"a failed dial ends the fill and holds fills off for RetryAfter", append(hopFilled(1),
			hopStep{at: 50, op: "dialfail", live: true, res: "false", len: 1, tgt: 16},
			hopStep{at: 149, op: "fill", res: "false", len: 1, tgt: 16},
			hopStep{at: 150, op: "fill", res: "true", len: 1, tgt: 16},
		)},
		{"a dial into a pool gone or full is not kept", append(hopFilled(1),
			hopStep{at: 50, op: "dial", h: 9, live: false, res: "false", len: 1, tgt: 16},
			hopStep{at: 50, op: "fill", res: "true", len: 1, tgt: 16},
		)},
		{"a refill waits until the pool is down to HopPoolLow", append(hopFilled(5),
			hopStep{at: 60, op: "fillnext", live: false, res: "false", len: 5, tgt: 16},
			hopStep{at: 60, op: "refill", res: "false", len: 5, tgt: 16},
			hopStep{at: 60, op: "next", res: "1 true", len: 4, tgt: 16},
			hopStep{at: 60, op: "refill", res: "true", len: 4, tgt: 16},
		)},
		{"a sweep finding expired connections lowers the target to what relays took", append(hopFilled(2),
			hopStep{at: 30, op: "fillnext", live: false, res: "false", len: 2, tgt: 16},
			hopStep{at: 310, op: "sweep", live: true, res: "close=[1] drained=false forget=false fill=true", len: 1, tgt: HopPoolLow},
		)},
		{"relays that took many keep a high target; the count restarts each sweep", append(hopFilled(2),
			hopStep{at: 30, op: "fillnext", live: false, res: "false", len: 2, tgt: 16},
			hopStep{at: 30, op: "took"}, hopStep{at: 30, op: "took"}, hopStep{at: 30, op: "took"},
			hopStep{at: 30, op: "took"}, hopStep{at: 30, op: "took"}, hopStep{at: 30, op: "took"},
			hopStep{at: 310, op: "sweep", live: true, res: "close=[1] drained=false forget=false fill=true", len: 1, tgt: 6},
			hopStep{at: 315, op: "dial", h: 3, live: true, res: "true", len: 2, tgt: 6},
			hopStep{at: 320, op: "sweep", live: true, res: "close=[2] drained=false forget=false fill=false", len: 1, tgt: HopPoolLow},
		)},
		{"a relay finding the pool empty doubles a learned target, up to HopPoolSize", append(hopFilled(1),
			hopStep{at: 20, op: "fillnext", live: false, res: "false", len: 1, tgt: 16},
			hopStep{at: 310, op: "sweep", live: true, res: "close=[1] drained=false forget=false fill=true", len: 0, tgt: 4},
			hopStep{at: 311, op: "missed", res: "false", tgt: 8},
			hopStep{at: 311, op: "missed", res: "false", tgt: 16},
			hopStep{at: 311, op: "missed", res: "false", tgt: 16},
		)},
		{"a sweep tops up a low pool but not one short of hops out on relays", append(hopFilled(6),
			hopStep{at: 70, op: "fillnext", live: false, res: "false", len: 6, tgt: 16},
			hopStep{at: 100, op: "sweep", live: true, res: "close=[] drained=false forget=false fill=false", len: 6, tgt: 16},
			hopStep{at: 100, op: "next", res: "1 true", len: 5, tgt: 16},
			hopStep{at: 100, op: "next", res: "2 true", len: 4, tgt: 16},
			hopStep{at: 100, op: "sweep", live: true, res: "close=[] drained=false forget=false fill=true", len: 4, tgt: 16},
		)},
		{"an owner no longer listed: all closed; forgotten once no filler runs", append(hopFilled(2),
			hopStep{at: 40, op: "sweep", live: false, res: "close=[1 2] drained=true forget=false fill=false", len: 0, tgt: 16},
			hopStep{at: 40, op: "fillnext", live: false, res: "false", len: 0, tgt: 16},
			hopStep{at: 40, op: "sweep", live: false, res: "close=[] drained=true forget=true fill=false", len: 0, tgt: 16},
		)},
		{"a pool not relayed to for IdleAfter is drained", append(hopFilled(2),
			hopStep{at: 30, op: "fillnext", live: false, res: "false", len: 2, tgt: 16},
			hopStep{at: 1001, op: "sweep", live: true, res: "close=[1 2] drained=true forget=true fill=false", len: 0, tgt: 16},
		)},
		{"the sweep is armed for the oldest's expiry or the pool's idling, and only moved earlier", []hopStep{
			{at: 0, op: "use", res: "[]", tgt: 16},
			{at: 0, op: "arm", res: "1000 true", tgt: 16},
			{at: 0, op: "arm", res: "1000 false", tgt: 16},
			{at: 0, op: "missed", res: "true", tgt: 16},
			{at: 10, op: "dial", h: 1, live: true, res: "true", len: 1, tgt: 16},
			{at: 10, op: "arm", res: "310 true", len: 1, tgt: 16},
			{at: 20, op: "dial", h: 2, live: true, res: "true", len: 2, tgt: 16},
			{at: 20, op: "arm", res: "310 false", len: 2, tgt: 16},
			{at: 310, op: "sweep", live: true, res: "close=[1] drained=false forget=false fill=false", len: 1, tgt: 4},
			{at: 310, op: "arm", res: "320 true", len: 1, tgt: 4},
		}},
		{"a hop put back is kept in birth order, unless too old or the pool full", append(hopFilled(2),
			hopStep{at: 30, op: "return", h: 7, born: 15, res: "true", len: 3, tgt: 16},
			hopStep{at: 315, op: "return", h: 8, born: 15, res: "false", len: 3, tgt: 16},
			hopStep{at: 40, op: "next", res: "1 true", len: 2, tgt: 16},
			hopStep{at: 40, op: "next", res: "7 true", len: 1, tgt: 16},
			hopStep{at: 40, op: "next", res: "2 true", len: 0, tgt: 16},
		)},
		{"a hop put back into a full pool is closed", append(hopFilled(HopPoolSize),
			hopStep{at: 200, op: "return", h: 99, born: 190, res: "false", len: HopPoolSize, tgt: 16},
			hopStep{at: 200, op: "remove", h: 3, len: HopPoolSize - 1, tgt: 16},
			hopStep{at: 200, op: "return", h: 99, born: 190, res: "true", len: HopPoolSize, tgt: 16},
		)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var p HopPool[int]
			t0 := time.Unix(1000, 0)
			for i, s := range c.steps {
				if got := hopRun(&p, t0, s); got != s.res {
					t.Fatalf("step %d (%s at %d ms): got %q, want %q", i, s.op, s.at, got, s.res)
				}
				if s.op == "took" {
					continue
				}
				if p.Len() != s.len || p.Target() != s.tgt {
					t.Fatalf("step %d (%s at %d ms): len %d target %d, want %d and %d", i, s.op, s.at, p.Len(), p.Target(), s.len, s.tgt)
				}
			}
		})
	}
}

func TestHopMaxAge(t *testing.T) {
	if got := HopMaxAge(10 * time.Second); got != 5*time.Second {
		t.Fatalf("HopMaxAge(10s) = %v, want half the io-timeout", got)
	}
}

// A pooled hop's replay: what it records, and when it may dial afresh.
func TestHopReplay(t *testing.T) {
	big := string(make([]byte, HopReplayMax))
	cases := []struct {
		name  string
		ops   []string // "w:<bytes>", "answer", "close", "timeout" (a failure on a deadline), "fail"
		want  string   // the last fail or timeout: the replay, or "no"
		first bool     // whether the last answer was the first
	}{
		{"a failure before the answer replays what was written", []string{"w:hdr", "w:acq", "fail"}, "hdracq", false},
		{"once only", []string{"w:hdr", "fail", "w:more", "fail"}, "no", false},
		{"not after the owner answered", []string{"w:hdr", "answer", "fail"}, "no", true},
		{"only the first answer is the first", []string{"w:hdr", "answer", "answer"}, "", false},
		{"a deadline does not use the one redial up", []string{"w:hdr", "timeout", "fail"}, "hdr", false},
		{"not on the relay's own deadline", []string{"w:hdr", "timeout"}, "no", false},
		{"not once the recording outgrew HopReplayMax", []string{"w:hdr", "w:" + big, "fail"}, "no", false},
		{"up to HopReplayMax is recorded", []string{"w:" + big, "fail"}, big, false},
		{"not once closed", []string{"w:hdr", "close", "fail"}, "no", false},
	}
	for _, c := range cases {
		var r HopReplay
		got, first := "", false
		for _, op := range c.ops {
			switch {
			case op == "answer":
				first = r.Answer()
			case op == "close":
				r.Close()
			case op == "fail", op == "timeout":
				replay, ok := r.Redial(op == "timeout")
				got = string(replay)
				if !ok {
					got = "no"
				}
			default:
				r.Wrote([]byte(op[2:]))
			}
		}
		if got != c.want || first != c.first {
			t.Errorf("%s: replay %.20q, first answer %v; want %.20q, %v", c.name, got, first, c.want, c.first)
		}
	}
	var r HopReplay
	if r.Close() || !r.Closed() {
		t.Errorf("Close before an answer: answered true or not closed")
	}
	r = HopReplay{}
	r.Answer()
	if !r.Close() {
		t.Errorf("Close after an answer: answered false")
	}
	// Nothing is recorded once no redial can send it: it would only
	// hold memory for the hop's life.
	for _, ops := range []func(*HopReplay){
		func(r *HopReplay) { r.Answer() },
		func(r *HopReplay) { r.Redial(false) },
	} {
		var r HopReplay
		r.Wrote([]byte("hdr"))
		ops(&r)
		r.Wrote([]byte("heartbeat"))
		if len(r.sent) != 0 {
			t.Errorf("recorded %q after the answer or the redial, want nothing", r.sent)
		}
	}
}
