package rangelock

import (
	"errors"
	"fmt"
	"testing"

	"github.com/batonlock/baton/protocol"
)

func TestErrStatusAndRefusal(t *testing.T) {
	cases := []struct {
		err     error
		st      protocol.RangeStatus
		refusal string
	}{
		{ErrDeadlock, protocol.RangeDeadlock, ""},
		{ErrSearchBound, protocol.RangeDeadlock, "search_bound"},
		{fmt.Errorf("wrapped: %w", ErrSearchBound), protocol.RangeDeadlock, "search_bound"},
		{ErrTagExists, protocol.RangeReqInUse, ""},
		{ErrSessionWaiting, protocol.RangeLimit, "waiting_per_session"},
		{ErrOwnerWaiting, protocol.RangeLimit, "waiting_per_owner"},
		{ErrOwners, protocol.RangeLimit, "owners_per_session"},
		{ErrInvalidType, protocol.RangeInvalid, ""},
		{errors.New("other"), protocol.RangeInvalid, ""},
	}
	for _, c := range cases {
		if got := ErrStatus(c.err); got != c.st {
			t.Errorf("ErrStatus(%v) = %v, want %v", c.err, got, c.st)
		}
		if got := Refusal(c.err); got != c.refusal {
			t.Errorf("Refusal(%v) = %q, want %q", c.err, got, c.refusal)
		}
	}
	if got := Refusal(nil); got != "" {
		t.Errorf("Refusal(nil) = %q", got)
	}
}

func TestAnswerStatus(t *testing.T) {
	cases := []struct {
		a    Answer
		wait bool
		st   protocol.RangeStatus
		now  bool
	}{
		{Answer{State: Granted, Token: 3}, false, protocol.RangeGranted, true},
		{Answer{State: Granted, Token: 3}, true, protocol.RangeGranted, true},
		{Answer{State: Conflict}, false, protocol.RangeConflict, true},
		{Answer{State: Waiting}, true, protocol.RangeQueued, true},
		// Queued before the token gate without wait: answered at the grant.
		{Answer{State: Waiting}, false, protocol.RangeQueued, false},
	}
	for _, c := range cases {
		st, now := c.a.Status(c.wait)
		if st != c.st || now != c.now {
			t.Errorf("%v wait %v: %v %v, want %v %v", c.a.State, c.wait, st, now, c.st, c.now)
		}
	}
	if st := (Grant{}).Status(); st != protocol.RangePromoted {
		t.Errorf("a waiter's grant: %v, want PROMOTED", st)
	}
	if st := (Grant{NoWait: true}).Status(); st != protocol.RangeGranted {
		t.Errorf("a gated set without wait: %v, want GRANTED", st)
	}
}
