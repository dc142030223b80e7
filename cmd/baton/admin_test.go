//go:build unix

package main

import (
	"encoding/json"
	"net"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton/admin"
	"github.com/batonlock/baton/internal/opstest"
	"github.com/batonlock/baton/protocol"
)

// fields splits a table into rows of whitespace-separated cells.
func fields(out string) [][]string {
	var rows [][]string
	for _, line := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		rows = append(rows, strings.Fields(line))
	}
	return rows
}

// aligned reports whether every row of a tabwriter table starts its
// columns where the header does.
func aligned(t *testing.T, out string) {
	t.Helper()
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	var starts []int
	for i := 1; i < len(lines[0]); i++ {
		if lines[0][i-1] == ' ' && lines[0][i] != ' ' {
			starts = append(starts, i)
		}
	}
	for _, l := range lines[1:] {
		for _, s := range starts {
			if s >= len(l) || l[s-1] != ' ' || l[s] == ' ' {
				t.Errorf("row %q is not aligned with header %q", l, lines[0])
				break
			}
		}
	}
}

func TestAdminCLI(t *testing.T) {
	f := startServe(t, func(c *serveConfig) { c.adminListen = "127.0.0.1:0" })
	adm := "--admin=" + f.addrs.admin

	code, out, errOut := cli("locks", adm)
	if code != 0 || strings.TrimSpace(out) != strings.Join(strings.Fields("NAME  HOLDER  IDENTITY  TOKEN  SINCE  LEASE  WAITERS  HOLDERS  MODE  CLAIM  LABEL"), "  ") {
		t.Errorf("empty locks = %d %q %q", code, out, errOut)
	}

	owner := opstest.Dial(t, f.addrs.protocol)
	owner.Acquire("jobs/nightly", 10*time.Second)
	tok := owner.Expect(protocol.TypeAcquired, 0).Token
	waiter := opstest.Dial(t, f.addrs.protocol)
	waiter.Acquire("jobs/nightly", 10*time.Second)
	waiter.Expect(protocol.TypeWaiting, 0)
	other := opstest.Dial(t, f.addrs.protocol)
	other.Acquire("db lock", 1500*time.Millisecond)
	other.Expect(protocol.TypeAcquired, 0)

	// locks: an aligned table, awkward names quoted.
	code, out, _ = cli("locks", adm)
	rows := fields(out)
	if code != 0 || len(rows) != 3 {
		t.Fatalf("locks = %d\n%s", code, out)
	}
	aligned(t, out)
	if got := rows[1]; got[0] != `"db` || got[1] != `lock"` || got[7] != "0" || got[6] != "1.5s" {
		t.Errorf("row %q", got)
	}
	if got := rows[2]; got[0] != "jobs/nightly" || got[1] != owner.Addr() || got[2] != "-" || got[3] != itoa(tok) || got[5] != "10s" || got[6] != "1" {
		t.Errorf("row %q", got)
	}

	// --json is the API's shape; --match filters by glob; flags may
	// follow arguments.
	code, out, _ = cli("locks", "--json", "--match", "jobs/*", adm)
	var list admin.LockList
	if err := json.Unmarshal([]byte(out), &list); code != 0 || err != nil || len(list.Locks) != 1 || list.Locks[0].Holder.Token != tok {
		t.Errorf("locks --json = %d %s (%v)", code, out, err)
	}
	if !strings.Contains(out, `"locks": [`) || !strings.Contains(out, `"remote_addr": "`+owner.Addr()+`"`) {
		t.Errorf("locks --json shape:\n%s", out)
	}

	code, out, _ = cli("show", "jobs/nightly", adm)
	rows = fields(out)
	if code != 0 || len(rows) != 4 || strings.Join(rows[0], " ") != "lock jobs/nightly" ||
		rows[2][0] != "holder" || rows[2][1] != owner.Addr() || rows[3][0] != "1" || rows[3][1] != waiter.Addr() {
		t.Errorf("lock = %d\n%s", code, out)
	}
	aligned(t, strings.SplitN(out, "\n", 2)[1])
	code, out, _ = cli("show", adm, "--json", "jobs/nightly")
	var l admin.Lock
	if err := json.Unmarshal([]byte(out), &l); code != 0 || err != nil || l.Name != "jobs/nightly" || len(l.Waiters) != 1 {
		t.Errorf("lock --json = %d %s", code, out)
	}

	code, out, _ = cli("info", adm)
	if code != 0 || !strings.Contains(out, "locks held     2") || !strings.Contains(out, "admin-listen") || !strings.Contains(out, "version        dev") {
		t.Errorf("info = %d\n%s", code, out)
	}
	if !regexp.MustCompile(`(?m)^tls-cert +""$`).MatchString(out) {
		t.Errorf("info shows the empty -tls-cert other than as \"\":\n%s", out)
	}
	code, out, _ = cli("info", adm, "--json")
	var info admin.Info
	if err := json.Unmarshal([]byte(out), &info); code != 0 || err != nil || info.Counts.Waiters != 1 || info.Config["listen"] != "127.0.0.1:0" {
		t.Errorf("info --json = %d %s", code, out)
	}

	// Not found: exit 3.
	for _, args := range [][]string{
		{"show", "nope"},
		{"release", "nope"},
		{"kick", "jobs/nightly", "127.0.0.1:1"},
		{"kick", "nope", waiter.Addr()},
	} {
		code, out, errOut := cli(append(args, adm)...)
		if code != exitAdminNotFound || out != "" || !strings.Contains(errOut, "baton "+args[0]+": ") {
			t.Errorf("%v = %d %q %q, want 3", args, code, out, errOut)
		}
	}

	// kick and release, --json.
	code, out, _ = cli("kick", "--json", adm, "jobs/nightly", waiter.Addr())
	var k admin.Kicked
	if err := json.Unmarshal([]byte(out), &k); code != 0 || err != nil || k.Kicked != waiter.Addr() || len(k.Lock.Waiters) != 0 {
		t.Errorf("kick --json = %d %s", code, out)
	}
	waiter.Expect(protocol.TypeError, protocol.CodeClosedByAdmin)
	code, out, _ = cli("release", adm, "jobs/nightly")
	if code != 0 || out != "released lock jobs/nightly\nlock jobs/nightly is now free\n" {
		t.Errorf("release = %d %q", code, out)
	}
	owner.Expect(protocol.TypeError, protocol.CodeClosedByAdmin)
}

