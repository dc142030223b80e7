package baton_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/batonlock/baton"
)

func ExampleSession_Do() {
	addr, stop := startServer()
	defer stop()

	c := baton.New(baton.Config{Address: addr})
	ctx := context.Background()
	s, err := c.OpenSession(ctx, baton.SessionOptions{Lease: 5 * time.Second, Label: "exporter"})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()

	// Two readers hold "orders" at once, each with its own token.
	err = s.Do(ctx, "orders", baton.Shared, func(ctx context.Context, t1 uint64) error {
		return s.Do(ctx, "orders", baton.Shared, func(ctx context.Context, t2 uint64) error {
			fmt.Println("two readers, tokens increase:", t2 > t1)
			return nil
		})
	})
	fmt.Println("err:", err)
	// Output:
	// two readers, tokens increase: true
	// err: <nil>
}

func ExampleSession_TryAcquire() {
	addr, stop := startServer()
	defer stop()

	c := baton.New(baton.Config{Address: addr})
	ctx := context.Background()
	s, err := c.OpenSession(ctx, baton.SessionOptions{Lease: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()

	// A semaphore of two places: the third no-wait claim is busy.
	var held []*baton.Claim
	for i := range 3 {
		cl, err := s.TryAcquire(ctx, "gpu", baton.Semaphore(2))
		switch {
		case errors.Is(err, baton.ErrBusy):
			fmt.Println("claim", i+1, "busy")
		case err != nil:
			log.Fatal(err)
		default:
			fmt.Println("claim", i+1, "held")
			held = append(held, cl)
		}
	}
	for _, cl := range held {
		cl.Release(ctx)
	}
	// Output:
	// claim 1 held
	// claim 2 held
	// claim 3 busy
}
