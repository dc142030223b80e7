package clientrule

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton/protocol"
)

// TestScenarios replays testdata/*.txt. Each file is a list of steps, one
// per line, times in milliseconds since an arbitrary origin:
//
//	new LEASE_MS [MIN_MS]        start a Rule (min 0: the default floor)
//	T acquire                    SentAcquire at T
//	T heartbeat                  SentHeartbeat at T
//	T recv WAITING               Received at T
//	T recv ACQUIRED TOKEN
//	T recv ERROR                 any other frame type
//	T expire                     Expire at T; the result is checked by "expired"
//	expect KEY=VALUE ...         check the outcome of the previous step and
//	                             the Rule: err=(nil|violation|expired)
//	                             expired=(true|false) state= token= anchor=
//	                             (MS|none) deadline= closeby= next=(MS|none)
//	                             inflight= interval= srtt=
//
// "#" starts a comment. A step with an error that no "expect err=" line
// checks fails the test, so a scenario cannot silently pass a violation.
func TestScenarios(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenarios: %v", err)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) { runScenario(t, file) })
	}
}

func runScenario(t *testing.T, file string) {
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	origin := time.Unix(1000, 0)
	at := func(ms string) time.Time {
		n, err := strconv.ParseFloat(ms, 64)
		if err != nil {
			t.Fatalf("bad time %q", ms)
		}
		return origin.Add(time.Duration(n * float64(time.Millisecond)))
	}
	msOf := func(tm time.Time) string {
		return strconv.FormatFloat(float64(tm.Sub(origin))/float64(time.Millisecond), 'f', -1, 64)
	}
	var (
		r        Rule
		lastErr  error
		checked  = true
		expired  bool
		lineNo   int
		scanner  = bufio.NewScanner(f)
		lastStep string
	)
	for scanner.Scan() {
		lineNo++
		line := scanner.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		where := fmt.Sprintf("%s:%d", filepath.Base(file), lineNo)
		if fields[0] != "expect" && !checked && lastErr != nil {
			t.Fatalf("%s: step %q returned %v, which no expect err= checked", where, lastStep, lastErr)
		}
		switch {
		case fields[0] == "new":
			lease, _ := strconv.Atoi(fields[1])
			minMS := 0
			if len(fields) > 2 {
				minMS, _ = strconv.Atoi(fields[2])
			}
			r = New(time.Duration(lease)*time.Millisecond, time.Duration(minMS)*time.Millisecond)
			lastErr, checked = nil, true
		case fields[0] == "expect":
			for _, kv := range fields[1:] {
				k, want, _ := strings.Cut(kv, "=")
				var got string
				switch k {
				case "err":
					checked = true
					switch {
					case lastErr == nil:
						got = "nil"
					case errors.Is(lastErr, ErrViolation):
						got = "violation"
					case errors.Is(lastErr, ErrExpired):
						got = "expired"
					default:
						got = lastErr.Error()
					}
				case "expired":
					got = strconv.FormatBool(expired)
				case "state":
					got = r.State().String()
				case "token":
					got = strconv.FormatUint(r.Token(), 10)
				case "anchor":
					got = "none"
					if a, ok := r.Anchor(); ok {
						got = msOf(a)
					}
				case "deadline":
					got = msOf(r.Deadline())
				case "closeby":
					got = msOf(r.CloseBy())
				case "next":
					got = "none"
					if n, ok := r.NextHeartbeat(); ok {
						got = msOf(n)
					}
				case "inflight":
					got = strconv.FormatBool(r.InFlight())
				case "interval":
					got = strconv.FormatFloat(float64(r.Interval())/float64(time.Millisecond), 'f', -1, 64)
				case "srtt":
					got = strconv.FormatFloat(float64(r.SRTT())/float64(time.Millisecond), 'f', -1, 64)
				default:
					t.Fatalf("%s: unknown key %q", where, k)
				}
				if got != want {
					t.Errorf("%s: after %q: %s = %s, want %s (last error: %v)", where, lastStep, k, got, want, lastErr)
				}
			}
		default:
			if len(fields) < 2 {
				t.Fatalf("%s: bad step %q", where, line)
			}
			now := at(fields[0])
			lastStep, lastErr, checked = strings.Join(fields, " "), nil, false
			switch fields[1] {
			case "acquire":
				r.SentAcquire(now)
			case "heartbeat":
				r.SentHeartbeat(now)
			case "expire":
				expired = r.Expire(now)
			case "recv":
				var fr protocol.ServerFrame
				switch fields[2] {
				case "WAITING":
					fr.Type = protocol.TypeWaiting
				case "ACQUIRED":
					fr.Type = protocol.TypeAcquired
					fr.Token, _ = strconv.ParseUint(fields[3], 10, 64)
				default:
					fr.Type = protocol.TypeError
				}
				lastErr = r.Received(fr, now)
			default:
				t.Fatalf("%s: unknown step %q", where, line)
			}
		}
	}
	if !checked && lastErr != nil {
		t.Fatalf("%s: last step %q returned %v, which no expect err= checked", file, lastStep, lastErr)
	}
}

