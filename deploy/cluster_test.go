//go:build unix

package deploy_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonlock/baton/acl"
	"github.com/batonlock/baton/internal/freeport"
	"github.com/batonlock/baton/internal/testpki"
)

// The three-node cluster examples: a systemd unit template with one
// environment file per node, and a Kubernetes StatefulSet.
const (
	clusterUnit        = "systemd/cluster/baton-node@.service"
	clusterStatefulSet = "kubernetes/cluster/statefulset.yaml"
	clusterService     = "kubernetes/cluster/service.yaml"
)

var clusterEnvFiles = []string{"systemd/cluster/n1.env", "systemd/cluster/n2.env", "systemd/cluster/n3.env"}

var clusterFiles = append([]string{clusterUnit, clusterStatefulSet, clusterService,
	"kubernetes/cluster/kustomization.yaml", "kubernetes/cluster/pdb.yaml"}, clusterEnvFiles...)

// unitKeys returns a unit file's settings, key to values in order.
func unitKeys(t *testing.T, path string) map[string][]string {
	keys := map[string][]string{}
	for _, line := range strings.Split(read(t, path), "\n") {
		line = strings.TrimSpace(line)
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") && !strings.HasPrefix(line, "[") {
			keys[k] = append(keys[k], v)
		}
	}
	return keys
}

// systemdNodeEnv is the environment of node id under the unit template:
// its environment file, then the unit's Environment= lines with %i.
func systemdNodeEnv(t *testing.T, id string) map[string]string {
	env := envFile(t, "systemd/cluster/"+id+".env")
	for _, kv := range unitKeys(t, clusterUnit)["Environment"] {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = strings.ReplaceAll(v, "%i", id)
	}
	return env
}

// statefulSetEnv returns the StatefulSet's container environment with
// $(VAR) expanded as Kubernetes does, for pod.
func statefulSetEnv(t *testing.T, pod string) map[string]string {
	env := map[string]string{"POD_NAME": pod, "POD_NAMESPACE": "baton"}
	re := regexp.MustCompile(`(?m)^\s*- name: (BATON_\S+)\s*\n(?:\s*#.*\n)*\s*value: "?([^"\n]*)"?`)
	for _, m := range re.FindAllStringSubmatch(read(t, clusterStatefulSet), -1) {
		env[m[1]] = regexp.MustCompile(`\$\((\w+)\)`).ReplaceAllStringFunc(m[2], func(v string) string {
			return env[v[2:len(v)-1]]
		})
	}
	delete(env, "POD_NAME")
	delete(env, "POD_NAMESPACE")
	return env
}

// checkClusterEnv checks the nodes' environments: a node id each, every
// listener on all interfaces with the node's own advertised host, one
// -join list for all that names every node's admin address, the first
// node's first (it forms the cluster; a node that lost its data
// directory joins again instead of forming one), TLS with a
// -cluster-identity, and a cluster secret.
func checkClusterEnv(t *testing.T, where string, envs []map[string]string) {
	t.Helper()
	ids, hosts := map[string]bool{}, map[string]bool{}
	for i, env := range envs {
		for _, k := range []string{"BATON_NODE_ID", "BATON_DATA_DIR", "BATON_ADVERTISE_HOST", "BATON_RAFT_LISTEN_ADDRESS",
			"BATON_ADMIN_LISTEN_ADDRESS", "BATON_LISTEN_ADDRESS", "BATON_OPS_LISTEN_ADDRESS", "BATON_JOIN",
			"BATON_TLS_CERT", "BATON_TLS_KEY", "BATON_TLS_CLIENT_CA", "BATON_CLUSTER_IDENTITY", "BATON_ACL_FILE",
			"BATON_CLUSTER_SECRET_FILE"} {
			if env[k] == "" {
				t.Errorf("%s, node %d: no %s", where, i, k)
			}
		}
		ids[env["BATON_NODE_ID"]], hosts[env["BATON_ADVERTISE_HOST"]] = true, true
		if env["BATON_JOIN"] != envs[0]["BATON_JOIN"] {
			t.Errorf("%s, node %d: BATON_JOIN=%q, want every node to join through the same member %q", where, i, env["BATON_JOIN"], envs[0]["BATON_JOIN"])
		}
		if env["BATON_LOG_FORMAT"] != "json" {
			t.Errorf("%s, node %d: BATON_LOG_FORMAT=%q, want json", where, i, env["BATON_LOG_FORMAT"])
		}
	}
	if len(ids) != len(envs) || len(hosts) != len(envs) {
		t.Errorf("%s: node ids %v and advertised hosts %v, want %d distinct of each", where, slices.Collect(maps.Keys(ids)), slices.Collect(maps.Keys(hosts)), len(envs))
	}
	var want []string
	for _, env := range envs {
		_, port, _ := net.SplitHostPort(env["BATON_ADMIN_LISTEN_ADDRESS"])
		want = append(want, net.JoinHostPort(env["BATON_ADVERTISE_HOST"], port))
	}
	if got := strings.Split(envs[0]["BATON_JOIN"], ","); !slices.Equal(got, want) {
		t.Errorf("%s: BATON_JOIN=%q, want the list of every node's admin address, the first node's first: %q", where, envs[0]["BATON_JOIN"], strings.Join(want, ","))
	}
}

