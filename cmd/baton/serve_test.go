//go:build unix

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/batonlock/baton/audit"
	"github.com/batonlock/baton/internal/opstest"
	"github.com/batonlock/baton/ops"
	"github.com/batonlock/baton/protocol"
	"github.com/batonlock/baton/server"
)

// serveFixture is 'baton serve' running in-process on port 0 everywhere.
type serveFixture struct {
	addrs  serveAddrs
	rec    *opstest.Recorder
	logs   *syncBuffer
	stdout *syncBuffer
	cancel context.CancelFunc
	done   chan int
	// hup delivers a SIGHUP to serve.
	hup chan os.Signal
}

// testServeConfig returns the flags' defaults, listening on a port of
// its own, changed by edit and validated.
func testServeConfig(t *testing.T, edit func(*serveConfig)) (*flagSet, *serveConfig) {
	t.Helper()
	fs, cfg := serveFlags(io.Discard)
	if err := fs.FlagSet.Parse(nil); err != nil { // defaults only, no environment
		t.Fatal(err)
	}
	cfg.listen = "127.0.0.1:0"
	if edit != nil {
		edit(cfg)
	}
	if err := cfg.validate(fs); err != nil {
		t.Fatal(err)
	}
	return fs, cfg
}

// startServe runs serve with the flags' defaults changed by edit.
func startServe(t *testing.T, edit func(*serveConfig)) *serveFixture {
	t.Helper()
	fs, cfg := testServeConfig(t, edit)
	f := &serveFixture{rec: &opstest.Recorder{}, logs: &syncBuffer{}, stdout: &syncBuffer{}, done: make(chan int, 1), hup: make(chan os.Signal, 1)}
	logger, err := ops.NewLogger(f.logs, "debug", "text")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	f.cancel = cancel
	ready := make(chan serveAddrs, 1)
	go func() {
		f.done <- serve(ctx, cfg, serveEnv{logger: logger, stdout: f.stdout, settings: fs.settings(), observer: f.rec, hup: f.hup,
			ready: func(a serveAddrs) { ready <- a }})
	}()
	select {
	case f.addrs = <-ready:
	case code := <-f.done:
		t.Fatalf("serve exited with %d before it was ready; logs:\n%s", code, f.logs.String())
	}
	t.Cleanup(func() { f.stop(t) })
	return f
}

// stop shuts serve down and returns its exit code; it may be called
// more than once.
func (f *serveFixture) stop(t *testing.T) int {
	t.Helper()
	f.cancel()
	select {
	case code := <-f.done:
		f.done <- code
		return code
	case <-time.After(opstest.Timeout):
		t.Fatalf("serve did not stop; logs:\n%s", f.logs.String())
		return -1
	}
}

// scrape fetches /metrics and returns the samples keyed by series.
func scrape(t *testing.T, opsAddr string) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + opsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("sample %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}

func readAudit(t *testing.T, path string) []audit.Record {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rs []audit.Record
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if line == "" {
			continue
		}
		var r audit.Record
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("audit line %q: %v", line, err)
		}
		rs = append(rs, r)
	}
	return rs
}

// cli runs a baton subcommand in-process.
func cli(args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = dispatch(args, &o, &e)
	return code, o.String(), e.String()
}

