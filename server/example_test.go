package server_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"net"
	"time"

	"github.com/batonlock/baton"
	"github.com/batonlock/baton/server"
)

// A server embedded in a Go program: its limits, an observer of its
// events, and what it shows of a lock while a client holds it.
func ExampleServer() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	released := make(chan server.Reason, 1)
	srv := &server.Server{
		MaxLease:   server.DefaultMaxLease,
		MaxWaiters: server.DefaultMaxWaiters,
		Logger:     slog.New(slog.DiscardHandler),
		// Observe runs under the table's lock: hand the event on, never block.
		Observer: server.ObserverFunc(func(e server.Event) {
			if e.Kind == server.EventReleased {
				select {
				case released <- e.Reason:
				default:
				}
			}
		}),
	}
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(ln) }()

	c := baton.New(baton.Config{Address: ln.Addr().String()})
	err = c.Do(context.Background(), "nightly", 2*time.Second, func(ctx context.Context, token uint64) error {
		info, ok := srv.Lock("nightly")
		var h server.HolderInfo = info.Holder
		fmt.Println("held:", ok, h.Mode, "same token:", h.Token == token)
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("released:", <-released)

	srv.Shutdown(context.Background())
	<-done
	// Output:
	// held: true exclusive same token: true
	// released: graceful
}
