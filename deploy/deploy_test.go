//go:build unix

// Package deploy_test checks the deployment files against the code they
// deploy: the Dockerfile's build command really makes a static binary,
// every setting they use is one 'baton serve -h' lists, each
// configuration really starts a server whose probes answer, the compose
// file builds that Dockerfile and its workers really hand the lock over,
// and the Grafana dashboard queries only metrics the server registers.
package deploy_test

import (
	"bufio"
	"context"
	"debug/elf"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/batonlock/baton"
	"github.com/batonlock/baton/internal/opstest"
	"github.com/batonlock/baton/ops"
	"github.com/batonlock/baton/server"
)

const timeout = 20 * time.Second // bound on any wait, for a loaded machine

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// dockerInstructions returns the Dockerfile's instructions with line
// continuations joined and comments dropped, as [keyword, rest] pairs.
func dockerInstructions(t *testing.T) [][2]string {
	t.Helper()
	var out [][2]string
	var cur strings.Builder
	for _, line := range strings.Split(read(t, "Dockerfile"), "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "#") || (trimmed == "" && cur.Len() == 0) {
			continue
		}
		if strings.HasSuffix(trimmed, "\\") {
			cur.WriteString(strings.TrimSuffix(trimmed, "\\") + " ")
			continue
		}
		cur.WriteString(trimmed)
		kw, rest, _ := strings.Cut(cur.String(), " ")
		out = append(out, [2]string{strings.ToUpper(kw), strings.TrimSpace(rest)})
		cur.Reset()
	}
	return out
}

// finalStage returns the instructions of the Dockerfile's last stage.
func finalStage(t *testing.T) [][2]string {
	ins := dockerInstructions(t)
	last := 0
	for i, in := range ins {
		if in[0] == "FROM" {
			last = i
		}
	}
	return ins[last:]
}

const dockerOut = "/out/baton" // where the Dockerfile's build stage puts the binary

var (
	buildOnce sync.Once
	batonBin  string
	buildErr  error
)

// binary builds baton with the Dockerfile's own build command (the
// release script's), run by sh from the repository root as the build
// stage runs it (with VERSION as the build argument), into a temporary
// directory standing for /out.
func binary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		var cmd string
		for _, in := range dockerInstructions(t) {
			if in[0] == "RUN" && strings.Contains(in[1], "scripts/release ") {
				cmd = in[1]
			}
		}
		if !strings.HasSuffix(cmd, " "+dockerOut) {
			buildErr = fmt.Errorf("the Dockerfile's release command %q does not end by writing %s", cmd, dockerOut)
			return
		}
		dir, err := os.MkdirTemp("", "baton-deploy-test-")
		if err != nil {
			buildErr = err
			return
		}
		batonBin = filepath.Join(dir, "baton")
		out := path.Dir(dockerOut) + "/"
		sh := exec.Command("sh", "-c", strings.ReplaceAll(cmd, out, dir+"/"))
		sh.Dir = ".."
		sh.Env = append(os.Environ(), "VERSION=v0.0.0-deploytest", "TARGETARCH=")
		if out, err := sh.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("the Dockerfile's build command failed: %v\n%s\n%s", err, cmd, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return batonBin
}

// fromImage returns the image of a FROM instruction, past a --platform.
func fromImage(rest string) string {
	f := strings.Fields(rest)
	for len(f) > 1 && strings.HasPrefix(f[0], "--") {
		f = f[1:]
	}
	return f[0]
}

func TestMain(m *testing.M) {
	code := m.Run()
	if batonBin != "" {
		os.RemoveAll(filepath.Dir(batonBin))
	}
	os.Exit(code)
}

// TestDockerBuildIsStatic: the image has no libc, so the binary must not
// ask for a dynamic loader or shared libraries.
func TestDockerBuildIsStatic(t *testing.T) {
	bin := binary(t)
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("binary has a %v program header: not static", p.Type)
		}
	}
	if libs, err := f.ImportedLibraries(); err != nil || len(libs) > 0 {
		t.Errorf("binary imports libraries %v (%v)", libs, err)
	}
	if f.Section(".symtab") != nil {
		t.Error("binary has a symbol table: -ldflags -s did not apply")
	}
	out, err := exec.Command(bin, "version").Output()
	if err != nil || !strings.HasPrefix(string(out), "baton v0.0.0-deploytest ") {
		t.Errorf("baton version = %q, %v; want the VERSION build argument", out, err)
	}
}

