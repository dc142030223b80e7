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

// Len returns the number of protocol rules currently in force.
func (r *Reloadable) Len() int { return r.cur.Load().Len() }

// AllowAdmin asks the admin rules currently in force.
func (r *Reloadable) AllowAdmin(identity, action, lock string) bool {
	return r.cur.Load().AllowAdmin(identity, action, lock)
}

// AllowAdminAny asks the admin rules currently in force.
func (r *Reloadable) AllowAdminAny(identity, action string) bool {
	return r.cur.Load().AllowAdminAny(identity, action)
}

// AdminLen returns the number of admin rules currently in force.
func (r *Reloadable) AdminLen() int { return r.cur.Load().AdminLen() }
