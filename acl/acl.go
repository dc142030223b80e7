// Package acl is baton's access-control list: which client identities may
// take which locks ("rules"), and which may use which admin API actions
// (read, release, kick) on which locks ("admin"). The file is JSON, and
// both parts deny by default: a request is allowed when any rule whose
// identity pattern matches the caller has a lock pattern that matches the
// name (and, for "admin", lists the action). A file without "admin" rules
// grants no admin access at all, and a right in one part grants nothing
// in the other. Patterns are internal/glob's.
// The file format, with an example: docs/security.md, "Access-control
// list" and "Admin API roles".
package acl

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/batonlock/baton/internal/glob"
)

// ACL is a parsed access-control list. It is immutable and safe for
// concurrent use.
type ACL struct {
	rules []rule
	admin []adminRule
}

type rule struct {
	identity glob.Pattern
	locks    []glob.Pattern
}

type adminRule struct {
	rule
	actions map[string]bool
}

// File is the JSON shape of an ACL file.
type File struct {
	Rules []Rule      `json:"rules"`
	Admin []AdminRule `json:"admin,omitempty"`
}

// The admin actions of an AdminRule.
const (
	ActionRead    = "read"    // list and show locks, server info
	ActionRelease = "release" // force-release an owner
	ActionKick    = "kick"    // remove a waiter
)

// Actions lists every admin action.
var Actions = []string{ActionRead, ActionRelease, ActionKick}

// AdminRule grants the identities matching Identity the admin Actions on
// the locks matching any of Locks.
type AdminRule struct {
	Identity string   `json:"identity"`
	Actions  []string `json:"actions"`
	Locks    []string `json:"locks"`
}

// Rule grants the identities matching Identity the locks matching any of
// Locks.
type Rule struct {
	Identity string   `json:"identity"`
	Locks    []string `json:"locks"`
}

// Load reads and parses the ACL file at path.
func Load(path string) (*ACL, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("acl: %w", err)
	}
	a, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("acl: %s: %w", path, err)
	}
	return a, nil
}

// Parse parses an ACL from JSON. Unknown fields, a rule without an
// identity or without lock patterns, and invalid patterns are errors.
func Parse(data []byte) (*ACL, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var f File
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("invalid JSON: %w", err)
	}
	if dec.More() {
		return nil, errors.New("invalid JSON: data after the top-level object")
	}
	if f.Rules == nil && f.Admin == nil {
		return nil, errors.New(`missing "rules"`)
	}
	a, err := New(f.Rules)
	if err != nil {
		return nil, err
	}
	if err := a.addAdmin(f.Admin); err != nil {
		return nil, err
	}
	return a, nil
}

// New builds an ACL from rules; it has no admin rules.
func New(rules []Rule) (*ACL, error) {
	a := &ACL{rules: make([]rule, 0, len(rules))}
	for i, r := range rules {
		cr, err := compileRule(fmt.Sprintf("rule %d", i+1), r.Identity, r.Locks)
		if err != nil {
			return nil, err
		}
		a.rules = append(a.rules, cr)
	}
	return a, nil
}

// NewWithAdmin builds an ACL from protocol rules and admin rules.
func NewWithAdmin(rules []Rule, admin []AdminRule) (*ACL, error) {
	a, err := New(rules)
	if err != nil {
		return nil, err
	}
	if err := a.addAdmin(admin); err != nil {
		return nil, err
	}
	return a, nil
}

func (a *ACL) addAdmin(admin []AdminRule) error {
	for i, r := range admin {
		what := fmt.Sprintf("admin rule %d", i+1)
		cr, err := compileRule(what, r.Identity, r.Locks)
		if err != nil {
			return err
		}
		if len(r.Actions) == 0 {
			return fmt.Errorf("%s (%q): no actions (want some of %q)", what, r.Identity, Actions)
		}
		ar := adminRule{rule: cr, actions: map[string]bool{}}
		for _, act := range r.Actions {
			if !slices.Contains(Actions, act) {
				return fmt.Errorf("%s (%q): unknown action %q (want some of %q)", what, r.Identity, act, Actions)
			}
			ar.actions[act] = true
		}
		a.admin = append(a.admin, ar)
	}
	return nil
}

func compileRule(what, identity string, locks []string) (rule, error) {
	if identity == "" {
		return rule{}, fmt.Errorf("%s: no identity pattern", what)
	}
	if len(locks) == 0 {
		return rule{}, fmt.Errorf("%s (%q): no lock patterns", what, identity)
	}
	id, err := glob.Compile(identity)
	if err != nil {
		return rule{}, fmt.Errorf("%s: identity %q: %w", what, identity, err)
	}
	cr := rule{identity: id}
	for _, l := range locks {
		if l == "" {
			return rule{}, fmt.Errorf("%s (%q): empty lock pattern", what, identity)
		}
		p, err := glob.Compile(l)
		if err != nil {
			return rule{}, fmt.Errorf("%s (%q): lock %q: %w", what, identity, l, err)
		}
		cr.locks = append(cr.locks, p)
	}
	return cr, nil
}

// matches reports whether r covers identity and lock.
func (r rule) matches(identity, lock string) bool {
	if !r.identity.Match(identity) {
		return false
	}
	for _, p := range r.locks {
		if p.Match(lock) {
			return true
		}
	}
	return false
}

// Allow reports whether identity may take lock. An empty identity (a
// client without a certificate) matches only a pattern that matches the
// empty string, such as "*".
func (a *ACL) Allow(identity, lock string) bool {
	for _, r := range a.rules {
		if r.matches(identity, lock) {
			return true
		}
	}
	return false
}

// AllowAdmin reports whether identity may take the admin action on lock.
func (a *ACL) AllowAdmin(identity, action, lock string) bool {
	for _, r := range a.admin {
		if r.actions[action] && r.matches(identity, lock) {
			return true
		}
	}
	return false
}

// AllowAdminAny reports whether identity may take the admin action on
// some lock: whether any admin rule for identity lists it.
func (a *ACL) AllowAdminAny(identity, action string) bool {
	for _, r := range a.admin {
		if r.actions[action] && r.identity.Match(identity) {
			return true
		}
	}
	return false
}

// Len returns the number of protocol rules.
func (a *ACL) Len() int { return len(a.rules) }

// AdminLen returns the number of admin rules.
func (a *ACL) AdminLen() int { return len(a.admin) }