func TestDockerfile(t *testing.T) {
	ins := dockerInstructions(t)
	if ins[0][0] != "FROM" || !strings.HasPrefix(fromImage(ins[0][1]), "golang:") {
		t.Fatalf("first instruction %v: want FROM golang:...", ins[0])
	}
	goVersion := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindStringSubmatch(read(t, "../go.mod"))
	if image := fromImage(ins[0][1]); goVersion == nil || !strings.HasPrefix(image, "golang:"+goVersion[1]) {
		t.Errorf("build stage %s does not match go.mod's go %v", image, goVersion)
	}
	final := finalStage(t)
	base := fromImage(final[0][1])
	if !strings.HasPrefix(base, "gcr.io/distroless/static") && base != "scratch" {
		t.Errorf("final stage is FROM %s, want distroless/static or scratch", base)
	}
	var user string
	for _, in := range final {
		switch in[0] {
		case "USER":
			user = in[1]
		case "COPY":
			if strings.HasPrefix(in[1], "--from=build") && !strings.Contains(in[1], dockerOut+" ") {
				t.Errorf("COPY %s does not take the build stage's %s", in[1], dockerOut)
			}
		case "EXPOSE":
			if strings.Contains(in[1], "7072") {
				t.Error("the admin port is exposed; it has no authentication")
			}
		}
	}
	if uid, _, _ := strings.Cut(user, ":"); uid == "" || uid == "0" || uid == "root" {
		t.Errorf("final stage runs as %q, want a non-root USER", user)
	}
	env := dockerEnv(t)
	checkAddrs(t, "Dockerfile", env)

	// A build without --build-arg VERSION (docker compose's) gets a
	// version the release script accepts: with it, the script goes on
	// to refuse the architecture, before building anything.
	def := ""
	for _, in := range ins {
		if k, v, ok := strings.Cut(in[1], "="); in[0] == "ARG" && ok && k == "VERSION" {
			def = v
		}
	}
	out, err := exec.Command("bash", "../scripts/release", "--allow-dirty", "--arch", "none", "--out", t.TempDir(), def).CombinedOutput()
	if !strings.Contains(string(out), "architecture none") {
		t.Errorf("ARG VERSION=%s: scripts/release says %q (%v), want it to accept the version", def, out, err)
	}
}

// dockerEnv returns the final stage's ENV settings.
func dockerEnv(t *testing.T) map[string]string {
	env := map[string]string{}
	for _, in := range finalStage(t) {
		if in[0] != "ENV" {
			continue
		}
		for _, kv := range strings.Fields(in[1]) {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				t.Fatalf("ENV %q: use the KEY=VALUE form", in[1])
			}
			env[k] = v
		}
	}
	return env
}

// checkAddrs checks a configuration's listen addresses: protocol and ops
// reachable from outside, admin on loopback only.
func checkAddrs(t *testing.T, where string, env map[string]string) {
	t.Helper()
	host := func(name string) string {
		h, _, err := net.SplitHostPort(env[name])
		if err != nil {
			t.Errorf("%s: %s=%q: %v", where, name, env[name], err)
		}
		return h
	}
	if h := host("BATON_ADMIN_LISTEN_ADDRESS"); h != "" && !net.ParseIP(h).IsLoopback() && h != "localhost" {
		t.Errorf("%s: the admin API listens on %q, want loopback: it has no authentication", where, h)
	}
	for _, name := range []string{"BATON_LISTEN_ADDRESS", "BATON_OPS_LISTEN_ADDRESS"} {
		if h := host(name); h != "0.0.0.0" && h != "" && h != "::" {
			t.Errorf("%s: %s=%q, want every interface", where, name, env[name])
		}
	}
}

// serveSettings runs 'baton serve -h' and returns its flags and their
// environment variables.
func serveSettings(t *testing.T) (flags, envs map[string]bool) {
	t.Helper()
	return settings(t, "serve")
}