func TestClusterSystemd(t *testing.T) {
	keys := unitKeys(t, clusterUnit)
	want := map[string]string{
		"EnvironmentFile": "/etc/baton/%i.env",
		"ExecStart":       "/usr/local/bin/baton serve",
		"StateDirectory":  "baton/%i",
		"DynamicUser":     "yes",
		"ProtectSystem":   "strict",
		"KillSignal":      "SIGTERM",
	}
	for k, v := range want {
		if got := keys[k]; !slices.Equal(got, []string{v}) {
			t.Errorf("%s: %s=%q, want %q", clusterUnit, k, got, v)
		}
	}
	var envs []map[string]string
	for i, f := range clusterEnvFiles {
		id := fmt.Sprintf("n%d", i+1)
		env := systemdNodeEnv(t, id)
		if env["BATON_NODE_ID"] != id || env["BATON_DATA_DIR"] != "/var/lib/baton/"+id {
			t.Errorf("%s: BATON_NODE_ID=%q BATON_DATA_DIR=%q, want %s in the unit's StateDirectory", f, env["BATON_NODE_ID"], env["BATON_DATA_DIR"], id)
		}
		if al := env["BATON_AUDIT_LOG"]; al != "" && !strings.HasPrefix(al, "/var/log/baton/"+id+"/") {
			t.Errorf("%s: BATON_AUDIT_LOG=%q, want it in the unit's LogsDirectory", f, al)
		}
		stop, err := time.ParseDuration(keys["TimeoutStopSec"][0])
		if err != nil {
			t.Fatal(err)
		}
		if bound := shutdownBound(t, env); stop <= bound {
			t.Errorf("TimeoutStopSec=%v, want more than a graceful shutdown's %v", stop, bound)
		}
		envs = append(envs, env)
	}
	checkClusterEnv(t, "systemd", envs)
	checkACL(t, "systemd/cluster/acl.json", envs[0]["BATON_CLUSTER_IDENTITY"])
	for _, cred := range keys["LoadCredential"] {
		name, _, _ := strings.Cut(cred, ":")
		if !slices.ContainsFunc(slices.Collect(maps.Values(envs[0])), func(v string) bool { return v == "%d/"+name }) {
			t.Errorf("LoadCredential=%s: no BATON_* variable points at %%d/%s", cred, name)
		}
	}

	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Log("no systemd-analyze: the unit's syntax is not verified")
		return
	}
	dir := t.TempDir()
	unit := strings.NewReplacer("/usr/local/bin/baton", binary(t), "/etc/baton/%i.env", filepath.Join(dir, "%i.env")).Replace(read(t, clusterUnit))
	if err := os.WriteFile(filepath.Join(dir, "baton-node@.service"), []byte(unit), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "n1.env"), []byte(read(t, clusterEnvFiles[0])), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("baton-node@.service", filepath.Join(dir, "baton-node@n1.service")); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", filepath.Join(dir, "baton-node@n1.service")).CombinedOutput()
	var complaints []string
	for _, line := range strings.Split(string(out), "\n") {
		// Credentials name files only the installed system has.
		if strings.Contains(line, "baton-node@") && !strings.Contains(line, "/etc/baton/") {
			complaints = append(complaints, line)
		}
	}
	if len(complaints) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, strings.Join(complaints, "\n"))
	}
}

