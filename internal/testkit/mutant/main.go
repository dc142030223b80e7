// Command mutant is a minimal version 2 client and its own test kit
// adapter, written straight from docs/protocol.md, that can be told to
// break one rule of the client rule (BATON_TESTKIT_MUTANT). The kit's
// tests run it to show that each scenario fails for the client bug it
// is meant to catch; with BATON_TESTKIT_MUTANT unset it keeps every rule
// and passes. It falls back to version 1 when the server answers its
// opening ERROR 0x10. It does not support resumable sessions, and says so.
//
// Mutations:
//
//	anchor-at-arrival  the anchor is an answer's arrival, not its request's send
//	never-lost         never tells the work (no lost line, no give-up)
//	close-first        at a give-up, closes the connection, then tells the work
//	close-at-give-up   at a give-up, tells the work and closes at once, while it stops
//	ignore-violation   accepts frames that break the order of answers
//	ignore-revoked     ignores REVOKED
//	push-confirms      a PROMOTED moves the anchor
//	no-ping            sends no PING
//	no-push-counting   version 1: takes the push after WAITING for a heartbeat's answer
//	strict-release     takes a REVOKED that crossed its RELEASE for a violation
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/batonlock/baton/protocol"
)

func emit(v map[string]any) {
	b, _ := json.Marshal(v)
	os.Stdout.Write(append(b, '\n'))
}

func envMS(name string) time.Duration {
	n, _ := strconv.Atoi(os.Getenv(name))
	return time.Duration(n) * time.Millisecond
}

type req struct {
	typ   protocol.Type
	seq   uint64
	claim uint32
	sent  time.Time
}

type rxFrame struct {
	f   protocol.Frame
	err error
	at  time.Time
}

var mode = os.Getenv("BATON_TESTKIT_MUTANT")