// settings runs 'baton COMMAND -h' and returns its flags and their
// environment variables.
func settings(t *testing.T, command string) (flags, envs map[string]bool) {
	t.Helper()
	out, err := exec.Command(binary(t), command, "-h").Output()
	if err != nil {
		t.Fatalf("baton %s -h: %v", command, err)
	}
	flags, envs = map[string]bool{}, map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s+-([a-z][a-z-]*)\s+(BATON_[A-Z0-9_]+)\s`).FindAllStringSubmatch(string(out), -1) {
		flags[m[1]], envs[m[2]] = true, true
	}
	if len(flags) < 5 {
		t.Fatalf("could not read the flag table of 'baton %s -h':\n%s", command, out)
	}
	return flags, envs
}

var deployFiles = append([]string{"Dockerfile", "systemd/baton.service", "systemd/baton.env",
	"kubernetes/deployment.yaml", "kubernetes/service.yaml", "kubernetes/kustomization.yaml"}, clusterFiles...)

// TestOnlyServeSettings: every BATON_* variable and every flag the
// deployment files give 'baton serve' is one it has.
func TestOnlyServeSettings(t *testing.T) {
	flags, envs := serveSettings(t)
	for _, f := range deployFiles {
		text := read(t, f)
		if strings.HasSuffix(f, ".yaml") {
			// Comments there may name what Kubernetes would inject (a
			// commented-out line in the env file, though, is a setting).
			text = regexp.MustCompile(`(?m)#.*$`).ReplaceAllString(text, "")
		}
		for _, name := range regexp.MustCompile(`BATON_[A-Z0-9_]+`).FindAllString(text, -1) {
			if !envs[name] {
				t.Errorf("%s uses %s, which 'baton serve -h' does not list", f, name)
			}
		}
	}
	var cmdlines []string
	unit := systemdKeys(t)
	cmdlines = append(cmdlines, unit["ExecStart"]...)
	cmdlines = append(cmdlines, unitKeys(t, clusterUnit)["ExecStart"]...)
	for _, f := range []string{"kubernetes/deployment.yaml", clusterStatefulSet} {
		for _, m := range regexp.MustCompile(`(?m)^\s*(?:args|command):\s*\[(.*)\]`).FindAllStringSubmatch(read(t, f), -1) {
			cmdlines = append(cmdlines, strings.NewReplacer(`"`, "", ",", " ").Replace(m[1]))
		}
	}
	for _, in := range finalStage(t) {
		if in[0] == "CMD" || in[0] == "ENTRYPOINT" {
			var argv []string
			if err := json.Unmarshal([]byte(in[1]), &argv); err != nil {
				t.Errorf("Dockerfile %s %s: use the JSON form", in[0], in[1])
			}
			cmdlines = append(cmdlines, strings.Join(argv, " "))
		}
	}
	if len(cmdlines) < 3 {
		t.Fatalf("found only the command lines %q", cmdlines)
	}
	for _, line := range cmdlines {
		for _, arg := range strings.Fields(line) {
			if !strings.HasPrefix(arg, "-") {
				continue
			}
			name, _, _ := strings.Cut(strings.TrimLeft(arg, "-"), "=")
			if !flags[name] {
				t.Errorf("command line %q uses flag %s, which 'baton serve -h' does not list", line, arg)
			}
		}
	}
}

// systemdKeys returns the unit's settings, key to values in order.
func systemdKeys(t *testing.T) map[string][]string {
	keys := map[string][]string{}
	for _, line := range strings.Split(read(t, "systemd/baton.service"), "\n") {
		line = strings.TrimSpace(line)
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			keys[k] = append(keys[k], v)
		}
	}
	return keys
}

// envFile reads KEY=VALUE lines, skipping comments.
func envFile(t *testing.T, path string) map[string]string {
	env := map[string]string{}
	for _, line := range strings.Split(read(t, path), "\n") {
		line = strings.TrimSpace(line)
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			env[k] = v
		}
	}
	return env
}

// k8sEnv returns the Deployment's container environment.
func k8sEnv(t *testing.T) map[string]string {
	env := map[string]string{}
	re := regexp.MustCompile(`(?m)^\s*- name: (\S+)\s*\n(?:\s*#.*\n)*\s*value: "?([^"\n]*)"?`)
	for _, m := range re.FindAllStringSubmatch(read(t, "kubernetes/deployment.yaml"), -1) {
		env[m[1]] = m[2]
	}
	return env
}

// shutdownBound is how long a graceful shutdown of a server with this
// environment can take: 2 x io-timeout for the sessions, 5s for the HTTP
// servers (docs/operations.md).
func shutdownBound(t *testing.T, env map[string]string) time.Duration {
	io := 5 * time.Second
	if v, ok := env["BATON_IO_TIMEOUT"]; ok {
		var err error
		if io, err = time.ParseDuration(v); err != nil {
			t.Fatalf("BATON_IO_TIMEOUT=%q: %v", v, err)
		}
	}
	bound := 2*io + 5*time.Second
	if env["BATON_AUDIT_LOG"] != "" { // a stalled audit log is waited for this long
		stall := 10 * time.Second
		if v, ok := env["BATON_AUDIT_STALL_TIMEOUT"]; ok {
			var err error
			if stall, err = time.ParseDuration(v); err != nil {
				t.Fatalf("BATON_AUDIT_STALL_TIMEOUT=%q: %v", v, err)
			}
		}
		bound += stall
	}
	return bound
}

