package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/batonlock/baton/protocol"
)

// The push towards a million baton sessions. One process may hold only
// as many sockets as its open-file limit allows, so the client side is
// spread over child processes ("bench hold-raw"), each holding up to
// perChild bare protocol sessions: ACQUIRE with an hour-long lease, read
// ACQUIRED, then keep the socket and say nothing. To the server these
// are indistinguishable from the Go client, which would add a reader
// goroutine and a timer per lock on this side.

// holdRawMain is "bench hold-raw": hold -n sessions named m-FROM… and
// report progress on stdout ("HELD n" lines, then "END n reason"); then
// keep them until stdin closes.
func holdRawMain(args []string) {
	fs := flag.NewFlagSet("hold-raw", flag.ExitOnError)
	addr := fs.String("addr", "", "baton server address")
	from := fs.Int("from", 0, "index of the first lock name")
	n := fs.Int("n", 0, "sessions to hold")
	ips := fs.Int("ips", 64, "loopback source addresses to spread over")
	budget := fs.Duration("budget", time.Minute, "give up after this long")
	fs.Parse(args)
	raiseFileLimit()

	dialer := newSpreadDialer(*ips)
	dialer.next.Store(uint32(*from))
	ctx, cancel := context.WithTimeout(context.Background(), *budget)
	defer cancel()
	var (
		mu     sync.Mutex
		conns  []net.Conn
		next   atomic.Int64
		held   atomic.Int64
		fails  atomic.Int64
		reason atomic.Value
	)
	out := bufio.NewWriter(os.Stdout)
	var outMu sync.Mutex
	say := func(format string, args ...any) {
		outMu.Lock()
		fmt.Fprintf(out, format+"\n", args...)
		out.Flush()
		outMu.Unlock()
	}
	stop := func(r string) { reason.CompareAndSwap(nil, r) }
	var wg sync.WaitGroup
	for range 128 {
		wg.Go(func() {
			frame := make([]byte, 0, protocol.MaxAcquireLen)
			var reply [protocol.AcquiredLen]byte
			for reason.Load() == nil {
				if ctx.Err() != nil {
					stop("time budget used up")
					return
				}
				i := next.Add(1) - 1
				if i >= int64(*n) {
					return
				}
				c, err := dialer.DialContext(ctx, "tcp", *addr)
				if err == nil {
					frame = protocol.AppendAcquire(frame[:0], protocol.Acquire{Version: protocol.Version,
						LeaseMS: protocol.LeaseMS(batonCapacityLease), Name: fmt.Sprintf("m-%d", int64(*from)+i)})
					// An accepted connection answers at once; a silence of
					// seconds means the server is not accepting.
					c.SetDeadline(time.Now().Add(5 * time.Second))
					if _, err = c.Write(frame); err == nil {
						_, err = io.ReadFull(c, reply[:])
					}
					if err == nil && protocol.Type(reply[0]) != protocol.TypeAcquired {
						err = fmt.Errorf("reply type 0x%02x, want ACQUIRED", reply[0])
					}
					if err == nil {
						c.SetDeadline(time.Time{})
						mu.Lock()
						conns = append(conns, c)
						mu.Unlock()
						if h := held.Add(1); h%1000 == 0 {
							say("HELD %d", h)
						}
						continue
					}
					c.Close()
				}
				switch {
				case errors.Is(err, syscall.EMFILE), errors.Is(err, syscall.ENFILE):
					stop("this client process ran out of file descriptors: " + err.Error())
				case errors.Is(err, os.ErrDeadlineExceeded):
					stop("server stopped answering: connected, but no ACQUIRED within 5s")
				case fails.Add(1) > 50:
					stop("more than 50 failed sessions, last: " + err.Error())
				}
			}
		})
	}
	wg.Wait()
	r, _ := reason.Load().(string)
	if r == "" {
		r = "done"
	}
	say("END %d %s", held.Load(), r)
	// Hold until the harness is done with us.
	var b [1]byte
	os.Stdin.Read(b[:])
	mu.Lock()
	for _, c := range conns {
		c.Close()
	}
	mu.Unlock()
}