// TestHeartbeatMisusePanics pins the guards a driver relies on: a
// heartbeat can never be recorded while another frame is in flight.
func TestHeartbeatMisusePanics(t *testing.T) {
	mustPanic := func(name string, f func()) {
		t.Helper()
		defer func() {
			if recover() == nil {
				t.Errorf("%s did not panic", name)
			}
		}()
		f()
	}
	t0 := time.Unix(0, 0)
	r := New(time.Second, 0)
	mustPanic("heartbeat before ACQUIRE", func() { r.SentHeartbeat(t0) })
	r.SentAcquire(t0)
	mustPanic("second ACQUIRE", func() { r.SentAcquire(t0) })
	mustPanic("heartbeat while ACQUIRE in flight", func() { r.SentHeartbeat(t0) })
	if err := r.Received(protocol.ServerFrame{Type: protocol.TypeWaiting}, t0.Add(time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	r.SentHeartbeat(t0.Add(250 * time.Millisecond))
	mustPanic("two heartbeats in flight", func() { r.SentHeartbeat(t0.Add(500 * time.Millisecond)) })
}

// TestIntervalClamp checks interval = clamp(base − 2·srtt, floor, base)
// and floor = min(minInterval, base) over a grid of round trips.
func TestIntervalClamp(t *testing.T) {
	for _, tc := range []struct {
		lease, min time.Duration
	}{
		{2 * time.Second, 0},
		{2 * time.Second, 300 * time.Millisecond},
		{200 * time.Millisecond, 0}, // base 50ms < default floor
		{4 * time.Millisecond, 0},
	} {
		for _, rtt := range []time.Duration{0, time.Millisecond, 40 * time.Millisecond, 200 * time.Millisecond, time.Second} {
			r := New(tc.lease, tc.min)
			t0 := time.Unix(0, 0)
			r.SentAcquire(t0)
			if err := r.Received(protocol.ServerFrame{Type: protocol.TypeAcquired, Token: 1}, t0.Add(rtt)); err != nil {
				if rtt <= GiveUpAfter(tc.lease) {
					t.Fatal(err)
				}
				continue // a reply after the deadline is no sample
			}
			minI := tc.min
			if minI == 0 {
				minI = DefaultMinInterval
			}
			base := tc.lease / 4
			floor := min(minI, base)
			want := min(max(base-2*rtt, floor), base)
			if got := r.Interval(); got != want {
				t.Errorf("lease %v min %v rtt %v: interval %v, want %v", tc.lease, tc.min, rtt, got, want)
			}
			if r.Interval() < floor || r.Interval() > base {
				t.Errorf("lease %v min %v rtt %v: interval %v outside [%v, %v]", tc.lease, tc.min, rtt, r.Interval(), floor, base)
			}
		}
	}
}