func TestSystemdUnit(t *testing.T) {
	keys := systemdKeys(t)
	want := map[string]string{
		"DynamicUser":             "yes",
		"NoNewPrivileges":         "yes",
		"ProtectSystem":           "strict",
		"PrivateTmp":              "yes",
		"CapabilityBoundingSet":   "",
		"RestrictAddressFamilies": "AF_INET AF_INET6 AF_UNIX",
		"ExecReload":              "/bin/kill -HUP $MAINPID",
		"LimitNOFILE":             "1048576",
		"Restart":                 "on-failure",
		"EnvironmentFile":         "/etc/baton/baton.env",
		"ExecStart":               "/usr/local/bin/baton serve",
	}
	for k, v := range want {
		if got := keys[k]; !slices.Equal(got, []string{v}) {
			t.Errorf("%s=%q, want %q", k, got, v)
		}
	}
	stop, err := time.ParseDuration(keys["TimeoutStopSec"][0])
	if err != nil {
		t.Fatal(err)
	}
	if bound := shutdownBound(t, envFile(t, "systemd/baton.env")); stop <= bound {
		t.Errorf("TimeoutStopSec=%v, want more than a graceful shutdown's %v", stop, bound)
	}
	checkAddrs(t, "systemd/baton.env", envFile(t, "systemd/baton.env"))

	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Log("no systemd-analyze: the unit's syntax is not verified")
		return
	}
	// A copy that points at the test's binary and environment file.
	abs, err := filepath.Abs("systemd/baton.env")
	if err != nil {
		t.Fatal(err)
	}
	unit := strings.NewReplacer("/usr/local/bin/baton", binary(t), "/etc/baton/baton.env", abs).Replace(read(t, "systemd/baton.service"))
	path := filepath.Join(t.TempDir(), "baton.service")
	if err := os.WriteFile(path, []byte(unit), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", path).CombinedOutput()
	var complaints []string
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "baton.service") {
			complaints = append(complaints, line)
		}
	}
	if err != nil || len(complaints) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, strings.Join(complaints, "\n"))
	}
}

func TestKubernetes(t *testing.T) {
	dep := read(t, "kubernetes/deployment.yaml")
	for _, re := range []string{
		`(?m)^  replicas: 1$`,
		`(?m)^  strategy:\n    type: Recreate$`,
		`(?m)^\s+runAsNonRoot: true$`,
		`(?m)^\s+readOnlyRootFilesystem: true$`,
		`(?m)^\s+allowPrivilegeEscalation: false$`,
		// A TCP connect, which succeeds under descriptor exhaustion
		// (cmd/baton TestLivenessUnderDescriptorExhaustion).
		`livenessProbe:\n\s+tcpSocket:\n\s+port: ops\n`,
		`readinessProbe:\n\s+httpGet:\n\s+path: /readyz\n\s+port: ops\n`,
		`- name: baton\n\s+containerPort: 7070\n`,
		`- name: ops\n\s+containerPort: 7071\n`,
		`resources:\n\s+requests:\n\s+cpu: \S+\n\s+memory: \S+\n`,
	} {
		if !regexp.MustCompile(re).MatchString(dep) {
			t.Errorf("deployment.yaml does not match %q", re)
		}
	}
	for f, text := range map[string]string{"deployment.yaml": dep, "service.yaml": read(t, "kubernetes/service.yaml")} {
		if regexp.MustCompile(`(?i)port: 7072\b`).MatchString(text) {
			t.Errorf("%s exposes port 7072; the admin API must stay on the pod's loopback", f)
		}
	}
	env := k8sEnv(t)
	checkAddrs(t, "deployment.yaml", env)
	m := regexp.MustCompile(`terminationGracePeriodSeconds: (\d+)`).FindStringSubmatch(dep)
	if m == nil {
		t.Fatal("deployment.yaml has no terminationGracePeriodSeconds")
	}
	grace, _ := strconv.Atoi(m[1])
	if bound := shutdownBound(t, env); time.Duration(grace)*time.Second <= bound {
		t.Errorf("terminationGracePeriodSeconds %d, want more than a graceful shutdown's %v", grace, bound)
	}
	svc := read(t, "kubernetes/service.yaml")
	for _, re := range []string{`port: 7070\n\s+targetPort: baton\n`, `port: 7071\n\s+targetPort: ops\n`} {
		if !regexp.MustCompile(re).MatchString(svc) {
			t.Errorf("service.yaml does not match %q", re)
		}
	}
}

// TestConfigsServe starts a server with each deployment's environment
// (listen ports made free ones, the audit log a temporary file) and
// checks that it starts, answers its probes and metrics, grants a lock,
// and stops gracefully on SIGTERM.
func TestConfigsServe(t *testing.T) {
	configs := map[string]map[string]string{
		"Dockerfile":                 dockerEnv(t),
		"systemd/baton.env":          envFile(t, "systemd/baton.env"),
		"kubernetes/deployment.yaml": k8sEnv(t),
		"docker-compose.yml":         composeServerEnv(t),
	}
	for name, env := range configs {
		t.Run(strings.ReplaceAll(name, "/", "_"), func(t *testing.T) {
			serveWith(t, env)
		})
	}
}

