package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
// The servers we start take their port as a flag, so there is a small
// window in which someone else could take it; the start then fails
// loudly rather than measuring the wrong thing.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// waitTCP waits until addr accepts a connection, the process exits, or
// the timeout passes.
func waitTCP(addr string, p *process, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return nil
		}
		if p != nil && p.exited() {
			return fmt.Errorf("%s exited before listening on %s: %s", p.name, addr, p.tail())
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not listening on %s after %v: %s", p.name, addr, timeout, p.tail())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitUntil calls try every 50ms until it succeeds or timeout has
// passed, and returns its last error then.
func waitUntil(timeout time.Duration, try func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := try()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// process is a child server. It dies with the harness (Pdeathsig), and
// its output is kept in a bounded buffer for error messages.
type process struct {
	name string
	// stopSignal, when set, is sent to the main process alone to stop
	// it (PostgreSQL: SIGINT, a fast shutdown that lets the postmaster
	// stop its children and remove its shared memory); otherwise the
	// whole process group gets SIGTERM.
	stopSignal syscall.Signal
	cmd        *exec.Cmd
	out        *tailBuffer
	done       chan struct{}
	err        error
}

// startProcess starts a server. If uid is non-zero the child runs as
// that user (PostgreSQL refuses to run as root).
func startProcess(name string, dir string, uid, gid int, argv []string, env []string) (*process, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out := &tailBuffer{max: 16 << 10}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if uid != 0 {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, out: out, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func (p *process) pid() int { return p.cmd.Process.Pid }

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *process) tail() string {
	if p == nil {
		return ""
	}
	s := strings.TrimSpace(p.out.String())
	if len(s) > 1500 {
		s = "…" + s[len(s)-1500:]
	}
	return s
}

// stop asks the process group to terminate, then kills it.
func (p *process) stop(grace time.Duration) {
	if p == nil || p.exited() {
		return
	}
	if p.stopSignal != 0 {
		syscall.Kill(p.pid(), p.stopSignal)
	} else {
		syscall.Kill(-p.pid(), syscall.SIGTERM)
	}
	select {
	case <-p.done:
		return
	case <-time.After(grace):
	}
	syscall.Kill(-p.pid(), syscall.SIGKILL)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
	}
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

// procStatusKiB reads a "Field:   123 kB" line of /proc/PID/status.
func procStatusKiB(pid int, field string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	return kibField(b, field)
}

func kibField(b []byte, field string) (int64, error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			f := strings.Fields(rest)
			if len(f) == 0 {
				break
			}
			return strconv.ParseInt(f[0], 10, 64)
		}
	}
	return 0, fmt.Errorf("no %s field", field)
}

// pssKiB is the proportional set size of a process: its private pages
// plus its share of pages it shares with others. Summed over a
// multi-process server (PostgreSQL) it counts shared memory once.
func pssKiB(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return 0, err
	}
	return kibField(b, "Pss")
}

// descendants returns pid and every process below it.
func descendants(pid int) []int {
	children := map[int][]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// The command name is in parentheses and may contain spaces.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 2 {
			continue
		}
		pp, _ := strconv.Atoi(f[1])
		children[pp] = append(children[pp], p)
	}
	out := []int{pid}
	for i := 0; i < len(out); i++ {
		out = append(out, children[out[i]]...)
	}
	return out
}

// memAvailableKiB is the kernel's estimate of memory available for new
// work, used as a guard so the capacity runs never push the machine
// into the OOM killer.
func memAvailableKiB() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	v, _ := kibField(b, "MemAvailable")
	return v
}

// raiseFileLimit lifts RLIMIT_NOFILE as far as the kernel allows (as
// root, up to fs.nr_open). Children started afterwards inherit it.
func raiseFileLimit() (uint64, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, err
	}
	want := lim.Max
	if b, err := os.ReadFile("/proc/sys/fs/nr_open"); err == nil {
		if n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err == nil && n > want && os.Geteuid() == 0 {
			want = n
		}
	}
	nl := syscall.Rlimit{Cur: want, Max: want}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &nl); err != nil {
		nl = syscall.Rlimit{Cur: lim.Max, Max: lim.Max}
		if err2 := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &nl); err2 != nil {
			return lim.Cur, err
		}
	}
	return nl.Cur, nil
}

// spreadDialer dials from many loopback source addresses (127.0.0.2 …)
// so that hundreds of thousands of connections to one server port are
// not limited by one source address's ephemeral port range.
type spreadDialer struct {
	next  atomic.Uint32
	addrs int
}

func newSpreadDialer(addrs int) *spreadDialer { return &spreadDialer{addrs: addrs} }

func (d *spreadDialer) localIP() net.IP {
	i := d.next.Add(1) % uint32(d.addrs)
	return net.IPv4(127, 0, byte(i/250), byte(2+i%250))
}

func (d *spreadDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	nd := net.Dialer{LocalAddr: &net.TCPAddr{IP: d.localIP()}, Timeout: 30 * time.Second}
	return nd.DialContext(ctx, network, addr)
}

// tempRoot is where servers keep their data: tmpfs when there is one,
// so that no peer pays for disk flushes (baton keeps nothing on disk).
func tempRoot() string {
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		var st syscall.Statfs_t
		if syscall.Statfs("/dev/shm", &st) == nil && int64(st.Bavail)*int64(st.Bsize) > 2<<30 {
			return "/dev/shm"
		}
	}
	return os.TempDir()
}

// mkdirOwned makes a fresh directory owned by uid:gid.
func mkdirOwned(parent, pattern string, uid, gid int) (string, error) {
	d, err := os.MkdirTemp(parent, pattern)
	if err != nil {
		return "", err
	}
	if uid != 0 {
		if err := os.Chown(d, uid, gid); err != nil {
			os.RemoveAll(d)
			return "", err
		}
		os.Chmod(d, 0o700)
	}
	return d, nil
}

// lookPath finds a binary on PATH or in the given glob patterns (the
// newest match wins, so /usr/lib/postgresql/*/bin picks the highest
// installed major version).
func lookPath(name string, globs ...string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, g := range globs {
		m, _ := filepath.Glob(g)
		if len(m) > 0 {
			// Sort numerically by the version component where possible.
			best, bestV := "", -1
			for _, c := range m {
				v := -1
				for _, part := range strings.Split(c, "/") {
					if n, err := strconv.Atoi(part); err == nil {
						v = n
					}
				}
				if v > bestV || best == "" {
					best, bestV = c, v
				}
			}
			return best, nil
		}
	}
	return "", fmt.Errorf("%s: %w (run bench/setup)", name, exec.ErrNotFound)
}

// firstLine runs a command and returns the first line of its output.
func firstLine(argv ...string) string {
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	if err != nil && len(out) == 0 {
		return "unknown"
	}
	s := strings.TrimSpace(string(out))
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}
