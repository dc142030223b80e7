package baton_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/batonlock/baton"
)

// A resumable session keeps its claims through a broken connection: the
// client reconnects, to any of Addrs, and re-asserts them with their
// tokens. Turn it on for a cluster, where it keeps a holder's locks
// through the death of its node; choose a lease above about 1.8 × (T +
// 1 s), 13 s with the default timings (docs/client.md).
func ExampleSessionOptions_resumable() {
	addr, stop := startServer()
	defer stop()

	c := baton.New(baton.Config{Address: addr})
	ctx := context.Background()
	s, err := c.OpenSession(ctx, baton.SessionOptions{
		Lease:  20 * time.Second,
		Resume: baton.ResumeOn,
		Addrs:  []string{addr}, // in a cluster: every node's address
	})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close() // releases every claim first: the server would keep them

	fmt.Println("resumable:", s.Resumable())
	err = s.Do(ctx, "nightly-report", baton.Exclusive, func(ctx context.Context, token uint64) error {
		// ctx is not cancelled by a break that is resumed in time;
		// token stays the same. A claim that could not be kept ends
		// ctx with a cause such as baton.ErrReassertRefused or
		// baton.ErrNotResumed.
		return nil
	})
	fmt.Println("err:", err, errors.Is(err, baton.ErrNotResumed))
	// Output:
	// resumable: true
	// err: <nil> false
}
