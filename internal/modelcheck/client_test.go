package modelcheck

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/clientrule"
)

func TestClientModel(t *testing.T) {
	t.Parallel()
	for _, cfg := range []ClientConfig{
		DefaultClientConfig(),
		{Lease: 20, MaxDelay: 6, GiveUp: 0.8, TimerLag: 3, WorkStop: 8},
		{Lease: 10, MaxDelay: 0, GiveUp: 0.8, TimerLag: 1, WorkStop: 4},
		// Work that ignores its cancellation past anchor + lease: the
		// close-by timer ends the claim under it, and the property
		// exempts that by design.
		{Lease: 10, MaxDelay: 3, GiveUp: 0.8, TimerLag: 1, WorkStop: 15},
		{Lease: 10, MaxDelay: 3, GiveUp: 0.8, TimerLag: 1, WorkStop: 0},
	} {
		rep := CheckClient(cfg)
		t.Log(rep)
		if rep.Violation != nil {
			t.Error(rep.Violation)
		}
	}
}

// The checker must be able to fail: the margin between the client's
// give-up (0.8·lease) and the server's expiry (after 1.0·lease) is what
// keeps the property true.
func TestClientModelCatchesTooLateGiveUp(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		cfg   ClientConfig
		steps int
	}{
		{"give-up factor 1.0", ClientConfig{Lease: 10, MaxDelay: 3, GiveUp: 1.0, TimerLag: 1}, 15},
		{"give-up factor 1.0, punctual timer", ClientConfig{Lease: 10, MaxDelay: 3, GiveUp: 1.0, TimerLag: 0}, 15},
		{"give-up factor 0.8, timer lag eats the margin", ClientConfig{Lease: 10, MaxDelay: 3, GiveUp: 0.8, TimerLag: 2}, 15},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := CheckClient(tc.cfg)
			t.Log(rep)
			v := rep.Violation
			if v == nil {
				t.Fatalf("no violation in %d states", rep.States)
			}
			if v.Property != PropClientOwner {
				t.Fatalf("violated %q, want %q", v.Property, PropClientOwner)
			}
			if v.Steps() != tc.steps {
				t.Errorf("counterexample has %d steps, want the shortest, %d", v.Steps(), tc.steps)
			}
			if !strings.Contains(v.Error(), "server expires the session") {
				t.Error("counterexample does not end with the server's expiry")
			}
		})
	}
}

// The checker must catch a client that closes its connection at the
// give-up, before its work has stopped: the server promotes the next
// holder while the work still runs. Lock.finish once closed even before
// cancelling fn.
func TestClientModelCatchesEarlyClose(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		close   closeRule
		steps   int
		mention string
	}{
		{"close at give-up", closeAtGiveUp, 14, "told to stop but still running"},
		{"close before cancel", closeBeforeCancel, 14, "work is running"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultClientConfig()
			cfg.close = tc.close
			rep := CheckClient(cfg)
			t.Log(rep)
			v := rep.Violation
			if v == nil {
				t.Fatalf("no violation in %d states", rep.States)
			}
			if v.Property != PropClientWork {
				t.Fatalf("violated %q, want %q", v.Property, PropClientWork)
			}
			if v.Steps() != tc.steps {
				t.Errorf("counterexample has %d steps, want the shortest, %d", v.Steps(), tc.steps)
			}
			if !strings.Contains(v.Error(), "server reads the client's close") || !strings.Contains(v.Error(), tc.mention) {
				t.Errorf("counterexample does not end with the server reading the close under work that %s", tc.mention)
			}
		})
	}
}

// The client model copies states by value, clientrule.Rule included; a
// pointer, slice or map inside Rule would make copies share state.
func TestRuleIsAPlainValue(t *testing.T) {
	t.Parallel()
	var walk func(reflect.Type, string)
	walk = func(typ reflect.Type, path string) {
		switch typ.Kind() {
		case reflect.Pointer, reflect.Slice, reflect.Map, reflect.Chan, reflect.Func, reflect.Interface, reflect.UnsafePointer:
			if typ != reflect.TypeFor[*time.Location]() { // time.Time's location is shared read-only
				t.Errorf("%s is a %v: the model cannot copy clientrule.Rule by value", path, typ.Kind())
			}
		case reflect.Struct:
			for i := range typ.NumField() {
				walk(typ.Field(i).Type, path+"."+typ.Field(i).Name)
			}
		case reflect.Array:
			walk(typ.Elem(), path+"[]")
		}
	}
	walk(reflect.TypeFor[clientrule.Rule](), "Rule")
}
