package server_test

// Benchmarks of the two latencies users feel, each measured beside its
// raw-TCP floor in the same run so the ratio is meaningful on any machine:
//
//	go test -run '^$' -bench . -benchtime 2000x ./server
//
// and the memory of idle sessions, measured in a child process so that
// the client side's sockets do not count:
//
//	go test -run '^$' -bench IdleSessionMemory ./server

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonlock/baton/protocol"
	"github.com/batonlock/baton/server"
)

func benchServer(b *testing.B) string {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &server.Server{}
	// Not the process's first second, in which ACQUIRE waits for the
	// token rule.
	time.Sleep(time.Until(server.TokenGate(srv)))
	go srv.Serve(ln)
	b.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// benchEcho is the raw floor: a goroutine per connection that echoes
// every byte, the same shape as a baton session.
func benchEcho(b *testing.B) string {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				var buf [1]byte
				for {
					if _, err := c.Read(buf[:]); err != nil {
						return
					}
					if _, err := c.Write(buf[:]); err != nil {
						return
					}
				}
			}()
		}
	}()
	b.Cleanup(func() { ln.Close() })
	return ln.Addr().String()
}

func benchAcquire(b *testing.B, addr, name string) (net.Conn, protocol.ServerFrame) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := c.Write(protocol.AppendAcquire(nil, protocol.Acquire{Version: 1, LeaseMS: 60_000, Name: name})); err != nil {
		b.Fatal(err)
	}
	f, err := protocol.ReadServerFrame(c)
	if err != nil {
		b.Fatal(err)
	}
	return c, f
}

func p50(d []time.Duration) time.Duration {
	slices.Sort(d)
	return d[len(d)/2]
}

func p99(d []time.Duration) time.Duration {
	slices.Sort(d)
	return d[len(d)*99/100]
}

func report(b *testing.B, baton, floor []time.Duration, floorName string) {
	b.ReportMetric(float64(p50(baton).Microseconds()), "p50-µs")
	b.ReportMetric(float64(p99(baton).Microseconds()), "p99-µs")
	b.ReportMetric(float64(p50(floor).Microseconds()), floorName+"-p50-µs")
	b.ReportMetric(float64(p50(baton))/float64(p50(floor)), "ratio-p50")
}

// benchCloseRelay is the raw floor of a close-triggered handover: a
// connection that says "w" is parked; when a connection that said "o"
// reaches EOF, the server writes one byte to the parked one. Each hello
// is acknowledged so the client knows it was seen.
func benchCloseRelay(b *testing.B) string {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	parked := make(chan net.Conn, 1)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				var buf [1]byte
				if _, err := c.Read(buf[:]); err != nil {
					c.Close()
					return
				}
				c.Write(buf[:])
				if buf[0] == 'w' {
					parked <- c
					return
				}
				c.Read(buf[:]) // the owner's EOF
				c.Close()
				w := <-parked
				w.Write(buf[:])
				w.Close()
			}()
		}
	}()
	b.Cleanup(func() { ln.Close() })
	return ln.Addr().String()
}

func benchHello(b *testing.B, addr string, hello byte) net.Conn {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	buf := []byte{hello}
	c.Write(buf)
	if _, err := io.ReadFull(c, buf); err != nil {
		b.Fatal(err)
	}
	return c
}

// BenchmarkHandover: the owner closes its connection; the clock stops when
// the waiter has read ACQUIRED. Two floors are measured in the same run:
// one echo round trip on an open connection, and the raw close-triggered
// relay (close, peer sees EOF, writes one byte to another connection),
// which includes the kernel's cost of the owner's close.
func BenchmarkHandover(b *testing.B) {
	addr, echoAddr, relayAddr := benchServer(b), benchEcho(b), benchCloseRelay(b)
	echo, err := net.Dial("tcp", echoAddr)
	if err != nil {
		b.Fatal(err)
	}
	defer echo.Close()

	owner, _ := benchAcquire(b, addr, "handover")
	handover := make([]time.Duration, 0, b.N)
	rtt := make([]time.Duration, 0, b.N)
	relay := make([]time.Duration, 0, b.N)
	var one [1]byte
	for b.Loop() {
		waiter, f := benchAcquire(b, addr, "handover")
		if f.Type != protocol.TypeWaiting {
			b.Fatalf("waiter got %v", f)
		}
		start := time.Now()
		owner.Close()
		if f, err := protocol.ReadServerFrame(waiter); err != nil || f.Type != protocol.TypeAcquired {
			b.Fatalf("push: %v %v", f, err)
		}
		handover = append(handover, time.Since(start))
		owner = waiter

		start = time.Now()
		echo.Write(one[:])
		if _, err := io.ReadFull(echo, one[:]); err != nil {
			b.Fatal(err)
		}
		rtt = append(rtt, time.Since(start))

		rw := benchHello(b, relayAddr, 'w')
		ro := benchHello(b, relayAddr, 'o')
		start = time.Now()
		ro.Close()
		if _, err := io.ReadFull(rw, one[:]); err != nil {
			b.Fatal(err)
		}
		relay = append(relay, time.Since(start))
		rw.Close()
	}
	owner.Close()
	report(b, handover, rtt, "rtt")
	b.ReportMetric(float64(p50(relay).Microseconds()), "close-relay-p50-µs")
	b.ReportMetric(float64(p50(handover))/float64(p50(relay)), "ratio-to-close-relay")
}