func itoa(u uint64) string {
	b, _ := json.Marshal(u)
	return string(b)
}

func TestAdminCLIUsageAndErrors(t *testing.T) {
	for _, tt := range []struct {
		args []string
		code int
		want string // in stderr (or stdout for -h)
	}{
		{[]string{"show"}, exitUsage, "missing NAME"},
		{[]string{"kick", "x"}, exitUsage, "missing WAITER"},
		{[]string{"locks", "extra"}, exitUsage, `unexpected argument "extra"`},
		{[]string{"show", "a", "b"}, exitUsage, `unexpected argument "b"`},
		{[]string{"locks", "--bogus"}, exitUsage, "-bogus"},
		{[]string{"show", "x", "--bogus"}, exitUsage, "-bogus"},
		{[]string{"show", "--match", "x", "y"}, exitUsage, "-match"}, // only 'locks' filters
		{[]string{"info", "--timeout", "0s"}, exitUsage, "--timeout must be positive"},
		{[]string{"info", "--admin", "ftp://x:1"}, exitUsage, "--admin"},
		{[]string{"locks", "--admin", "127.0.0.1"}, exitUsage, "want host:port"},
		{[]string{"info", "--admin", "http://127.0.0.1:0"}, exitUsage, "port"},
		{[]string{"show", strings.Repeat("x", 256)}, exitUsage, "too long"},
		{[]string{"show", "-h"}, exitOK, "Usage: baton show [flags] NAME"},
		{[]string{"show", "x", "-h"}, exitOK, "3  not found"},
		{[]string{"lock", "-h"}, exitOK, "deprecated, use 'baton show NAME'"},
		{[]string{"lock", "job", "--", "make"}, exitUsage, "use 'baton run NAME -- COMMAND'"},
	} {
		code, out, errOut := cli(tt.args...)
		if code != tt.code || !strings.Contains(out+errOut, tt.want) {
			t.Errorf("%q = %d, out %q err %q; want %d and %q", tt.args, code, out, errOut, tt.code, tt.want)
		}
	}

	// Unreachable: exit 1 with a hint.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close()
	code, _, errOut := cli("locks", "--admin", dead)
	if code != exitError || !strings.Contains(errOut, "baton serve -admin-listen") {
		t.Errorf("unreachable = %d %q, want 1 with a hint", code, errOut)
	}

	// The environment names the server; a flag beats it.
	f := startServe(t, func(c *serveConfig) { c.adminListen = "127.0.0.1:0" })
	t.Setenv("BATON_ADMIN_ADDRESS", f.addrs.admin)
	if code, _, errOut := cli("info"); code != 0 {
		t.Errorf("info with BATON_ADMIN_ADDRESS = %d %q", code, errOut)
	}
	if code, _, _ := cli("info", "--admin", dead); code != exitError {
		t.Errorf("--admin did not beat BATON_ADMIN_ADDRESS: exit %d", code)
	}
	// A name starting with '-' after "--".
	if code, _, errOut := cli("show", "--", "-x"); code != exitAdminNotFound {
		t.Errorf("lock -- -x = %d %q, want 3", code, errOut)
	}
}

