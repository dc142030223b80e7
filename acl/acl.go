// Package acl is baton's access-control list: which client identities may
// take which locks.
//
// The file is JSON:
//
//	{"rules": [
//	  {"identity": "spiffe://prod/ns/batch/*", "locks": ["batch/*", "nightly-import"]},
//	  {"identity": "deployer.example.com",     "locks": ["deploy/*"]}
//	]}
//
// Deny by default: a lock is allowed when any rule whose identity pattern
// matches the client has a lock pattern that matches the name. Rule order
// does not matter. Patterns use the glob language of the admin API
// ('*' any run of characters including '/', '?' one character, whole
// string, case sensitive).
package acl

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/batonlock/baton/internal/glob"
)

// ACL is a parsed access-control list. It is immutable and safe for
// concurrent use.
type ACL struct {
	rules []rule
}

type rule struct {
	identity glob.Pattern
	locks    []glob.Pattern
}

// File is the JSON shape of an ACL file.
type File struct {
	Rules []Rule `json:"rules"`
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
	if f.Rules == nil {
		return nil, errors.New(`missing "rules"`)
	}
	return New(f.Rules)
}

// New builds an ACL from rules.
func New(rules []Rule) (*ACL, error) {
	a := &ACL{rules: make([]rule, 0, len(rules))}
	for i, r := range rules {
		if r.Identity == "" {
			return nil, fmt.Errorf("rule %d: no identity pattern", i+1)
		}
		if len(r.Locks) == 0 {
			return nil, fmt.Errorf("rule %d (%q): no lock patterns", i+1, r.Identity)
		}
		id, err := glob.Compile(r.Identity)
		if err != nil {
			return nil, fmt.Errorf("rule %d: identity %q: %w", i+1, r.Identity, err)
		}
		cr := rule{identity: id}
		for _, l := range r.Locks {
			if l == "" {
				return nil, fmt.Errorf("rule %d (%q): empty lock pattern", i+1, r.Identity)
			}
			p, err := glob.Compile(l)
			if err != nil {
				return nil, fmt.Errorf("rule %d (%q): lock %q: %w", i+1, r.Identity, l, err)
			}
			cr.locks = append(cr.locks, p)
		}
		a.rules = append(a.rules, cr)
	}
	return a, nil
}

// Allow reports whether identity may take lock. An empty identity (a
// client without a certificate) matches only a pattern that matches the
// empty string, such as "*".
func (a *ACL) Allow(identity, lock string) bool {
	for _, r := range a.rules {
		if !r.identity.Match(identity) {
			continue
		}
		for _, p := range r.locks {
			if p.Match(lock) {
				return true
			}
		}
	}
	return false
}

// Len returns the number of rules.
func (a *ACL) Len() int { return len(a.rules) }