// BenchmarkUncontendedAcquire: connect, ACQUIRE, read ACQUIRED, close.
// Floor: connect, one echo round trip, close.
func BenchmarkUncontendedAcquire(b *testing.B) {
	addr, echoAddr := benchServer(b), benchEcho(b)
	acquire := make([]time.Duration, 0, b.N)
	raw := make([]time.Duration, 0, b.N)
	var one [1]byte
	// A fresh name each time: the server may not yet have seen the
	// previous close, and this measures the free-lock path.
	i := 0
	for b.Loop() {
		i++
		name := "uncontended-" + strconv.Itoa(i)
		start := time.Now()
		c, f := benchAcquire(b, addr, name)
		if f.Type != protocol.TypeAcquired {
			b.Fatalf("got %v", f)
		}
		c.Close()
		acquire = append(acquire, time.Since(start))

		start = time.Now()
		e, err := net.Dial("tcp", echoAddr)
		if err != nil {
			b.Fatal(err)
		}
		e.Write(one[:])
		if _, err := io.ReadFull(e, one[:]); err != nil {
			b.Fatal(err)
		}
		e.Close()
		raw = append(raw, time.Since(start))
	}
	report(b, acquire, raw, "connect-rtt-close")
}

// BenchmarkAcquireUnderHeartbeatFlood: uncontended ACQUIREs (connect,
// ACQUIRE, read ACQUIRED, close) while four other clients, each holding a
// lock, send heartbeats as fast as they can (at most 1,024 unanswered
// each) and read the replies. The same ACQUIREs with the flooders idle,
// alternating in the same run, are the floor. It also reports how many
// heartbeats per second the server answered during the flood.
func BenchmarkAcquireUnderHeartbeatFlood(b *testing.B) {
	const (
		flooders = 4
		chunk    = 256
		window   = 1024
	)
	addr := benchServer(b)
	var flooding atomic.Bool
	stop := make(chan struct{})
	var wg sync.WaitGroup
	type flooder struct{ sent, answered atomic.Int64 }
	fl := make([]*flooder, flooders)
	idle := func() bool {
		for _, f := range fl {
			if f.answered.Load() < f.sent.Load() {
				return false
			}
		}
		return true
	}
	answered := func() (n int64) {
		for _, f := range fl {
			n += f.answered.Load()
		}
		return n
	}
	for i := range flooders {
		c, f := benchAcquire(b, addr, "flood-"+strconv.Itoa(i))
		if f.Type != protocol.TypeAcquired {
			b.Fatalf("flooder got %v", f)
		}
		me := &flooder{}
		fl[i] = me
		beats := bytes.Repeat(protocol.AppendHeartbeat(nil), chunk)
		wg.Go(func() { // reader: every reply is ACQUIRED
			buf := make([]byte, 64<<10)
			var got int64
			for {
				n, err := c.Read(buf)
				got += int64(n)
				me.answered.Store(got / protocol.AcquiredLen)
				if err != nil {
					return
				}
			}
		})
		wg.Go(func() {
			defer c.Close()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if !flooding.Load() || me.sent.Load()-me.answered.Load() > window-chunk {
					time.Sleep(20 * time.Microsecond)
					continue
				}
				me.sent.Add(chunk)
				if _, err := c.Write(beats); err != nil {
					return
				}
			}
		})
	}
	defer func() { close(stop); wg.Wait() }()

	var quiet, flood []time.Duration
	var floodTime time.Duration
	var floodAnswered int64
	i := 0
	for b.Loop() {
		i++
		on := i%2 == 0
		flooding.Store(on)
		if on {
			time.Sleep(time.Millisecond) // let the flood get going
		} else {
			for deadline := time.Now().Add(5 * time.Second); !idle() && time.Now().Before(deadline); {
				time.Sleep(100 * time.Microsecond)
			}
		}
		before := answered()
		start := time.Now()
		c, f := benchAcquire(b, addr, "flood-probe-"+strconv.Itoa(i))
		if f.Type != protocol.TypeAcquired {
			b.Fatalf("got %v", f)
		}
		c.Close()
		d := time.Since(start)
		if on {
			flood = append(flood, d)
			floodTime += d
			floodAnswered += answered() - before
		} else {
			quiet = append(quiet, d)
		}
	}
	if len(flood) == 0 || len(quiet) == 0 {
		return
	}
	b.ReportMetric(float64(p50(flood).Microseconds()), "flood-p50-µs")
	b.ReportMetric(float64(p99(flood).Microseconds()), "flood-p99-µs")
	b.ReportMetric(float64(p50(quiet).Microseconds()), "quiet-p50-µs")
	b.ReportMetric(float64(floodAnswered)/floodTime.Seconds(), "heartbeats/s")
}

