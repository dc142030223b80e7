package clustercore

import (
	"fmt"
	"testing"

	"github.com/batonlock/baton/internal/locktable"
)

func TestTicketEntryFor(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want TicketEntry
	}{
		{nil, TicketEntered},
		{locktable.ErrShutdown, TicketEnding},
		{fmt.Errorf("entering: %w", locktable.ErrNoSession), TicketEnding},
		{locktable.ErrModeConflict, TicketRevoked},
		{locktable.ErrLimitMismatch, TicketRevoked},
	} {
		if got := TicketEntryFor(tc.err); got != tc.want {
			t.Errorf("TicketEntryFor(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
