package acl

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestAllowTable(t *testing.T) {
	a, err := Parse([]byte(`{"rules": [
		{"identity": "spiffe://prod/batch/*", "locks": ["batch/*", "nightly-import"]},
		{"identity": "deployer-?", "locks": ["deploy/??"]},
		{"identity": "ops.example.com", "locks": ["*"]},
		{"identity": "spiffe://prod/batch/reporter", "locks": ["reports/*"]}
	]}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		identity, lock string
		want           bool
	}{
		{"spiffe://prod/batch/importer", "batch/daily", true},
		{"spiffe://prod/batch/importer", "batch/a/b/c", true}, // '*' crosses '/'
		{"spiffe://prod/batch/importer", "nightly-import", true},
		{"spiffe://prod/batch/importer", "nightly-import2", false}, // whole-string match
		{"spiffe://prod/batch/importer", "Batch/daily", false},     // case sensitive
		{"spiffe://prod/batch/a/b", "batch/x", true},               // identity '*' crosses '/'
		{"spiffe://prod/batch/reporter", "reports/q3", true},       // second rule for the same identity
		{"spiffe://prod/batch/reporter", "batch/x", true},          // order does not matter
		{"deployer-1", "deploy/eu", true},
		{"deployer-1", "deploy/e", false},   // '?' is exactly one character
		{"deployer-12", "deploy/eu", false}, // '?' is exactly one character
		{"deployer-é", "deploy/éu", true},   // '?' is one rune, not one byte
		{"ops.example.com", "anything/at/all", true},
		{"stranger", "batch/daily", false}, // no matching rule: deny
		{"", "batch/daily", false},         // no identity
	} {
		if got := a.Allow(c.identity, c.lock); got != c.want {
			t.Errorf("Allow(%q, %q) = %v, want %v", c.identity, c.lock, got, c.want)
		}
	}
}

func TestEmptyACLDeniesAll(t *testing.T) {
	a, err := Parse([]byte(`{"rules": []}`))
	if err != nil {
		t.Fatal(err)
	}
	if a.Allow("anyone", "anything") {
		t.Error("an empty rule list allowed a lock")
	}
}

func TestLoadErrors(t *testing.T) {
	for _, c := range []struct{ name, json, want string }{
		{"no identity", `{"rules": [{"locks": ["a"]}]}`, "no identity"},
		{"no locks", `{"rules": [{"identity": "a"}]}`, "no lock patterns"},
		{"empty locks", `{"rules": [{"identity": "a", "locks": []}]}`, "no lock patterns"},
		{"empty lock pattern", `{"rules": [{"identity": "a", "locks": [""]}]}`, "empty lock pattern"},
		{"unknown field", `{"rules": [{"identity": "a", "locks": ["b"], "lock": "c"}]}`, "unknown field"},
		{"missing rules", `{}`, `missing "rules"`},
		{"not json", `rules: []`, "invalid JSON"},
		{"trailing data", `{"rules": []} {}`, "data after"},
	} {
		_, err := Parse([]byte(c.json))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want it to mention %q", c.name, err, c.want)
		}
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing.json")); err == nil {
		t.Error("Load of a missing file succeeded")
	}
	dir := t.TempDir()
	p := filepath.Join(dir, "acl.json")
	os.WriteFile(p, []byte(`{"rules": [{"identity": "*", "locks": ["x"]}]}`), 0o600)
	a, err := Load(p)
	if err != nil || !a.Allow("", "x") || a.Len() != 1 {
		t.Errorf("Load: %v, Allow=%v", err, a != nil && a.Allow("", "x"))
	}
}

func TestReloadKeepsRulesOnError(t *testing.T) {
	p := filepath.Join(t.TempDir(), "acl.json")
	write := func(s string) {
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(`{"rules": [{"identity": "a", "locks": ["x"]}]}`)
	r, err := LoadReloadable(p)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Allow("a", "x") || r.Allow("b", "x") {
		t.Fatal("initial rules not in force")
	}
	write(`{"rules": [{"identity": "b", "locks": ["x"]}]}`)
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	if r.Allow("a", "x") || !r.Allow("b", "x") {
		t.Fatal("reloaded rules not in force")
	}
	write(`{"rules": [{"identity": "c"}]}`) // broken: no locks
	if err := r.Reload(); err == nil {
		t.Fatal("broken file reloaded without error")
	}
	if !r.Allow("b", "x") || r.Allow("c", "x") {
		t.Fatal("a failed reload changed the rules in force")
	}
	os.Remove(p)
	if err := r.Reload(); err == nil || !r.Allow("b", "x") {
		t.Fatalf("reload of a missing file: err=%v, old rules kept=%v", err, r.Allow("b", "x"))
	}
}

func TestAdminRules(t *testing.T) {
	a, err := Parse([]byte(`{"rules": [{"identity": "sre-1", "locks": ["*"]}],
		"admin": [
			{"identity": "sre-*", "actions": ["read", "release", "kick"], "locks": ["*"]},
			{"identity": "dash", "actions": ["read"], "locks": ["*"]},
			{"identity": "batch-ops", "actions": ["release"], "locks": ["batch/*"]}
		]}`))
	if err != nil {
		t.Fatal(err)
	}
	if a.AdminLen() != 3 || a.Len() != 1 {
		t.Errorf("AdminLen, Len = %d, %d", a.AdminLen(), a.Len())
	}
	for _, c := range []struct {
		identity, action, lock string
		want                   bool
	}{
		{"sre-1", ActionRelease, "deploy/prod", true},
		{"sre-1", ActionKick, "x", true},
		{"dash", ActionRead, "deploy/prod", true},
		{"dash", ActionRelease, "deploy/prod", false},
		{"dash", ActionKick, "deploy/prod", false},
		{"batch-ops", ActionRelease, "batch/nightly", true},
		{"batch-ops", ActionRelease, "deploy/prod", false},
		{"batch-ops", ActionRead, "batch/nightly", false},
		{"stranger", ActionRead, "x", false},
		{"", ActionRead, "x", false},
	} {
		if got := a.AllowAdmin(c.identity, c.action, c.lock); got != c.want {
			t.Errorf("AllowAdmin(%q, %q, %q) = %v, want %v", c.identity, c.action, c.lock, got, c.want)
		}
	}
	if !a.AllowAdminAny("batch-ops", ActionRelease) || a.AllowAdminAny("batch-ops", ActionRead) || a.AllowAdminAny("nobody", ActionRead) {
		t.Error("AllowAdminAny")
	}
	// The protocol rules and the admin rules are separate.
	if a.Allow("dash", "x") {
		t.Error("an admin rule granted a lock")
	}
}

// TestOldFileHasNoAdmin: a file without "admin" loads as before and
// grants no admin action to anyone.
func TestOldFileHasNoAdmin(t *testing.T) {
	a, err := Parse([]byte(`{"rules": [{"identity": "*", "locks": ["*"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if !a.Allow("x", "y") || a.AdminLen() != 0 {
		t.Fatal("old file changed meaning")
	}
	for _, act := range Actions {
		if a.AllowAdmin("x", act, "y") || a.AllowAdminAny("x", act) {
			t.Errorf("a file without admin rules allows %s", act)
		}
	}
	if b, err := Parse([]byte(`{"admin": [{"identity": "*", "actions": ["read"], "locks": ["*"]}]}`)); err != nil || b.Len() != 0 || b.AdminLen() != 1 {
		t.Errorf("admin-only file: %v", err)
	}
}

func TestAdminRuleErrors(t *testing.T) {
	for _, c := range []struct{ json, want string }{
		{`{"rules": [], "admin": [{"identity": "a", "actions": ["read"]}]}`, "admin rule 1 (\"a\"): no lock patterns"},
		{`{"rules": [], "admin": [{"identity": "a", "locks": ["*"]}]}`, "no actions"},
		{`{"rules": [], "admin": [{"identity": "a", "actions": ["delete"], "locks": ["*"]}]}`, `unknown action "delete"`},
		{`{"rules": [], "admin": [{"actions": ["read"], "locks": ["*"]}]}`, "admin rule 1: no identity"},
		{`{"rules": [], "admin": [{"identity": "a", "actions": ["read"], "locks": ["*"], "extra": 1}]}`, "unknown field"},
	} {
		if _, err := Parse([]byte(c.json)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%s) = %v, want %q", c.json, err, c.want)
		}
	}
}