// TestServeAdminActionsEverywhere: a kick and a force release made with
// the CLI are seen by the affected clients as ERROR 0x02, in the audit
// log and in the metrics.
func TestServeAdminActionsEverywhere(t *testing.T) {
	auditPath := filepath.Join(t.TempDir(), "audit.log")
	f := startServe(t, func(c *serveConfig) {
		c.opsListen, c.adminListen, c.auditLog = "127.0.0.1:0", "127.0.0.1:0", auditPath
	})
	const name = "team/job 1"
	owner := opstest.Dial(t, f.addrs.protocol)
	owner.Acquire(name, 10*time.Second)
	tok := owner.Expect(protocol.TypeAcquired, 0).Token
	w1 := opstest.Dial(t, f.addrs.protocol)
	w1.Acquire(name, 10*time.Second)
	w1.Expect(protocol.TypeWaiting, 0)
	w2 := opstest.Dial(t, f.addrs.protocol)
	w2.Acquire(name, 10*time.Second)
	w2.Expect(protocol.TypeWaiting, 0)

	if code, out, errOut := cli("kick", "--admin", f.addrs.admin, name, w2.Addr()); code != 0 || !strings.Contains(out, "removed waiter "+w2.Addr()) {
		t.Fatalf("baton kick = %d\n%s%s", code, out, errOut)
	}
	w2.Expect(protocol.TypeError, protocol.CodeClosedByAdmin)
	if code, out, errOut := cli("release", name, "--admin", f.addrs.admin); code != 0 || !strings.Contains(out, `released lock "team/job 1"`) {
		t.Fatalf("baton release = %d\n%s%s", code, out, errOut)
	}
	owner.Expect(protocol.TypeError, protocol.CodeClosedByAdmin)
	tok1 := w1.Expect(protocol.TypeAcquired, 0).Token
	f.rec.WaitCount(t, server.EventReleased, 1)
	f.rec.WaitCount(t, server.EventDequeued, 1)

	m := scrape(t, f.addrs.ops)
	for series, want := range map[string]float64{
		"baton_acquires_total":                     2,
		`baton_releases_total{reason="force"}`:     1,
		`baton_dequeues_total{reason="kick"}`:      1,
		"baton_locks_held":                         1,
		"baton_waiters":                            0,
		"baton_hold_seconds_count":                 1,
		"baton_wait_seconds_count":                 2,
		"baton_audit_dropped_total":                0,
		`baton_protocol_errors_total{code="0x10"}`: 0,
	} {
		if m[series] != want {
			t.Errorf("%s = %v, want %v", series, m[series], want)
		}
	}
	if !strings.Contains(f.logs.String(), "admin: lock force-released") || !strings.Contains(f.logs.String(), "admin: waiter kicked") {
		t.Errorf("admin actions not logged:\n%s", f.logs.String())
	}

	f.cancel()
	w1.Expect(protocol.TypeError, protocol.CodeShuttingDown)
	w1.Close()
	if code := f.stop(t); code != 0 {
		t.Fatalf("serve exited with %d", code)
	}
	type ev struct {
		event, addr, reason string
		token               uint64
	}
	var got []ev
	for _, r := range readAudit(t, auditPath) {
		if r.Lock != name {
			t.Errorf("record for lock %q", r.Lock)
		}
		if admin := r.Event == "kick_waiter" || r.Event == "force_release"; admin != (r.AdminAddr != "") ||
			admin && !strings.HasPrefix(r.AdminAddr, "127.0.0.1:") {
			t.Errorf("%s record names admin_addr %q; want the CLI's address on admin records only", r.Event, r.AdminAddr)
		}
		got = append(got, ev{r.Event, r.RemoteAddr, r.Reason, r.Token})
	}
	want := []ev{
		{"granted", owner.Addr(), "", tok},
		{"kick_waiter", w2.Addr(), "", 0},
		{"force_release", owner.Addr(), "", tok},
		{"released", owner.Addr(), "force", tok},
		{"granted", w1.Addr(), "", tok1},
		{"released", w1.Addr(), "shutdown", tok1},
	}
	if len(got) != len(want) {
		t.Fatalf("audit = %+v\nwant %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("audit record %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

// TestServeShutdownOrder: probes turn 503 when shutdown begins and answer
// until the last session has closed; only then do the HTTP servers stop.
func TestServeShutdownOrder(t *testing.T) {
	f := startServe(t, func(c *serveConfig) { c.opsListen, c.adminListen = "127.0.0.1:0", "127.0.0.1:0" })
	holder := opstest.Dial(t, f.addrs.protocol)
	holder.Acquire("x", 10*time.Second)
	holder.Expect(protocol.TypeAcquired, 0)

	f.cancel()
	holder.Expect(protocol.TypeError, protocol.CodeShuttingDown)
	// The holder does not hang up, so its session lingers.
	for _, p := range []string{"/readyz", "/healthz"} {
		resp, err := http.Get("http://" + f.addrs.ops + p)
		if err != nil {
			t.Fatalf("GET %s during shutdown: %v", p, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Errorf("GET %s during shutdown = %d, want 503", p, resp.StatusCode)
		}
	}
	if code, out, _ := cli("info", "--json", "--admin", f.addrs.admin); code != 0 || !strings.Contains(out, `"shutting_down": true`) {
		t.Errorf("baton info during shutdown = %d %s", code, out)
	}
	select {
	case code := <-f.done:
		t.Fatalf("serve returned %d while a session was still open", code)
	default:
	}
	holder.Close()
	if code := f.stop(t); code != 0 {
		t.Fatalf("serve exited with %d", code)
	}
	for _, a := range []string{f.addrs.ops, f.addrs.admin} {
		if c, err := net.Dial("tcp", a); err == nil {
			c.Close()
			t.Errorf("%s still accepts after serve returned", a)
		}
	}
}

// TestServeAuditStdout: '-audit-log -' writes JSON lines to standard
// output, and logs stay on standard error.
func TestServeAuditStdout(t *testing.T) {
	f := startServe(t, func(c *serveConfig) { c.auditLog = "-" })
	c := opstest.Dial(t, f.addrs.protocol)
	c.Acquire("out", 10*time.Second)
	c.Expect(protocol.TypeAcquired, 0)
	c.Close()
	f.rec.WaitCount(t, server.EventReleased, 1)
	if code := f.stop(t); code != 0 {
		t.Fatalf("serve exited with %d", code)
	}
	lines := strings.Split(strings.TrimSpace(f.stdout.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], `"event":"granted"`) || !strings.Contains(lines[1], `"event":"released"`) {
		t.Errorf("stdout = %q, want the granted and released records", f.stdout.String())
	}
	if strings.Contains(f.logs.String(), `"event"`) || !strings.Contains(f.logs.String(), "baton listening") {
		t.Errorf("stderr = %q", f.logs.String())
	}
}

func TestServeFlagsAndEnv(t *testing.T) {
	t.Setenv("BATON_IO_TIMEOUT", "7s")
	t.Setenv("BATON_LOG_LEVEL", "warn")
	t.Setenv("BATON_OPS_LISTEN_ADDRESS", "127.0.0.1:7071")
	fs, cfg := serveFlags(io.Discard)
	if err := fs.parse([]string{"-log-level", "error", "-ops-listen", ""}); err != nil {
		t.Fatal(err)
	}
	if cfg.ioTimeout != 7*time.Second || cfg.logLevel != "error" || cfg.opsListen != "" || cfg.listen != server.DefaultAddr || cfg.logFormat != "text" {
		t.Errorf("flag > env > default broken: %+v", *cfg)
	}
	if err := cfg.validate(fs); err != nil {
		t.Error(err)
	}
	s := fs.settings()
	if s["io-timeout"] != "7s" || s["log-level"] != "error" || s["admin-listen"] != "" || len(s) != len(fs.order) {
		t.Errorf("settings = %v", s)
	}
}

func TestServeUsageErrors(t *testing.T) {
	clusterArgs := []string{"-node-id", "n1", "-data-dir", "d", "-raft-listen", "127.0.0.1:0", "-admin-listen", "127.0.0.1:0", "-listen", "127.0.0.1:0"}
	for _, tt := range []struct {
		args []string
		env  [2]string
		want string
	}{
		{[]string{"-log-level", "verbose"}, [2]string{}, "-log-level (BATON_LOG_LEVEL)"},
		{nil, [2]string{"BATON_LOG_FORMAT", "yaml"}, `-log-format (BATON_LOG_FORMAT): unknown log format "yaml"`},
		{[]string{"-ops-listen", "7071"}, [2]string{}, "-ops-listen (BATON_OPS_LISTEN_ADDRESS)"},
		{nil, [2]string{"BATON_ADMIN_LISTEN_ADDRESS", "localhost"}, "-admin-listen (BATON_ADMIN_LISTEN_ADDRESS)"},
		{[]string{"-ops-listen", "127.0.0.1:9", "-admin-listen", "127.0.0.1:9"}, [2]string{}, "must differ"},
		{[]string{"-io-timeout", "0s"}, [2]string{}, "-io-timeout (BATON_IO_TIMEOUT) must be positive"},
		{nil, [2]string{"BATON_IO_TIMEOUT", "soon"}, "BATON_IO_TIMEOUT"},
		{[]string{"-max-lease", "-1s"}, [2]string{}, "-max-lease (BATON_MAX_LEASE) must be 0 (no limit) or a lease from 1ms to 49 days"},
		{nil, [2]string{"BATON_MAX_LEASE", "1200h"}, "-max-lease (BATON_MAX_LEASE) must be 0"},
		{[]string{"-range-waiting-per-owner", "-1"}, [2]string{}, "-range-waiting-per-owner (BATON_RANGE_WAITING_PER_OWNER) must not be negative"},
		{[]string{"-max-waiters", "-1"}, [2]string{}, "-max-waiters (BATON_MAX_WAITERS) must be 0 (no limit) or positive"},
		{nil, [2]string{"BATON_MAX_KEPT_CLAIMS", "-5"}, "-max-kept-claims (BATON_MAX_KEPT_CLAIMS) must be 0 (no limit) or positive"},
		{[]string{"-listen", "127.0.0.1:99999"}, [2]string{}, `port "99999" is not a number`},
		{[]string{"-ops-listen", "127.0.0.1:http"}, [2]string{}, "-ops-listen (BATON_OPS_LISTEN_ADDRESS)"},
		{[]string{"-bogus"}, [2]string{}, "-bogus"},
		{[]string{"extra"}, [2]string{}, `unexpected argument "extra"`},
		{[]string{"-bootstrap"}, [2]string{}, "-bootstrap (BATON_BOOTSTRAP) is for a cluster node: also give -node-id (BATON_NODE_ID)"},
		{nil, [2]string{"BATON_JOIN", "127.0.0.1:7072"}, "-join (BATON_JOIN) is for a cluster node"},
		{[]string{"-node-id", "n1", "-raft-listen", "127.0.0.1:0", "-admin-listen", "127.0.0.1:0"}, [2]string{}, "-node-id (BATON_NODE_ID) needs -data-dir (BATON_DATA_DIR)"},
		{[]string{"-node-id", "n1", "-data-dir", "d", "-admin-listen", "127.0.0.1:0"}, [2]string{}, "needs -raft-listen (BATON_RAFT_LISTEN_ADDRESS)"},
		{[]string{"-node-id", "n1", "-data-dir", "d", "-raft-listen", "127.0.0.1:0"}, [2]string{}, "needs -admin-listen"},
		{[]string{"-node-id", "n1", "-data-dir", "d", "-raft-listen", "127.0.0.1:0", "-admin-listen", "127.0.0.1:0", "-bootstrap", "-join", "127.0.0.1:1"}, [2]string{}, "exclude each other"},
		{append(clusterArgs, "-join", "127.0.0.1:1,,127.0.0.1:2"), [2]string{}, "or a comma-separated list of them"},
		{append(clusterArgs, "-join", "127.0.0.1:1,127.0.0.1:1"), [2]string{}, "in the -join list twice"},
		{[]string{"-cluster-identity", "spiffe://x/*"}, [2]string{}, "-cluster-identity (BATON_CLUSTER_IDENTITY) is for a cluster node"},
		{[]string{"-advertise-host", "n1.example"}, [2]string{}, "-advertise-host (BATON_ADVERTISE_HOST) is for a cluster node"},
		{append(clusterArgs, "-tls-cert", "c", "-tls-key", "k"), [2]string{}, "with TLS needs -tls-client-ca (BATON_TLS_CLIENT_CA)"},
		{append(clusterArgs, "-tls-cert", "c", "-tls-key", "k", "-tls-client-ca", "ca"), [2]string{}, "with TLS needs -cluster-identity (BATON_CLUSTER_IDENTITY)"},
		{append(clusterArgs, "-cluster-identity", "x"), [2]string{}, "-cluster-identity (BATON_CLUSTER_IDENTITY) needs TLS"},
		{append(clusterArgs, "-tls-cert", "c", "-tls-key", "k", "-tls-client-ca", "ca", "-cluster-identity", strings.Repeat("*a", 100)), [2]string{}, "-cluster-identity (BATON_CLUSTER_IDENTITY)"},
		{[]string{"-node-id", "n1", "-data-dir", "d", "-raft-listen", "0.0.0.0:7080", "-admin-listen", "127.0.0.1:0"}, [2]string{}, `-raft-listen (BATON_RAFT_LISTEN_ADDRESS) "0.0.0.0:7080" binds every interface: give -advertise-host (BATON_ADVERTISE_HOST)`},
		{append(clusterArgs, "-listen", ":7070"), [2]string{}, `-listen (BATON_LISTEN_ADDRESS) ":7070" binds every interface`},
		{append(clusterArgs, "-advertise-host", "n1.example:7070"), [2]string{}, "want a host name or IP, without a port"},
		{append(clusterArgs, "-cluster-remove-after", "5s"), [2]string{}, "-cluster-self-stop (BATON_CLUSTER_SELF_STOP) 5s and -cluster-remove-after (BATON_CLUSTER_REMOVE_AFTER) 5s: cluster: the removal timeout must exceed the self-stop timeout by the drift margin: 5s is not above 5.35"},
		{append(clusterArgs, "-cluster-self-stop", "0s"), [2]string{"BATON_CLUSTER_REMOVE_AFTER", "1s"}, "the self-stop timeout must be positive"},
		{clusterArgs, [2]string{"BATON_CLUSTER_SELF_STOP", "6s"}, "6s is not above"},
	} {
		t.Run(strings.Join(tt.args, " ")+tt.env[0], func(t *testing.T) {
			if tt.env[0] != "" {
				t.Setenv(tt.env[0], tt.env[1])
			}
			code, _, errOut := cli(append([]string{"serve"}, tt.args...)...)
			if code != exitUsage || !strings.Contains(errOut, tt.want) {
				t.Errorf("exit %d, stderr %q; want 2 and %q", code, errOut, tt.want)
			}
		})
	}
}

func TestServeAddressInUse(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, args := range [][]string{
		{"-listen", l.Addr().String()},
		{"-listen", "127.0.0.1:0", "-ops-listen", l.Addr().String()},
		{"-listen", "127.0.0.1:0", "-admin-listen", l.Addr().String()},
		{"-listen", "127.0.0.1:0", "-audit-log", filepath.Join(t.TempDir(), "missing", "audit.log")},
	} {
		code, _, errOut := cli(append([]string{"serve"}, args...)...)
		if code != exitError {
			t.Errorf("serve %v = %d, want 1; stderr %q", args, code, errOut)
		}
	}
}

func TestServeAdminNotLoopbackWarning(t *testing.T) {
	f := startServe(t, func(c *serveConfig) { c.adminListen = ":0" })
	if !strings.Contains(f.logs.String(), "not bound to a loopback address") {
		t.Errorf("no warning for an admin API on all interfaces:\n%s", f.logs.String())
	}
	g := startServe(t, func(c *serveConfig) { c.adminListen = "127.0.0.1:0" })
	if strings.Contains(g.logs.String(), "loopback") {
		t.Errorf("warning for a loopback admin API:\n%s", g.logs.String())
	}
}

// TestDocsCoverFlagsAndMetrics: the reference pages mention every flag
// of 'baton serve -h' (docs/flags.md) and of the admin subcommands
// (docs/cli-admin.md), each with its environment variable, and every
// baton_ metric (docs/metrics.md).
func TestDocsCoverFlagsAndMetrics(t *testing.T) {
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join("..", "..", "docs", name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	flags, admin, metrics := read("flags.md"), read("cli-admin.md"), read("metrics.md")
	row := regexp.MustCompile(`(?m)^\s+-([a-z0-9-]+)\s+(BATON_[A-Z0-9_]+)\s`)
	for _, cmd := range []string{"serve", "locks", "show", "release", "kick", "info"} {
		doc, page := admin, "docs/cli-admin.md"
		if cmd == "serve" {
			doc, page = flags, "docs/flags.md"
		}
		code, out, _ := cli(cmd, "-h")
		rows := row.FindAllStringSubmatch(out, -1)
		if code != 0 || len(rows) == 0 {
			t.Fatalf("baton %s -h = %d, no flag table:\n%s", cmd, code, out)
		}
		for _, r := range rows {
			if !strings.Contains(doc, "`-"+r[1]+"`") {
				t.Errorf("%s lacks flag `-%s` of baton %s", page, r[1], cmd)
			}
			if !strings.Contains(doc, "`"+r[2]+"`") {
				t.Errorf("%s lacks `%s` (baton %s -%s)", page, r[2], cmd, r[1])
			}
		}
	}
	mfs, err := ops.NewMetrics(ops.MetricsConfig{}).Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, mf := range mfs {
		if name := mf.GetName(); strings.HasPrefix(name, "baton_") {
			n++
			if !strings.Contains(metrics, "`"+name+"`") {
				t.Errorf("docs/metrics.md lacks metric `%s`", name)
			}
		}
	}
	if n < 15 {
		t.Errorf("only %d baton_ metrics registered", n)
	}
}

// batonProc is a real 'baton serve' process with JSON logs.
type batonProc struct {
	cmd    *exec.Cmd
	logs   chan map[string]any
	stderr *syncBuffer
	exited chan struct{}
}

// startBaton runs 'baton serve -log-format json' with args, the built
// binary of TestMain.
func startBaton(t *testing.T, args ...string) *batonProc {
	t.Helper()
	return startBatonCmd(t, exec.Command(batonBin, append([]string{"serve", "-log-format", "json"}, args...)...))
}

// startBatonCmd starts cmd, which must run 'baton serve -log-format
// json', with the BATON_* variables of the test's environment removed.
func startBatonCmd(t *testing.T, cmd *exec.Cmd) *batonProc {
	t.Helper()
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "BATON_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	pipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &batonProc{cmd: cmd, logs: make(chan map[string]any, 10000), stderr: &syncBuffer{}, exited: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			p.stderr.Write(append(sc.Bytes(), '\n'))
			var rec map[string]any
			if json.Unmarshal(sc.Bytes(), &rec) == nil {
				// Never block: a test that reads no records must not
				// stop this reader, and with it the process, which
				// would block writing its log and never exit (seen in
				// CI: a node that did not stop after SIGTERM, and a
				// cleanup that waited for it for ever). waitLog reads
				// what it needs while the buffer has room.
				select {
				case p.logs <- rec:
				default:
				}
			}
		}
		close(p.logs)
		cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-p.exited
		if t.Failed() {
			t.Logf("baton serve stderr:\n%s", p.stderr.String())
		}
	})
	return p
}

// waitLog waits for a log record with message msg.
func (p *batonProc) waitLog(t *testing.T, msg string) map[string]any {
	t.Helper()
	timeout := time.After(opstest.Timeout)
	for {
		select {
		case rec, ok := <-p.logs:
			if !ok {
				t.Fatalf("baton serve exited before logging %q", msg)
			}
			if rec["msg"] == msg {
				return rec
			}
		case <-timeout:
			t.Fatalf("no log %q within %v", msg, opstest.Timeout)
		}
	}
}

// waitLines waits until the file at path has at least n lines. The audit
// writer is asynchronous; its output is the event to wait for.
func waitLines(t *testing.T, path string, n int) {
	t.Helper()
	deadline := time.Now().Add(opstest.Timeout)
	for {
		b, _ := os.ReadFile(path)
		if bytes.Count(b, []byte("\n")) >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s has %q, want %d lines", path, b, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestServeProcess runs a real 'baton serve': SIGHUP reopens the audit log
// after logrotate renamed it, and SIGTERM shuts down protocol first, ops
// last.
func TestServeProcess(t *testing.T) {
	dir := t.TempDir()
	auditPath := filepath.Join(dir, "audit.log")
	p := startBaton(t, "-listen", "127.0.0.1:0", "-ops-listen", "127.0.0.1:0", "-audit-log", auditPath)
	rec := p.waitLog(t, "baton listening")
	addr, _ := rec["addr"].(string)
	opsAddr, _ := rec["ops_addr"].(string)
	if ts, _ := rec["time"].(string); !strings.HasSuffix(ts, "Z") {
		t.Errorf("log time %q is not UTC", ts)
	}

	a := opstest.Dial(t, addr)
	a.Acquire("rotate", 10*time.Second)
	tokA := a.Expect(protocol.TypeAcquired, 0).Token
	a.Close()
	waitLines(t, auditPath, 2) // granted, released

	if err := os.Rename(auditPath, auditPath+".1"); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	p.waitLog(t, "SIGHUP: audit log reopened")
	b := opstest.Dial(t, addr)
	b.Acquire("rotate", 10*time.Second)
	tokB := b.Expect(protocol.TypeAcquired, 0).Token
	waitLines(t, auditPath, 1)

	// Shutdown: B does not hang up after ERROR 0x01, so the protocol side
	// stays open for the linger period while /readyz says 503.
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	b.Expect(protocol.TypeError, protocol.CodeShuttingDown)
	resp, err := http.Get("http://" + opsAddr + "/readyz")
	if err != nil {
		t.Fatalf("ops server gone while a session was still open: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("/readyz during shutdown = %d, want 503", resp.StatusCode)
	}
	select {
	case <-p.exited:
		t.Fatal("baton serve exited while a session was still open")
	default:
	}
	b.Close()
	select {
	case <-p.exited:
	case <-time.After(opstest.Timeout):
		t.Fatal("baton serve did not exit after SIGTERM")
	}
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("exit code %d after SIGTERM, want 0", code)
	}
	if c, err := net.Dial("tcp", opsAddr); err == nil {
		c.Close()
		t.Error("ops server still up after exit")
	}

	check := func(path string, want ...string) {
		t.Helper()
		var got []string
		for _, r := range readAudit(t, path) {
			got = append(got, r.Event+":"+strconv.FormatUint(r.Token, 10)+":"+r.Reason)
		}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("%s: %q, want %q", filepath.Base(path), got, want)
		}
	}
	a1, b1 := strconv.FormatUint(tokA, 10), strconv.FormatUint(tokB, 10)
	check(auditPath+".1", "granted:"+a1+":", "released:"+a1+":graceful")
	check(auditPath, "granted:"+b1+":", "released:"+b1+":shutdown")
}
