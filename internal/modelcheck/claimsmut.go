package modelcheck

import (
	"time"

	"github.com/batonlock/baton/internal/locktable"
)

// Mutations of the claims model: each wraps the real table so that it
// breaks one rule the way a real bug could, and the checker must report
// that rule with a shortest counterexample (see TestClaimsMutantsAreCaught
// and modelcheck -model=claims -mutation=...).
const (
	// MutReaderOvertakes grants a shared claim beside shared holders even
	// though a writer waits: readers overtake a queued writer.
	MutReaderOvertakes = "reader-overtakes"
	// MutSemaphoreOverLimit grants a semaphore claim when the name already
	// has its limit of holders.
	MutSemaphoreOverLimit = "semaphore-over-limit"
)

// ClaimsMutations lists the mutations of the claims model.
var ClaimsMutations = []string{MutReaderOvertakes, MutSemaphoreOverLimit}

// NewClaimsMutant returns a fresh real table wrapped with mutation, or
// nil for an unknown mutation.
func NewClaimsMutant(mutation string) func() ClaimsTable {
	var wrong func(li locktable.LockInfo, req locktable.ClaimRequest) bool
	switch mutation {
	case MutReaderOvertakes:
		wrong = func(li locktable.LockInfo, req locktable.ClaimRequest) bool {
			if req.Mode != locktable.Shared || len(li.Waiters) == 0 {
				return false
			}
			for _, h := range li.Holders {
				if h.Mode != locktable.Shared {
					return false
				}
			}
			return true
		}
	case MutSemaphoreOverLimit:
		wrong = func(li locktable.LockInfo, req locktable.ClaimRequest) bool {
			return req.Mode == locktable.Semaphore && len(li.Waiters) == 0 && len(li.Holders) == int(li.Limit)
		}
	default:
		return nil
	}
	return func() ClaimsTable {
		return &shadowGrant{Table: locktable.New(&locktable.CounterTokens{}), wrong: wrong}
	}
}

// shadowGrant grants the claims for which wrong is true at once, against
// the rules: it takes them on a shadow name nobody else uses and reports
// the grant under the real name.
type shadowGrant struct {
	*locktable.Table
	wrong func(li locktable.LockInfo, req locktable.ClaimRequest) bool
}

const shadowSuffix = "~shadow"

func (m *shadowGrant) Claim(now time.Time, sid locktable.SessionID, cid locktable.ClaimID, req locktable.ClaimRequest) (locktable.Status, locktable.Result, error) {
	li, held := m.Table.Lock(req.Name)
	if !held || !m.wrong(li, req) {
		return m.Table.Claim(now, sid, cid, req)
	}
	name := req.Name
	req.Name += shadowSuffix
	st, res, err := m.Table.Claim(now, sid, cid, req)
	for i := range res.Events {
		res.Events[i].Lock = name
	}
	return st, res, err
}
