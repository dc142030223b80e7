package clustercore

import (
	"fmt"
	"testing"

	"github.com/batonlock/baton/internal/locktable"
)

func TestTicketEntryFor(t *testing.T) {
	want := map[error]TicketEntry{
		nil:                   TicketEntered,
		locktable.ErrShutdown: TicketEnding,
		fmt.Errorf("entering: %w", locktable.ErrNoSession): TicketEnding, // wrapped
		locktable.ErrModeConflict:                          TicketRevoked,
		locktable.ErrLimitMismatch:                         TicketRevoked,
		locktable.ErrClaimExists:                           TicketPresent, // never revoked: the table holds it
	}
	for err, w := range want {
		if got := TicketEntryFor(err); got != w {
			t.Errorf("TicketEntryFor(%v) = %v, want %v", err, got, w)
		}
	}
}