func main() {
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	if os.Getenv("BATON_TESTKIT_RESUMABLE") == "1" {
		emit(map[string]any{"event": "unsupported", "feature": "resumable"})
		drain(lines)
		return
	}
	L := envMS("BATON_TESTKIT_LEASE_MS")
	stop := envMS("BATON_TESTKIT_STOP_MS")
	conn, err := net.Dial("tcp", os.Getenv("BATON_TESTKIT_ADDR"))
	if err != nil {
		emit(map[string]any{"event": "error", "message": err.Error()})
		drain(lines)
		return
	}
	t0 := time.Now()
	b := protocol.AppendPreamble(nil)
	b = protocol.AppendHello(b, uint32(L.Milliseconds()), "mutant "+mode)
	b = protocol.AppendClaim(b, 1, protocol.ModeExclusive, 0, 0, os.Getenv("BATON_TESTKIT_NAME"))
	conn.Write(b)
	pending := []req{{typ: protocol.TypeHello, sent: t0}, {typ: protocol.TypeClaim, claim: 1, sent: t0}}
	anchor := t0

	frames := make(chan rxFrame, 16)
	go func() {
		br := bufio.NewReader(conn)
		f, err := protocol.ReadHelloAnswer(br)
		for {
			frames <- rxFrame{f, err, time.Now()}
			if err != nil {
				return
			}
			f, err = protocol.ReadServerFrameV2(br)
		}
	}()

	state := "pending" // queued, held
	var seq uint64
	pingInFlight := false
	nextPing := t0.Add(L / 4)
	lost := func(reason string) { loseAndExit(conn, reason, stop, anchor.Add(L), lines) }
	violation := func(f protocol.Frame) {
		if mode != "ignore-violation" {
			lost("protocol violation: " + f.String())
		}
	}
	for {
		deadline := anchor.Add(L * 8 / 10)
		wake := deadline
		if mode == "never-lost" {
			wake = time.Now().Add(time.Hour)
		}
		if !pingInFlight && mode != "no-ping" && nextPing.Before(wake) {
			wake = nextPing
		}
		timer := time.NewTimer(time.Until(wake))
		select {
		case r := <-frames:
			timer.Stop()
			if r.err != nil {
				lost("connection: " + r.err.Error())
			}
			f := r.f
			switch f.Type {
			case protocol.TypeWelcome, protocol.TypePong, protocol.TypeGranted, protocol.TypeQueued,
				protocol.TypeBusy, protocol.TypeRefused, protocol.TypeReleased:
				if len(pending) == 0 || !fits(pending[0], f) {
					violation(f)
					continue
				}
				p := pending[0]
				pending = pending[1:]
				anchor = p.sent
				if mode == "anchor-at-arrival" {
					anchor = r.at
				}
				switch f.Type {
				case protocol.TypePong:
					pingInFlight = false
					nextPing = p.sent.Add(L / 4)
				case protocol.TypeGranted:
					state = "held"
					emit(map[string]any{"event": "held", "token": f.Token})
				case protocol.TypeQueued:
					state = "queued"
				case protocol.TypeReleased:
					state = "released"
					emit(map[string]any{"event": "released"})
				case protocol.TypeBusy, protocol.TypeRefused:
					emit(map[string]any{"event": "error", "message": f.String()})
				}
			case protocol.TypePromoted:
				if state != "queued" || f.Claim != 1 {
					violation(f)
					continue
				}
				state = "held"
				emit(map[string]any{"event": "held", "token": f.Token})
				if mode == "push-confirms" {
					anchor = r.at
				}
			case protocol.TypeRevoked:
				switch {
				case f.Claim != 1 || (state != "held" && state != "queued" && state != "releasing"):
					violation(f)
				case state == "releasing" && mode != "strict-release":
					// It crossed our RELEASE, whose RELEASED follows.
				case mode != "ignore-revoked":
					lost(fmt.Sprintf("revoked 0x%02x", uint8(f.Code)))
				}
			case protocol.TypeSessionError, protocol.TypeError:
				if len(pending) > 0 && pending[0].typ == protocol.TypeHello {
					// The opening is refused: nothing was held.
					conn.Close()
					if f.Type == protocol.TypeError && f.Code == protocol.CodeUnsupportedVersion {
						runV1(L, stop, lines)
						return
					}
					emit(map[string]any{"event": "error", "message": fmt.Sprintf("opening refused: %v", f)})
					drain(lines)
					return
				}
				lost(fmt.Sprintf("error 0x%02x", uint8(f.Code)))
			default:
				violation(f)
			}
		case now := <-timer.C:
			if mode != "never-lost" && now.After(deadline) {
				lost("heartbeat timeout")
			}
			if !pingInFlight && mode != "no-ping" && !now.Before(nextPing) {
				seq++
				pending = append(pending, req{typ: protocol.TypePing, seq: seq, sent: now})
				pingInFlight = true
				conn.Write(protocol.AppendPing(nil, seq))
			}
		case l, ok := <-lines:
			timer.Stop()
			switch {
			case !ok || l == "close":
				conn.Close()
				return
			case l == "release":
				state = "releasing"
				pending = append(pending, req{typ: protocol.TypeRelease, claim: 1, sent: time.Now()})
				conn.Write(protocol.AppendRelease(nil, 1))
			}
		}
	}
}

// loseAndExit tells the work the claim is lost, lets it stop, closes
// the connection (by closeBy at the latest), waits for close and exits;
// each in the order the mutation says.
func loseAndExit(conn net.Conn, reason string, stop time.Duration, closeBy time.Time, lines <-chan string) {
	switch mode {
	case "never-lost":
		conn.Close()
	case "close-first":
		conn.Close()
		time.Sleep(500 * time.Millisecond)
		emit(map[string]any{"event": "lost", "reason": reason})
	case "close-at-give-up":
		emit(map[string]any{"event": "lost", "reason": reason})
		conn.Close()
		time.Sleep(stop)
		emit(map[string]any{"event": "stopped"})
	default:
		emit(map[string]any{"event": "lost", "reason": reason})
		if stop > 0 {
			time.Sleep(max(min(stop, time.Until(closeBy)), 0))
			emit(map[string]any{"event": "stopped"})
		}
		conn.Close()
	}
	drain(lines)
	os.Exit(0)
}

