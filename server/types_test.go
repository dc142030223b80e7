package server

import (
	"reflect"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/locktable"
	"github.com/batonlock/baton/internal/rangelock"
)

// TestViewsCopyEveryField: the views' types are copied from the lock
// table's field by field (types.go), so a field the table adds and the
// copy forgets would read as zero. Every field of a table value set to
// non-zero must come out non-zero.
func TestViewsCopyEveryField(t *testing.T) {
	var l locktable.LockInfo
	fill(reflect.ValueOf(&l).Elem())
	nonZero(t, "LockInfo", reflect.ValueOf(lockInfoOf(l)))
	var s locktable.SessionInfo
	fill(reflect.ValueOf(&s).Elem())
	nonZero(t, "SessionInfo", reflect.ValueOf(sessionInfoOf(s)))
	// The server's types name every field the table's have (Detached:
	// a flag in place of the table's origin).
	for _, p := range [][2]any{{l, LockInfo{}}, {l.Holder, HolderInfo{}}, {l.Waiters[0], WaiterInfo{}}, {s, SessionInfo{}},
		{locktable.Counts{}, Counts{}}, {locktable.Peer{}, Peer{}}, {rangelock.SessionCount{}, RangeSessionCount{}}} {
		from, to := reflect.TypeOf(p[0]), reflect.TypeOf(p[1])
		for i := range from.NumField() {
			if _, ok := to.FieldByName(from.Field(i).Name); !ok {
				t.Errorf("%v has no field %s of %v", to, from.Field(i).Name, from)
			}
		}
	}

	k := rangelock.Key{Key: "f", NS: rangelock.Flock}
	if rk := rangeKeyOf(k); rk != (RangeKey{Key: "f", Flock: true}) || rk.ns() != k.NS || rk.Namespace() != k.NS.String() {
		t.Errorf("rangeKeyOf(%v) = %v", k, rk)
	}
	if rk := (RangeKey{Key: "f"}); rk.ns() != rangelock.POSIX || rk.Namespace() != rangelock.POSIX.String() {
		t.Errorf("%v: namespace %v, %s", rk, rk.ns(), rk.Namespace())
	}
	o := rangelock.Owner{Session: 3, ID: 4}
	if h := rangeHolderOf(o, rangelock.Write, rangelock.Range{Start: 5, End: 6}); h != (RangeHolder{Session: 3, Owner: 4, Type: "write", Start: 5, End: 6}) {
		t.Errorf("rangeHolderOf = %+v", h)
	}
}

// TestReasonsAndModesAreTheTables: Reason and Mode convert from the
// table's by value, so each constant must have the table's value.
func TestReasonsAndModesAreTheTables(t *testing.T) {
	if len(Reasons) != len(locktable.Reasons) {
		t.Fatalf("%d reasons, the table has %d", len(Reasons), len(locktable.Reasons))
	}
	for i, r := range locktable.Reasons {
		if Reasons[i] != Reason(r) || Reasons[i].String() != r.String() {
			t.Errorf("Reasons[%d] = %d %s, the table's %d %s", i, Reasons[i], Reasons[i], r, r)
		}
	}
	named := map[Reason]locktable.Reason{ReasonGraceful: locktable.ReasonGraceful, ReasonExpired: locktable.ReasonExpired,
		ReasonIOTimeout: locktable.ReasonIOTimeout, ReasonForce: locktable.ReasonForce, ReasonShutdown: locktable.ReasonShutdown,
		ReasonKick: locktable.ReasonKick, ReasonProtocolError: locktable.ReasonProtocolError, ReasonRevoked: locktable.ReasonRevoked,
		ReasonMoved: locktable.ReasonMoved}
	for r, want := range named {
		if Reason(want) != r {
			t.Errorf("%s = %d, the table's %d", r, r, want)
		}
	}
	for m, want := range map[Mode]locktable.Mode{Exclusive: locktable.Exclusive, Shared: locktable.Shared, Semaphore: locktable.Semaphore} {
		if Mode(want) != m || m.String() != want.String() {
			t.Errorf("%s = %d, the table's %s = %d", m, m, want, want)
		}
	}
}

// TestAdminErrIsTheServers: an administrator action's error is the
// server's sentinel, not the table's, so that an embedder can test it.
func TestAdminErrIsTheServers(t *testing.T) {
	for table, want := range map[error]error{locktable.ErrNoLock: ErrNoLock, locktable.ErrNoHolder: ErrNoHolder,
		locktable.ErrNoWaiter: ErrNoWaiter, locktable.ErrManyHolders: ErrManyHolders, nil: nil,
		locktable.ErrShutdown: locktable.ErrShutdown} {
		if got := adminErr(table); got != want {
			t.Errorf("adminErr(%v) = %v, want %v", table, got, want)
		}
	}
}

// fill sets every field of v, recursively, to a non-zero value; a slice
// gets one element.
func fill(v reflect.Value) {
	switch v.Kind() {
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[time.Time]() {
			v.Set(reflect.ValueOf(time.Unix(1, 0)))
			return
		}
		for i := range v.NumField() {
			fill(v.Field(i))
		}
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fill(v.Index(0))
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem())
	case reflect.String:
		v.SetString("x")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int64:
		v.SetInt(1)
	case reflect.Uint8, reflect.Uint32, reflect.Uint64:
		v.SetUint(1)
	default:
		panic("fill: " + v.Type().String())
	}
}

// nonZero reports every zero field of v, recursively.
func nonZero(t *testing.T, path string, v reflect.Value) {
	t.Helper()
	if v.IsZero() {
		t.Errorf("%s is zero", path)
		return
	}
	switch v.Kind() {
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[time.Time]() {
			return
		}
		for i := range v.NumField() {
			nonZero(t, path+"."+v.Type().Field(i).Name, v.Field(i))
		}
	case reflect.Slice:
		for i := range v.Len() {
			nonZero(t, path+"[]", v.Index(i))
		}
	}
}