func serveWith(t *testing.T, config map[string]string) {
	cmd := exec.Command(binary(t), "serve")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	for k, v := range config {
		switch {
		case strings.HasSuffix(k, "_ADDRESS") && v != "":
			host, _, _ := net.SplitHostPort(v)
			if !net.ParseIP(host).IsLoopback() {
				host = "127.0.0.1" // the test reaches it on loopback
			}
			v = net.JoinHostPort(host, "0")
		case k == "BATON_AUDIT_LOG" && v != "" && v != "-":
			v = filepath.Join(t.TempDir(), "audit.log")
		}
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	if config["BATON_LOG_FORMAT"] != "json" {
		t.Errorf("BATON_LOG_FORMAT=%q, want json in production", config["BATON_LOG_FORMAT"])
		cmd.Env = append(cmd.Env, "BATON_LOG_FORMAT=json")
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	listening := make(chan map[string]any, 1)
	var logs strings.Builder
	var logsMu sync.Mutex
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			logsMu.Lock()
			logs.WriteString(sc.Text() + "\n")
			logsMu.Unlock()
			var rec map[string]any
			if json.Unmarshal(sc.Bytes(), &rec) == nil && rec["msg"] == "baton listening" {
				listening <- rec
			}
		}
		io.Copy(io.Discard, stderr)
		exited <- cmd.Wait()
	}()
	output := func() string { logsMu.Lock(); defer logsMu.Unlock(); return logs.String() }
	defer func() {
		cmd.Process.Kill()
		<-exited
	}()

	var rec map[string]any
	select {
	case rec = <-listening:
	case err := <-exited:
		exited <- err
		t.Fatalf("baton serve exited (%v) before listening:\n%s", err, output())
	case <-time.After(timeout):
		t.Fatalf("baton serve not listening after %v:\n%s", timeout, output())
	}
	addr, _ := rec["addr"].(string)
	opsAddr, _ := rec["ops_addr"].(string)
	if opsAddr == "" {
		t.Fatalf("no ops listener: the probes have nothing to ask:\n%s", output())
	}
	if config["BATON_ADMIN_LISTEN_ADDRESS"] != "" && rec["admin_addr"] == "" {
		t.Errorf("no admin listener:\n%s", output())
	}

	client := &http.Client{Timeout: timeout}
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		resp, err := client.Get("http://" + opsAddr + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s: %s\n%s", path, resp.Status, body)
		}
		if path == "/metrics" && !strings.Contains(string(body), "baton_locks_held") {
			t.Errorf("GET /metrics lacks baton_locks_held")
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err = baton.New(baton.Config{Address: addr}).Do(ctx, "deploy-test", 5*time.Second,
		func(context.Context, uint64) error { return nil })
	if err != nil {
		t.Errorf("Do against the configured server: %v", err)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		exited <- err
		if err != nil {
			t.Errorf("baton serve after SIGTERM: %v, want exit 0:\n%s", err, output())
		}
	case <-time.After(shutdownBound(t, config) + timeout):
		t.Fatalf("baton serve still running after SIGTERM:\n%s", output())
	}
}

// TestGrafanaDashboard: every baton_ metric the dashboard queries is
// registered by package ops (histograms by their _bucket, _sum and
// _count series), every label it groups by exists, and it shows what an
// operator needs.
func TestGrafanaDashboard(t *testing.T) {
	// The families, their types and label names, from the server's own
	// exposition.
	rec := httptest.NewRecorder()
	ops.NewMetrics(ops.MetricsConfig{Version: "test"}).Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	types := map[string]string{} // family -> type
	labels := map[string]bool{}  // family + " " + label
	for _, line := range strings.Split(rec.Body.String(), "\n") {
		if f := strings.Fields(line); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			types[f[2]] = f[3]
		} else if m := regexp.MustCompile(`^(\w+)\{(.*)\}`).FindStringSubmatch(line); m != nil {
			for _, l := range regexp.MustCompile(`(\w+)="`).FindAllStringSubmatch(m[2], -1) {
				labels[m[1]+" "+l[1]] = true
			}
		}
	}
	if types["baton_wait_seconds"] != "histogram" || types["baton_releases_total"] != "counter" {
		t.Fatalf("could not read the metric types from /metrics:\n%s", rec.Body)
	}
	// family returns the family of a series name, or "".
	family := func(series string) string {
		if _, ok := types[series]; ok {
			return series
		}
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if f, ok := strings.CutSuffix(series, suffix); ok && types[f] == "histogram" {
				return f
			}
		}
		return ""
	}
	hasLabel := func(family, label string) bool {
		if label == "le" {
			return types[family] == "histogram"
		}
		return labels[family+" "+label] || labels[family+"_bucket "+label]
	}

	var dash struct {
		UID    string `json:"uid"`
		Panels []struct {
			ID         int    `json:"id"`
			Type       string `json:"type"`
			Title      string `json:"title"`
			Datasource *struct {
				UID string `json:"uid"`
			} `json:"datasource"`
			GridPos struct{ X, Y, W, H int } `json:"gridPos"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal([]byte(read(t, "grafana/baton-dashboard.json")), &dash); err != nil {
		t.Fatal(err)
	}
	if dash.UID == "" || len(dash.Panels) == 0 {
		t.Fatal("the dashboard has no uid or no panels")
	}
	metricRe := regexp.MustCompile(`\bbaton_[a-z_]+`)
	byRe := regexp.MustCompile(`\b(?:by|without)\s*\(([^)]*)\)|\{([^}]*)\}`)
	used := map[string]bool{}
	ids := map[int]bool{}
	for _, p := range dash.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d is used twice", p.ID)
		}
		ids[p.ID] = true
		if p.GridPos.X+p.GridPos.W > 24 || p.GridPos.W <= 0 || p.GridPos.H <= 0 {
			t.Errorf("panel %q: gridPos %+v does not fit 24 columns", p.Title, p.GridPos)
		}
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q does not use the ${datasource} variable", p.Title)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no queries", p.Title)
		}
		for _, target := range p.Targets {
			var fams []string
			for _, series := range metricRe.FindAllString(target.Expr, -1) {
				f := family(series)
				if f == "" {
					t.Errorf("panel %q queries %s, which package ops does not register", p.Title, series)
					continue
				}
				used[f] = true
				fams = append(fams, f)
			}
			for _, m := range byRe.FindAllStringSubmatch(target.Expr, -1) {
				for _, item := range strings.Split(m[1]+","+m[2], ",") {
					label := strings.TrimSpace(regexp.MustCompile(`[=!~].*`).ReplaceAllString(item, ""))
					if label == "" || label == "job" || label == "instance" || len(fams) == 0 {
						continue
					}
					if !slices.ContainsFunc(fams, func(f string) bool { return hasLabel(f, label) }) {
						t.Errorf("panel %q uses label %q, which none of its baton metrics has: %s", p.Title, label, target.Expr)
					}
				}
			}
		}
	}
	for _, name := range []string{
		"baton_locks_held", "baton_waiters", "baton_acquires_total", "baton_releases_total",
		"baton_wait_seconds", "baton_hold_seconds", "baton_protocol_errors_total",
		"baton_accept_errors_total", "baton_connections_active",
	} {
		if !used[name] {
			t.Errorf("the dashboard does not show %s", name)
		}
	}
}

// composeServices returns each service of docker-compose.yml as its block
// of YAML, with the "<<: *worker" merge key replaced by the x-worker
// block. The file keeps to block style, which these tests read with
// regular expressions (the module has no YAML parser).
func composeServices(t *testing.T) map[string]string {
	t.Helper()
	text := read(t, "docker-compose.yml")
	anchor := regexp.MustCompile(`(?ms)^x-worker: &worker\n((?:  .*?\n|\s*\n)+?)(?:^\S)`).FindStringSubmatch(text)
	if anchor == nil {
		t.Fatal("docker-compose.yml: no x-worker block")
	}
	worker := regexp.MustCompile(`(?m)^`).ReplaceAllString(strings.TrimRight(anchor[1], "\n"), "  ") + "\n"
	_, svcText, ok := strings.Cut(text, "\nservices:\n")
	if !ok {
		t.Fatal("docker-compose.yml: no services")
	}
	out := map[string]string{}
	var name string
	for _, line := range strings.SplitAfter(svcText, "\n") {
		if m := regexp.MustCompile(`^  ([a-z0-9-]+):\n$`).FindStringSubmatch(line); m != nil {
			name = m[1]
			continue
		}
		if strings.TrimSpace(line) == "<<: *worker" {
			line = worker
		}
		out[name] += line
	}
	return out
}

// composeBlock returns the lines under key (indented 4) in a service,
// dedented.
func composeBlock(svc, key string) []string {
	m := regexp.MustCompile(`(?m)^    ` + key + `:\n((?:      .*\n)+)`).FindStringSubmatch(svc)
	if m == nil {
		return nil
	}
	var out []string
	for _, l := range strings.Split(strings.TrimRight(m[1], "\n"), "\n") {
		out = append(out, strings.TrimPrefix(l, "      "))
	}
	return out
}

// composeMap reads the "KEY: value" lines of a block, unquoted, without
// comments.
func composeMap(t *testing.T, lines []string) map[string]string {
	out := map[string]string{}
	for _, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "#") {
			continue
		}
		k, v, ok := strings.Cut(l, ": ")
		if !ok {
			t.Fatalf("docker-compose.yml: %q is not KEY: value", l)
		}
		out[strings.TrimSpace(k)] = strings.Trim(strings.TrimSpace(v), `"`)
	}
	return out
}