// runV1 is the client after a fallback to version 1 (docs/protocol.md,
// "Client obligations"): one connection, one exclusive claim, heartbeats
// and the counting of replies around the push.
func runV1(L, stop time.Duration, lines <-chan string) {
	conn, err := net.Dial("tcp", os.Getenv("BATON_TESTKIT_ADDR"))
	if err != nil {
		emit(map[string]any{"event": "error", "message": err.Error()})
		drain(lines)
		return
	}
	t0 := time.Now()
	conn.Write(protocol.AppendAcquire(nil, protocol.Acquire{Version: protocol.Version, LeaseMS: uint32(L.Milliseconds()), Name: os.Getenv("BATON_TESTKIT_NAME")}))
	inflight, anchor := t0, t0 // the unanswered request's send (zero: none)
	var token uint64
	state := "pending"
	frames := make(chan rxFrame, 16)
	go func() {
		br := bufio.NewReader(conn)
		for {
			f, err := protocol.ReadServerFrame(br)
			frames <- rxFrame{protocol.Frame{Type: f.Type, Token: f.Token, Code: f.Code}, err, time.Now()}
			if err != nil {
				return
			}
		}
	}()
	lost := func(reason string) { loseAndExit(conn, reason, stop, anchor.Add(L), lines) }
	nextHB := t0.Add(L / 4)
	reply := func(now time.Time) {
		anchor = inflight
		if mode == "anchor-at-arrival" {
			anchor = now
		}
		nextHB = inflight.Add(L / 4)
		if nextHB.Before(now) {
			nextHB = now
		}
		inflight = time.Time{}
	}
	for {
		deadline := anchor.Add(L * 8 / 10)
		wake := deadline
		if mode == "never-lost" {
			wake = time.Now().Add(time.Hour)
		}
		if inflight.IsZero() && nextHB.Before(wake) {
			wake = nextHB
		}
		timer := time.NewTimer(time.Until(wake))
		select {
		case r := <-frames:
			timer.Stop()
			if r.err != nil {
				lost("connection: " + r.err.Error())
			}
			switch f := r.f; {
			case f.Type == protocol.TypeWaiting:
				if state == "held" || inflight.IsZero() {
					lost("protocol violation: WAITING")
				}
				state = "waiting"
				reply(r.at)
			case f.Type == protocol.TypeAcquired && state == "waiting" && mode != "no-push-counting":
				// The push: the heartbeat in flight stays in flight.
				state, token = "held", f.Token
				emit(map[string]any{"event": "held", "token": token})
			case f.Type == protocol.TypeAcquired:
				if inflight.IsZero() || (state == "held" && f.Token != token) {
					lost("protocol violation: ACQUIRED")
				}
				if state != "held" {
					state, token = "held", f.Token
					emit(map[string]any{"event": "held", "token": token})
				}
				reply(r.at)
			default:
				lost(fmt.Sprintf("error 0x%02x", uint8(f.Code)))
			}
		case now := <-timer.C:
			if mode != "never-lost" && now.After(deadline) {
				lost("heartbeat timeout")
			}
			if inflight.IsZero() && !now.Before(nextHB) {
				inflight = now
				conn.Write(protocol.AppendHeartbeat(nil))
			}
		case l, ok := <-lines:
			timer.Stop()
			switch {
			case !ok || l == "close":
				conn.Close()
				return
			case l == "release": // version 1 releases by closing
				conn.Close()
				emit(map[string]any{"event": "released"})
			}
		}
	}
}

// fits reports whether answer f answers request r.
func fits(r req, f protocol.Frame) bool {
	switch f.Type {
	case protocol.TypeWelcome:
		return r.typ == protocol.TypeHello
	case protocol.TypePong:
		return r.typ == protocol.TypePing && f.Seq == r.seq
	case protocol.TypeReleased:
		return r.typ == protocol.TypeRelease && f.Claim == r.claim
	default:
		return r.typ == protocol.TypeClaim && f.Claim == r.claim
	}
}

func drain(lines <-chan string) {
	for l := range lines {
		if l == "close" {
			return
		}
	}
}
