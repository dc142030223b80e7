// Command goclient is the Go side of the Python client's benchmark
// (clients/python/bench/bench.py): claim + release on an open session
// with the Go client, against the server at -addr.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/batonlock/baton"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:7070", "server address")
	n := flag.Int("n", 2000, "claim + release pairs to time")
	name := flag.String("name", "bench-go", "lock name")
	flag.Parse()
	ctx := context.Background()
	s, err := baton.New(baton.Config{Address: *addr}).OpenSession(ctx, baton.SessionOptions{Lease: time.Minute, Label: "bench-go"})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer s.Close()
	op := func() {
		cl, err := s.Acquire(ctx, *name, baton.Exclusive)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if err := cl.Release(ctx); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	for range 200 { // warm-up
		op()
	}
	start := time.Now()
	for range *n {
		op()
	}
	us := float64(time.Since(start).Microseconds()) / float64(*n)
	json.NewEncoder(os.Stdout).Encode(map[string]float64{"us_per_op": us})
}