func TestClusterKubernetes(t *testing.T) {
	sts := read(t, clusterStatefulSet)
	for _, re := range []string{
		`(?m)^  serviceName: baton-peers$`,
		`(?m)^  replicas: 3$`,
		`(?m)^  podManagementPolicy: Parallel$`,
		`(?m)^\s+runAsNonRoot: true$`,
		`(?m)^\s+readOnlyRootFilesystem: true$`,
		`livenessProbe:\n\s+tcpSocket:\n\s+port: ops\n`,
		`readinessProbe:\n\s+httpGet:\n\s+path: /readyz\n\s+port: ops\n`,
		`preStop:\n\s+sleep:\n\s+seconds: \d+\n`,
		`volumeMounts:\n\s+- name: data\n\s+mountPath: /var/lib/baton\n`,
		`volumeClaimTemplates:\n\s+- metadata:\n\s+name: data\n`,
		`- name: raft\n\s+containerPort: 7080\n`,
		`- name: admin\n\s+containerPort: 7072\n`,
		`fieldPath: metadata.name\n`,
	} {
		if !regexp.MustCompile(re).MatchString(sts) {
			t.Errorf("%s does not match %q", clusterStatefulSet, re)
		}
	}
	if pdb := read(t, "kubernetes/cluster/pdb.yaml"); !strings.Contains(pdb, "maxUnavailable: 1\n") {
		t.Errorf("pdb.yaml: want maxUnavailable: 1 (two of three nodes keep the quorum)")
	}
	for _, f := range []string{"statefulset.yaml", "service.yaml", "pdb.yaml"} {
		if !strings.Contains(read(t, "kubernetes/cluster/kustomization.yaml"), "  - "+f+"\n") {
			t.Errorf("kustomization.yaml does not list %s", f)
		}
	}
	svc := read(t, clusterService)
	for _, re := range []string{
		`(?m)name: baton-peers\n(?:.*\n)*?spec:\n\s+clusterIP: None\n\s+publishNotReadyAddresses: true\n`,
		`port: 7080\n\s+targetPort: raft\n`,
		`port: 7072\n\s+targetPort: admin\n`,
	} {
		if !regexp.MustCompile(re).MatchString(svc) {
			t.Errorf("%s does not match %q", clusterService, re)
		}
	}
	var envs []map[string]string
	for i := range 3 {
		env := statefulSetEnv(t, fmt.Sprintf("baton-%d", i))
		if env["BATON_DATA_DIR"] != "/var/lib/baton" {
			t.Errorf("BATON_DATA_DIR=%q, want the volume at /var/lib/baton", env["BATON_DATA_DIR"])
		}
		if h := env["BATON_ADVERTISE_HOST"]; !strings.HasPrefix(h, fmt.Sprintf("baton-%d.baton-peers.", i)) {
			t.Errorf("BATON_ADVERTISE_HOST=%q, want the pod's name under the headless Service", h)
		}
		envs = append(envs, env)
	}
	checkClusterEnv(t, "statefulset", envs)
	checkACL(t, "kubernetes/cluster/acl.json", envs[0]["BATON_CLUSTER_IDENTITY"])
	m := regexp.MustCompile(`terminationGracePeriodSeconds: (\d+)`).FindStringSubmatch(sts)
	if m == nil {
		t.Fatal("no terminationGracePeriodSeconds")
	}
	grace, _ := strconv.Atoi(m[1])
	if bound := shutdownBound(t, envs[0]) + 5*time.Second; time.Duration(grace)*time.Second <= bound {
		t.Errorf("terminationGracePeriodSeconds %d, want more than the preStop pause and a graceful shutdown's %v", grace, bound)
	}
}

// checkACL checks that an example ACL loads and that no client rule's
// identity pattern is the nodes' (the ACL must not make a client a node).
func checkACL(t *testing.T, path, nodes string) {
	t.Helper()
	if _, err := acl.Load(path); err != nil {
		t.Errorf("%s: %v", path, err)
	}
	var f acl.File
	if err := json.Unmarshal([]byte(read(t, path)), &f); err != nil {
		t.Fatal(err)
	}
	for _, r := range f.Admin {
		if r.Identity == nodes {
			t.Errorf("%s: an admin rule for the nodes' identity %q", path, nodes)
		}
	}
}

// TestClusterConfigsForm starts three nodes with each example's
// environment, made local: the listeners on free loopback ports, the
// advertised host 127.0.0.1, the data directories and audit logs
// temporary, certificates from a test CA with identities that match the
// configured -cluster-identity; the examples' own ACL files. The three
// must form one cluster, each ready (/readyz) with the same ring.
func TestClusterConfigsForm(t *testing.T) {
	acls := map[string]string{"systemd": "systemd/cluster/acl.json", "kubernetes": "kubernetes/cluster/acl.json"}
	for name, envs := range map[string]func() []map[string]string{
		"systemd": func() []map[string]string {
			var out []map[string]string
			for i := range 3 {
				out = append(out, systemdNodeEnv(t, fmt.Sprintf("n%d", i+1)))
			}
			return out
		},
		"kubernetes": func() []map[string]string {
			var out []map[string]string
			for i := range 3 {
				out = append(out, statefulSetEnv(t, fmt.Sprintf("baton-%d", i)))
			}
			return out
		},
	} {
		t.Run(name, func(t *testing.T) { formCluster(t, envs(), acls[name]) })
	}
}