// batonPush holds ever more sessions on srv, a child process at a time,
// recording the server's memory after each child.
func batonPush(ctx context.Context, self string, srv *server, target int, budget time.Duration, minAvailKiB int64, fileLimit uint64) ([]*capPoint, func()) {
	idle, method, _ := srv.memory()
	start := time.Now()
	deadline := start.Add(budget)
	perChild := int(min(fileLimit, 1<<20)) - 200
	perChild = max(min(perChild, 50000), 1000)
	var children []*exec.Cmd
	var stdins []io.WriteCloser
	teardown := func() {
		for _, in := range stdins {
			in.Close()
		}
		for _, c := range children {
			done := make(chan struct{})
			go func() { c.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(20 * time.Second):
				c.Process.Kill()
				<-done
			}
		}
	}
	var points []*capPoint
	held := 0
	stop := ""
	for held < target && stop == "" {
		if ctx.Err() != nil {
			stop = "run cancelled"
			break
		}
		left := time.Until(deadline)
		if left <= 0 {
			stop = "time budget used up"
			break
		}
		if memAvailableKiB() < minAvailKiB {
			stop = fmt.Sprintf("machine's available memory fell below %d MiB", minAvailKiB>>10)
			break
		}
		n := min(perChild, target-held)
		cmd := exec.Command(self, "hold-raw", "-addr", srv.addr, "-from", strconv.Itoa(held), "-n", strconv.Itoa(n),
			"-ips", strconv.Itoa(max(n/15000+1, 4)), "-budget", left.String())
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		in, _ := cmd.StdinPipe()
		outp, _ := cmd.StdoutPipe()
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			stop = "could not start a client process: " + err.Error()
			break
		}
		children, stdins = append(children, cmd), append(stdins, in)
		got, why := 0, "client process exited early"
		sc := bufio.NewScanner(outp)
		for sc.Scan() {
			f := strings.SplitN(sc.Text(), " ", 3)
			if len(f) >= 2 && f[0] == "END" {
				got, _ = strconv.Atoi(f[1])
				if len(f) == 3 {
					why = f[2]
				}
				break
			}
		}
		go func() {
			for sc.Scan() {
			}
		}()
		held += got
		if got < n {
			stop = why
		}
		time.Sleep(2 * time.Second)
		if kib, _, err := srv.memory(); err == nil && held > 0 {
			pt := &capPoint{Target: target, Held: held, IdleKiB: idle, RSSKiB: kib, Method: method,
				Seconds: time.Since(start).Seconds(), PerLockBytes: float64((kib-idle)*1024) / float64(held)}
			points = append(points, pt)
			log.Printf("  baton: %d sessions, server %d MiB, %.0f B/lock, machine has %d MiB available",
				held, kib>>10, pt.PerLockBytes, memAvailableKiB()>>10)
		}
		if srv.proc.exited() {
			stop = "server exited: " + srv.proc.tail()
		}
	}
	if stop == "" {
		stop = "target reached"
	}
	// Say why the server stopped answering if it told its log.
	if tail := srv.proc.tail(); strings.Contains(tail, "too many open files") {
		stop += "; the server's log: accept failed with \"too many open files\" (it backs off and keeps serving the sessions it has)"
	}
	if lim := procLimit(srv.proc.pid(), "Max open files"); lim != "" {
		stop += "; server's open-file limit: " + lim
	}
	if len(points) == 0 {
		points = append(points, &capPoint{Target: target, IdleKiB: idle, Method: method})
	}
	points[len(points)-1].Stop = stop
	return points, teardown
}

// procLimit returns the soft and hard value of a /proc/PID/limits line.
func procLimit(pid int, name string) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", pid))
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, name); ok {
			f := strings.Fields(rest)
			if len(f) >= 2 {
				return fmt.Sprintf("soft %s, hard %s", f[0], f[1])
			}
		}
	}
	return ""
}