// TestAdminCLIV2Claims: show lists every holder of a shared lock with its
// mode, SESSION/CLAIM, protocol and label; release --claim and --token
// end one holder, kick SESSION/CLAIM one waiter, each with REVOKED 0x02.
func TestAdminCLIV2Claims(t *testing.T) {
	f := startServe(t, func(c *serveConfig) { c.adminListen = "127.0.0.1:0" })
	adm := "--admin=" + f.addrs.admin
	r1 := opstest.DialV2(t, f.addrs.protocol, 10*time.Second, "reader-1")
	r1.Claim(4, protocol.ModeShared, 0, "rw")
	tok := r1.ExpectV2(protocol.TypeGranted, 4, 0).Token
	r2 := opstest.DialV2(t, f.addrs.protocol, 10*time.Second, "reader-2")
	r2.Claim(9, protocol.ModeShared, 0, "rw")
	r2.ExpectV2(protocol.TypeGranted, 9, 0)
	r2.Claim(10, protocol.ModeExclusive, 0, "rw")
	r2.ExpectV2(protocol.TypeQueued, 10, 0)

	code, out, _ := cli("show", "rw", adm)
	rows := fields(out)
	if code != 0 || len(rows) != 5 || rows[2][0] != "holder" || rows[3][0] != "holder" || rows[4][0] != "1" {
		t.Fatalf("show = %d\n%s", code, out)
	}
	aligned(t, strings.SplitN(out, "\n", 2)[1])
	// POSITION REMOTE_ADDR IDENTITY TOKEN SINCE LEASE MODE CLAIM PROTO LABEL
	h1, h2, w := rows[2], rows[3], rows[4]
	if h1[3] != itoa(tok) || h1[6] != "shared" || !strings.HasSuffix(h1[7], "/4") || h1[8] != "2" || h1[9] != "reader-1" {
		t.Errorf("holder row %q", h1)
	}
	if w[6] != "exclusive" || !strings.HasSuffix(w[7], "/10") || w[9] != "reader-2" {
		t.Errorf("waiter row %q", w)
	}
	code, out, _ = cli("locks", adm)
	if rows := fields(out); code != 0 || len(rows) != 2 || rows[1][7] != "2" || rows[1][8] != "shared" {
		t.Errorf("locks = %d\n%s", code, out)
	}
	if code, _, errOut := cli("release", "rw", adm); code != exitError || !strings.Contains(errOut, "several holders") {
		t.Errorf("bare release of two holders = %d %q", code, errOut)
	}
	if code, _, errOut := cli("release", "rw", "--claim", "x", adm); code != exitUsage {
		t.Errorf("release --claim x = %d %q, want usage error", code, errOut)
	}

	if code, out, errOut := cli("kick", "rw", w[7], adm); code != 0 || !strings.Contains(out, "removed waiter "+w[7]) {
		t.Fatalf("kick %s = %d %q %q", w[7], code, out, errOut)
	}
	r2.ExpectV2(protocol.TypeRevoked, 10, protocol.CodeClosedByAdmin)
	if code, out, errOut := cli("release", "rw", "--claim", h2[7], adm); code != 0 || !strings.Contains(out, "released claim "+h2[7]) {
		t.Fatalf("release --claim = %d %q %q", code, out, errOut)
	}
	r2.ExpectV2(protocol.TypeRevoked, 9, protocol.CodeClosedByAdmin)
	if code, out, errOut := cli("release", "rw", "--token", itoa(tok), adm); code != 0 || !strings.Contains(out, "lock rw is now free") {
		t.Fatalf("release --token = %d %q %q", code, out, errOut)
	}
	r1.ExpectV2(protocol.TypeRevoked, 4, protocol.CodeClosedByAdmin)
}
