package baton_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/batonlock/baton"
)

func ExampleElection() {
	addr, stop := startServer()
	defer stop()
	ctx := context.Background()
	c := baton.New(baton.Config{Address: addr})

	// An observer learns each leader and the value it published.
	obs, err := c.OpenSession(ctx, baton.SessionOptions{Lease: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer obs.Close()
	octx, cancel := context.WithCancel(ctx)
	defer cancel()
	leaders := baton.NewElection(obs, "primary").Observe(octx)

	// A candidate campaigns with its address; Campaign returns once it
	// leads.
	s, err := c.OpenSession(ctx, baton.SessionOptions{Lease: 5 * time.Second, Label: "db1"})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	e := baton.NewElection(s, "primary")
	if err := e.Campaign(ctx, "10.0.0.5:5432"); err != nil {
		log.Fatal(err)
	}
	l := <-leaders
	fmt.Println("leader:", l.Value, l.Label, "token matches:", l.Token == e.Token())

	// The leader moves: every observer learns the new value.
	if err := e.Proclaim(ctx, "10.0.0.6:5432"); err != nil {
		log.Fatal(err)
	}
	fmt.Println("leader:", (<-leaders).Value)

	if err := e.Resign(ctx); err != nil {
		log.Fatal(err)
	}
	_, err = e.Leader(ctx)
	fmt.Println("after resign:", errors.Is(err, baton.ErrNoLeader))
	// Output:
	// leader: 10.0.0.5:5432 db1 token matches: true
	// leader: 10.0.0.6:5432
	// after resign: true
}

func ExampleSession_Watch() {
	addr, stop := startServer()
	defer stop()
	ctx := context.Background()
	c := baton.New(baton.Config{Address: addr})
	s, err := c.OpenSession(ctx, baton.SessionOptions{Lease: 5 * time.Second, Label: "worker"})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()

	w, err := s.Watch(ctx, "orders")
	if err != nil {
		log.Fatal(err)
	}
	defer w.Close()
	fmt.Println("holders:", len(<-w.Changes()))

	cl, err := s.AcquireValue(ctx, "orders", baton.Exclusive, "batch 7")
	if err != nil {
		log.Fatal(err)
	}
	h := (<-w.Changes())[0]
	fmt.Println("held:", h.Value, h.Label, h.Token == cl.Token())
	cl.Release(ctx)
	fmt.Println("holders:", len(<-w.Changes()))
	// Output:
	// holders: 0
	// held: batch 7 worker true
	// holders: 0
}
