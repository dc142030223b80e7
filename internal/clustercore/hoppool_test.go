package clustercore

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// hopStep is one event given to a HopPool (testdata/hoppool.txt says
// how a step reads).
type hopStep struct {
	at   int // ms since t0
	op   string
	h    int  // the handle of dial, remove, return
	born int  // return: when h was born
	live bool // fillnext, dial: the caller still has the pool; sweep: its owner is listed
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

// hopParse reads a step: "AT OP [h=H] [born=B] [live] => RESULT | len=L target=T".
func hopParse(line string) (s hopStep, err error) {
	left, right, ok := strings.Cut(line, "=>")
	res, state, ok2 := strings.Cut(right, "|")
	fs := strings.Fields(left)
	if !ok || !ok2 || len(fs) < 2 {
		return s, fmt.Errorf("want AT OP ... => RESULT | len=L target=T")
	}
	if s.at, err = strconv.Atoi(fs[0]); err != nil {
		return s, err
	}
	s.op, s.res = fs[1], strings.TrimSpace(res)
	for _, f := range fs[2:] {
		k, v, _ := strings.Cut(f, "=")
		switch k {
		case "live":
			s.live = true
		case "h":
			s.h, err = strconv.Atoi(v)
		case "born":
			s.born, err = strconv.Atoi(v)
		default:
			err = fmt.Errorf("unknown argument %q", f)
		}
		if err != nil {
			return s, err
		}
	}
	_, err = fmt.Sscanf(strings.TrimSpace(state), "len=%d target=%d", &s.len, &s.tgt)
	return s, err
}

// hopScenario is a named run of steps from testdata/hoppool.txt.
type hopScenario struct {
	name  string
	steps []hopStep
}

func hopScenarios(t *testing.T) []hopScenario {
	b, err := os.ReadFile("testdata/hoppool.txt")
	if err != nil {
		t.Fatal(err)
	}
	var out []hopScenario
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "== "):
			out = append(out, hopScenario{name: line[3:]})
		case len(out) == 0:
			t.Fatalf("line %d: a step before the first scenario", i+1)
		case strings.HasPrefix(line, "filled "):
			n, err := strconv.Atoi(line[len("filled "):])
			if err != nil {
				t.Fatalf("line %d: %v", i+1, err)
			}
			out[len(out)-1].steps = append(out[len(out)-1].steps, hopFilled(n)...)
		default:
			s, err := hopParse(line)
			if err != nil {
				t.Fatalf("line %d: %q: %v", i+1, line, err)
			}
			out[len(out)-1].steps = append(out[len(out)-1].steps, s)
		}
	}
	if len(out) == 0 {
		t.Fatal("testdata/hoppool.txt has no scenario")
	}
	return out
}

func TestHopPoolPolicy(t *testing.T) {
	for _, c := range hopScenarios(t) {
		t.Run(c.name, func(t *testing.T) {
			var p HopPool[int]
			t0 := time.Unix(1000, 0)
			for i, s := range c.steps {
				if got := hopRun(&p, t0, s); got != s.res {
					t.Fatalf("step %d (%s at %d ms): got %q, want %q", i, s.op, s.at, got, s.res)
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
