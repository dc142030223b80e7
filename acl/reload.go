package acl

import "sync/atomic"

// Reloadable is a file-backed ACL that SIGHUP can reload: a reload that fails keeps the
// rules in force, so a typo never opens or closes every lock.
type Reloadable struct {
	path string
	cur  atomic.Pointer[ACL]
}

// LoadReloadable loads the ACL at path; it fails if the file does not load.
func LoadReloadable(path string) (*Reloadable, error) {
	r := &Reloadable{path: path}
	if err := r.Reload(); err != nil {
		return nil, err
	}
	return r, nil
}

// Reload re-reads the file. On error the previous rules stay in force.
func (r *Reloadable) Reload() error {
	a, err := Load(r.path)
	if err != nil {
		return err
	}
	r.cur.Store(a)
	return nil
}

// Allow asks the rules currently in force.
func (r *Reloadable) Allow(identity, lock string) bool { return r.cur.Load().Allow(identity, lock) }

// Len returns the number of rules currently in force.
func (r *Reloadable) Len() int { return r.cur.Load().Len() }
