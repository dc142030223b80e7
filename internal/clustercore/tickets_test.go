package clustercore

import (
	"fmt"
	"testing"
)

func TestTicketGates(t *testing.T) {
	type op struct {
		forget  bool
		name    string
		session int
		claim   uint32
		ticket  uint64
	}
	cases := []struct {
		name string
		ops  []op
		want string
	}{
		{"recorded under their names, in arrival order",
			[]op{{name: "a", session: 1, claim: 1, ticket: 7}, {name: "b", session: 2, claim: 1}, {name: "a", session: 2, claim: 3, ticket: 5}},
			"map[a:[{1 1 7} {2 3 5}] b:[{2 1 0}]]"},
		{"once per session and claim id",
			[]op{{name: "a", session: 1, claim: 1, ticket: 7}, {name: "a", session: 1, claim: 1, ticket: 9}, {name: "a", session: 2, claim: 1}},
			"map[a:[{1 1 7} {2 1 0}]]"},
		{"forgotten; a name left with none is dropped",
			[]op{{name: "a", session: 1, claim: 1}, {name: "a", session: 2, claim: 1}, {name: "b", session: 1, claim: 2},
				{forget: true, name: "a", session: 1, claim: 1}, {forget: true, name: "b", session: 1, claim: 2}},
			"map[a:[{2 1 0}]]"},
		{"forgetting what is not recorded changes nothing",
			[]op{{name: "a", session: 1, claim: 1}, {forget: true, name: "a", session: 1, claim: 2},
				{forget: true, name: "c", session: 1, claim: 1}},
			"map[a:[{1 1 0}]]"},
	}
	for _, c := range cases {
		var g TicketGates[int]
		for _, o := range c.ops {
			if o.forget {
				g.Forget(o.name, o.session, o.claim)
			} else {
				g.Record(o.name, TicketRef[int]{Session: o.session, Claim: o.claim, Ticket: o.ticket})
			}
		}
		if got := fmt.Sprint(map[string][]TicketRef[int](g)); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
}

func TestTicketRefEnters(t *testing.T) {
	r := TicketRef[int]{Session: 1, Claim: 4, Ticket: 9}
	cases := []struct {
		name       string
		open, held bool
		heldName   string
		heldTicket uint64
		want       bool
	}{
		{"still held as recorded", true, true, "a", 9, true},
		{"its session is ending", false, true, "a", 9, false},
		{"released (name and ticket then unset, or stale)", true, false, "a", 9, false},
		{"another claim with its id, on another name", true, true, "b", 9, false},
		{"another claim with its id and name, another ticket", true, true, "a", 0, false},
	}
	for _, c := range cases {
		if got := r.Enters("a", c.open, c.held, c.heldName, c.heldTicket); got != c.want {
			t.Errorf("%s: Enters = %v, want %v", c.name, got, c.want)
		}
	}
}
