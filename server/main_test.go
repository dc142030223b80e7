package server_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when any test leaves a goroutine behind: a
// session, a Serve loop or a delivery worker that outlives its server is a
// leak in production too.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
