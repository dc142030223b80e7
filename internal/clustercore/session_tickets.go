package clustercore

import (
	"errors"

	"github.com/batonlock/baton/internal/locktable"
)

// TicketEntry is what entering a claim held during its name's warm-up
// did (tickets.go, TicketGates): the table's error for it decides.
type TicketEntry uint8

const (
	// TicketEntered: the claim is in the table, queued (a grant in the
	// same step is pushed as PROMOTED).
	TicketEntered TicketEntry = iota
	// TicketEnding: its session is ending (shutdown, or the table no
	// longer has it): nothing is sent.
	TicketEnding
	// TicketPresent: the table has the claim already (a second copy of a
	// held claim): its answers stand, and nothing is sent.
	TicketPresent
	// TicketRevoked: the table refused the claim (its mode or limit
	// against the lock's, a limit): REVOKED with the code a new claim
	// would be refused with.
	TicketRevoked
)

// TicketEntryFor classifies the table's error err for one entered claim.
func TicketEntryFor(err error) TicketEntry {
	switch {
	case err == nil:
		return TicketEntered
	case errors.Is(err, locktable.ErrShutdown), errors.Is(err, locktable.ErrNoSession):
		return TicketEnding
	case errors.Is(err, locktable.ErrClaimExists):
		return TicketPresent
	}
	return TicketRevoked
}