// composeCommand returns a worker's shell script, with compose's "$$"
// unescaped.
func composeCommand(t *testing.T, svc string) string {
	m := regexp.MustCompile(`(?m)^    command:\n      - \|\n((?:        .*\n)+)`).FindStringSubmatch(svc)
	if m == nil {
		t.Fatalf("no command block in\n%s", svc)
	}
	return strings.ReplaceAll(regexp.MustCompile(`(?m)^        `).ReplaceAllString(m[1], ""), "$$", "$")
}

// composeServerEnv is the server's environment: the image's, then the
// compose file's.
func composeServerEnv(t *testing.T) map[string]string {
	env := dockerEnv(t)
	for k, v := range composeMap(t, composeBlock(composeServices(t)["server"], "environment")) {
		env[k] = v
	}
	return env
}

func port(t *testing.T, addr string) string {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("%q: %v", addr, err)
	}
	return p
}

// TestDockerCompose: docker-compose.yml builds from this Dockerfile, uses
// only settings and flags the commands have, and its ports agree with
// each other. ('docker compose up' itself is not run here.)
func TestDockerCompose(t *testing.T) {
	svcs := composeServices(t)
	names := slices.Sorted(maps.Keys(svcs))
	if !slices.Equal(names, []string{"server", "worker-a", "worker-b"}) {
		t.Fatalf("services %q", names)
	}

	// Every service builds this Dockerfile, from the repository root;
	// the workers its build stage, which has a shell and the binary at
	// dockerOut.
	stages := regexp.MustCompile(`(?im)^FROM\s+(?:--platform=\S+\s+)?\S+\s+AS\s+(\S+)$`).FindAllStringSubmatch(read(t, "Dockerfile"), -1)
	for name, svc := range svcs {
		build := composeMap(t, composeBlock(svc, "build"))
		ctx := build["context"]
		if abs, _ := filepath.Abs(ctx); abs != func() string { a, _ := filepath.Abs(".."); return a }() {
			t.Errorf("%s: build context %q is not the repository root", name, ctx)
		}
		fi1, err1 := os.Stat(filepath.Join(ctx, build["dockerfile"]))
		fi2, err2 := os.Stat("Dockerfile")
		if err1 != nil || err2 != nil || !os.SameFile(fi1, fi2) {
			t.Errorf("%s: dockerfile %q (in %q) is not deploy/Dockerfile: %v %v", name, build["dockerfile"], ctx, err1, err2)
		}
		if name == "server" {
			if build["target"] != "" {
				t.Errorf("server: target %q, want the final (distroless) stage", build["target"])
			}
			continue
		}
		if len(stages) == 0 || build["target"] != stages[0][1] {
			t.Errorf("%s: target %q, want the build stage %q", name, build["target"], stages)
		}
		if !strings.Contains(composeCommand(t, svc), dockerOut+" run ") {
			t.Errorf("%s: the command does not run %s, where the build stage puts baton", name, dockerOut)
		}
	}

	// The server: settings 'baton serve -h' lists; each listener
	// published under its own port on the host's loopback only.
	_, serveEnvs := settings(t, "serve")
	env := composeServerEnv(t)
	for k := range composeMap(t, composeBlock(svcs["server"], "environment")) {
		if !serveEnvs[k] {
			t.Errorf("server: %s is not in 'baton serve -h'", k)
		}
	}
	listeners := map[string]bool{}
	for _, k := range []string{"BATON_LISTEN_ADDRESS", "BATON_OPS_LISTEN_ADDRESS", "BATON_ADMIN_LISTEN_ADDRESS"} {
		if env[k] == "" {
			t.Errorf("server: %s is off", k)
			continue
		}
		listeners[port(t, env[k])] = true
	}
	published := map[string]bool{}
	for _, p := range composeBlock(svcs["server"], "ports") {
		spec, _, _ := strings.Cut(strings.Trim(strings.TrimPrefix(p, "- "), `"`), `"`)
		parts := strings.Split(spec, ":")
		if len(parts) != 3 || !net.ParseIP(parts[0]).IsLoopback() || parts[1] != parts[2] {
			t.Errorf("server: port %q, want 127.0.0.1:PORT:PORT (the admin API has no authentication)", p)
			continue
		}
		published[parts[2]] = true
	}
	if !maps.Equal(listeners, published) {
		t.Errorf("server: listeners on ports %v, published %v", listeners, published)
	}
	if !slices.Contains(strings.Split(env["BATON_ADMIN_ALLOWED_HOSTS"], ","), "server") {
		t.Errorf("server: BATON_ADMIN_ALLOWED_HOSTS=%q: the admin API would refuse 'baton locks --admin server:%s' from the compose network",
			env["BATON_ADMIN_ALLOWED_HOSTS"], port(t, env["BATON_ADMIN_LISTEN_ADDRESS"]))
	}
	protoPort := port(t, env["BATON_LISTEN_ADDRESS"])

	// Its health check is 'baton status' on the protocol port, with the
	// binary where the image has it.
	m := regexp.MustCompile(`(?m)^      test: (\[.*\])$`).FindStringSubmatch(svcs["server"])
	var argv []string
	if m == nil || json.Unmarshal([]byte(m[1]), &argv) != nil || len(argv) < 3 {
		t.Fatalf("server: no healthcheck test in JSON form")
	}
	var entry []string
	for _, in := range finalStage(t) {
		if in[0] == "ENTRYPOINT" {
			json.Unmarshal([]byte(in[1]), &entry)
		}
	}
	if argv[0] != "CMD" || len(entry) == 0 || argv[1] != entry[0] || argv[2] != "status" {
		t.Errorf("healthcheck %q, want [CMD %v status ...]", argv, entry)
	}
	statusFlags, _ := settings(t, "status")
	checkArgs(t, "healthcheck", argv[3:], statusFlags)
	if i := slices.Index(argv, "--server"); i < 0 || i+1 >= len(argv) || port(t, argv[i+1]) != protoPort {
		t.Errorf("healthcheck %q does not ask the protocol port %s", argv, protoPort)
	}

	// The workers: 'baton run' settings and flags, the server's protocol
	// port.
	runFlags, runEnvs := settings(t, "run")
	for _, name := range []string{"worker-a", "worker-b"} {
		wenv := composeMap(t, composeBlock(svcs[name], "environment"))
		for k := range wenv {
			if strings.HasPrefix(k, "BATON_") && !runEnvs[k] {
				t.Errorf("%s: %s is not in 'baton run -h'", name, k)
			}
		}
		if wenv["BATON_SERVER"] != "server:"+protoPort {
			t.Errorf("%s: BATON_SERVER=%q, want server:%s", name, wenv["BATON_SERVER"], protoPort)
		}
		if wenv["WORKER"] != name {
			t.Errorf("%s: WORKER=%q", name, wenv["WORKER"])
		}
		cmd := composeCommand(t, svcs[name])
		line := regexp.MustCompile(regexp.QuoteMeta(dockerOut) + ` run (.*?) -- `).FindStringSubmatch(cmd)
		if line == nil {
			t.Fatalf("%s: no 'baton run ... --' in %q", name, cmd)
		}
		checkArgs(t, name, strings.Fields(line[1]), runFlags)
	}
}