// BenchmarkIdleSessionMemory holds 10,000 locks, each by its own idle
// session, in a child server process and reports the child's heap plus
// goroutine stacks per session.
func BenchmarkIdleSessionMemory(b *testing.B) {
	const sessions = 10_000
	perSession := measureIdleSessions(b, sessions)
	for b.Loop() {
		// The measurement above is one experiment, not a loop body.
	}
	b.ReportMetric(perSession, "bytes/session")
}

// TestMain-free child mode: when BATON_BENCH_CHILD is set, the test binary
// is a server that reports its memory on demand.
func init() {
	if os.Getenv("BATON_BENCH_CHILD") == "1" {
		benchChild()
		os.Exit(0)
	}
}

func benchChild() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	srv := &server.Server{}
	// Claims in the process's first second are answered QUEUED (the
	// token gate): announce the address only once the gate is open.
	time.Sleep(time.Until(server.TokenGate(srv)))
	go srv.Serve(ln)
	fmt.Println(ln.Addr())
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		switch in.Text() {
		case "mem":
			runtime.GC()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			fmt.Println(ms.HeapAlloc+ms.StackInuse, srv.Counts().Locks, benchRSS())
		case "quit":
			srv.Shutdown(context.Background())
			return
		}
	}
}

// benchChildProc is a child server process (benchChild) and its pipes.
type benchChildProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Scanner
	addr  string
}

// startBenchChild starts the test binary as a server in a child process;
// the caller defers stop.
func startBenchChild(b *testing.B) *benchChildProc {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "BATON_BENCH_CHILD=1")
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	p := &benchChildProc{cmd: cmd, stdin: stdin, out: bufio.NewScanner(stdout)}
	p.out.Scan()
	p.addr = p.out.Text()
	return p
}

// mem returns the child's live heap plus stacks after a GC, the locks it
// holds and its resident set.
func (p *benchChildProc) mem() (heap uint64, locks int, rss uint64) {
	fmt.Fprintln(p.stdin, "mem")
	p.out.Scan()
	f := strings.Fields(p.out.Text())
	heap, _ = strconv.ParseUint(f[0], 10, 64)
	locks, _ = strconv.Atoi(f[1])
	rss, _ = strconv.ParseUint(f[2], 10, 64)
	return heap, locks, rss
}

// stop shuts the child down and waits for it.
func (p *benchChildProc) stop() {
	fmt.Fprintln(p.stdin, "quit")
	p.stdin.Close()
	p.cmd.Wait()
}

func measureIdleSessions(b *testing.B, n int) float64 {
	b.Helper()
	child := startBenchChild(b)
	defer child.stop()
	before, _, _ := child.mem()
	conns := make([]net.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := range n {
		c, f := benchAcquire(b, child.addr, "idle-"+strconv.Itoa(i))
		if f.Type != protocol.TypeAcquired {
			b.Fatalf("got %v", f)
		}
		conns = append(conns, c)
	}
	after, locks, _ := child.mem()
	if locks != n {
		b.Fatalf("child holds %d locks, want %d", locks, n)
	}
	return float64(after-before) / float64(n)
}

// benchRSS is the process's resident set in bytes (Linux; 0 elsewhere).
func benchRSS() uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseUint(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}
