// Command goclaim measures claim + release on an open session with the Go
// client, for comparison with the other clients (bench/clients/run) against the same
// server in the same run.
//
//	go run ./bench/clients/goclaim 127.0.0.1:7070 [cycles]
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/batonlock/baton"
)

type result struct {
	P50 int64 `json:"p50_us"`
	P99 int64 `json:"p99_us"`
	Per int64 `json:"per_sec"`
}

func main() {
	addr, cycles := "127.0.0.1:7070", 2000
	if len(os.Args) > 1 {
		addr = os.Args[1]
	}
	if len(os.Args) > 2 {
		n, err := strconv.Atoi(os.Args[2])
		if err != nil || n < 1 {
			fmt.Fprintln(os.Stderr, "goclaim: cycles must be a positive number")
			os.Exit(2)
		}
		cycles = n
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := baton.New(baton.Config{Address: addr}).OpenSession(ctx, baton.SessionOptions{Lease: 10 * time.Second, Label: "bench-go"})
	if err != nil {
		fmt.Fprintln(os.Stderr, "goclaim:", err)
		os.Exit(1)
	}
	defer s.Close()
	name := fmt.Sprintf("bench-go-%d", os.Getpid())
	run := func(awaitReleased bool) result {
		d := make([]time.Duration, cycles)
		cycle := func() time.Duration {
			a := time.Now()
			cl, err := s.Acquire(ctx, name, baton.Exclusive)
			if err != nil {
				fmt.Fprintln(os.Stderr, "goclaim:", err)
				os.Exit(1)
			}
			cl.Release(ctx)
			if awaitReleased {
				<-cl.Released()
			}
			return time.Since(a)
		}
		for range 200 {
			cycle()
		}
		t0 := time.Now()
		for i := range d {
			d[i] = cycle()
		}
		total := time.Since(t0)
		slices.Sort(d)
		q := func(p float64) int64 { return d[min(cycles-1, int(p*float64(cycles)))].Microseconds() }
		return result{q(0.5), q(0.99), int64(float64(cycles) / total.Seconds())}
	}
	out := map[string]any{"client": "go", "cycles": cycles, "release_written": run(false), "release_answered": run(true)}
	b, _ := json.Marshal(out)
	fmt.Println(string(b))
}