// checkArgs checks that every flag in args is one of flags.
func checkArgs(t *testing.T, where string, args []string, flags map[string]bool) {
	t.Helper()
	for _, a := range args {
		if !strings.HasPrefix(a, "-") {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !flags[name] {
			t.Errorf("%s: flag %s is not in the command's -h", where, a)
		}
	}
}

// TestComposeWorkers runs the two workers' script, as compose would but
// against a local server: they take turns on the lock, one at a time,
// with increasing fencing tokens.
func TestComposeWorkers(t *testing.T) {
	addr := opstest.StartServer(t, &server.Server{Logger: slog.New(slog.DiscardHandler)})

	svcs := composeServices(t)
	lines := make(chan string, 100)
	for _, name := range []string{"worker-a", "worker-b"} {
		script := strings.ReplaceAll(composeCommand(t, svcs[name]), dockerOut, binary(t))
		cmd := exec.Command("sh", "-c", script)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
		for k, v := range composeMap(t, composeBlock(svcs[name], "environment")) {
			if k == "BATON_SERVER" {
				v = addr
			}
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = io.Discard
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				lines <- sc.Text()
			}
		}()
		t.Cleanup(func() {
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			cmd.Wait()
			<-done
		})
		// Start the second only once the first holds the lock, so that
		// the order below is known.
		if name == "worker-a" {
			select {
			case l := <-lines:
				if !strings.HasPrefix(l, "worker-a holds demo, fencing token ") {
					t.Fatalf("first line %q", l)
				}
				lines <- l
			case <-time.After(timeout):
				t.Fatal("worker-a never held the lock")
			}
		}
	}
	// worker-a holds, releases; worker-b (queued meanwhile) holds next.
	want := []string{"worker-a holds", "worker-a releases", "worker-b holds"}
	var got []string
	var tokens []uint64
	start := time.Now()
	for len(got) < len(want) {
		select {
		case l := <-lines:
			f := strings.Fields(l)
			got = append(got, strings.Join(f[:2], " "))
			if f[1] == "holds" {
				tok, err := strconv.ParseUint(f[len(f)-1], 10, 64)
				if err != nil {
					t.Fatalf("line %q: %v", l, err)
				}
				tokens = append(tokens, tok)
			}
		case <-time.After(timeout):
			t.Fatalf("after %v: lines %q, want %q", time.Since(start), got, want)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("lines %q, want %q", got, want)
	}
	if len(tokens) != 2 || tokens[1] <= tokens[0] {
		t.Errorf("fencing tokens %v, want increasing", tokens)
	}
	t.Logf("handover seen after %v", time.Since(start))
}