func formCluster(t *testing.T, envs []map[string]string, aclPath string) {
	dir := t.TempDir()
	ca, err := testpki.NewCA("deploy test CA")
	if err != nil {
		t.Fatal(err)
	}
	caPath, err := ca.WriteFile(dir, "ca")
	if err != nil {
		t.Fatal(err)
	}
	// The same ports for the same flags on every node in the examples:
	// here each node gets its own, and -join the list of their admin ports.
	ports := make([]map[string]string, len(envs))
	for i := range envs {
		ports[i] = map[string]string{}
		for _, k := range []string{"BATON_LISTEN_ADDRESS", "BATON_OPS_LISTEN_ADDRESS", "BATON_ADMIN_LISTEN_ADDRESS", "BATON_RAFT_LISTEN_ADDRESS"} {
			ports[i][k] = freeport.Port(t)
		}
	}
	// One secret file for all: the nodes' member API writes carry it.
	secret := filepath.Join(dir, "cluster.secret")
	if err := os.WriteFile(secret, []byte("deploy-test-cluster-secret-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var ops []string
	for i, env := range envs {
		id := env["BATON_NODE_ID"]
		leaf := testpki.Localhost(id)
		leaf.URIs = []string{strings.ReplaceAll(env["BATON_CLUSTER_IDENTITY"], "*", id)}
		pair, err := ca.Issue(leaf)
		if err != nil {
			t.Fatal(err)
		}
		cert, key, err := pair.WriteFiles(dir, id)
		if err != nil {
			t.Fatal(err)
		}
		local := map[string]string{}
		for k, v := range env {
			switch {
			case ports[i][k] != "":
				v = "127.0.0.1:" + ports[i][k]
			case k == "BATON_ADVERTISE_HOST":
				v = "127.0.0.1"
			case k == "BATON_JOIN":
				var list []string
				for j := range envs {
					list = append(list, "127.0.0.1:"+ports[j]["BATON_ADMIN_LISTEN_ADDRESS"])
				}
				v = strings.Join(list, ",")
			case k == "BATON_DATA_DIR":
				v = filepath.Join(dir, id+"-data")
			case k == "BATON_AUDIT_LOG" && v != "-":
				v = filepath.Join(dir, id+"-audit.log")
			case k == "BATON_TLS_CERT":
				v = cert
			case k == "BATON_TLS_KEY":
				v = key
			case k == "BATON_TLS_CLIENT_CA":
				v = caPath
			case k == "BATON_ACL_FILE":
				v = aclPath
			case k == "BATON_CLUSTER_SECRET_FILE":
				v = secret
			}
			local[k] = v
		}
		ops = append(ops, local["BATON_OPS_LISTEN_ADDRESS"])
		startNode(t, id, local)
	}
	// Every node ready: it has committed its epoch and applied the
	// leader's ring, a ring of the three.
	client := &http.Client{Timeout: timeout}
	for i, addr := range ops {
		deadline := time.Now().Add(2 * timeout)
		for {
			resp, err := client.Get("http://" + addr + "/readyz")
			ok := err == nil && resp.StatusCode == http.StatusOK
			if err == nil {
				resp.Body.Close()
			}
			if ok && metric(t, addr, "baton_cluster_ring_version") == 3 && metric(t, addr, "baton_cluster_members") == 3 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("node %d not ready with a ring of 3 within %v", i, 2*timeout)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// metric returns the value of an unlabelled metric at an ops address.
func metric(t *testing.T, ops, name string) float64 {
	resp, err := http.Get("http://" + ops + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return -1
}

// startNode starts 'baton serve' with exactly env and stops it when the
// test ends; its logs are shown if the test fails.
func startNode(t *testing.T, id string, env map[string]string) {
	cmd := exec.Command(binary(t), "serve")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var logs strings.Builder
	var mu sync.Mutex
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			mu.Lock()
			logs.WriteString(sc.Text() + "\n")
			mu.Unlock()
		}
		cmd.Wait()
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
		if t.Failed() {
			mu.Lock()
			t.Logf("%s:\n%s", id, logs.String())
			mu.Unlock()
		}
	})
}
