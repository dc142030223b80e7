package baton_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"time"

	"github.com/batonlock/baton"
	"github.com/batonlock/baton/protocol"
	"github.com/batonlock/baton/server"
)

// startServer runs an in-process server for the examples. Real programs
// connect to a 'baton serve' somewhere on the network.
func startServer() (addr string, stop func()) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	srv := &server.Server{Logger: slog.New(slog.DiscardHandler)}
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(ln) }()
	return ln.Addr().String(), func() {
		srv.Shutdown(context.Background())
		<-done
	}
}

func ExampleClient_Do() {
	addr, stop := startServer()
	defer stop()

	c := baton.New(baton.Config{Address: addr})
	err := c.Do(context.Background(), "nightly-report", 2*time.Second, func(ctx context.Context, token uint64) error {
		// The lock is held here. Stop when ctx is done; hand token to
		// storage that rejects writes from older holders.
		fmt.Println("building the report, token > 0:", token > 0)
		return nil
	})
	fmt.Println("err:", err)
	// Output:
	// building the report, token > 0: true
	// err: <nil>
}

func ExampleClient_Acquire() {
	addr, stop := startServer()
	defer stop()

	c := baton.New(baton.Config{Address: addr})
	lock, err := c.Acquire(context.Background(), "migrations", 2*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer lock.Release(context.Background())

	select {
	case <-lock.Lost():
		fmt.Println("lost:", lock.Err())
	default:
		fmt.Println("holding", lock.Name())
	}
	// Output: holding migrations
}

func ExampleClient_TryAcquire() {
	addr, stop := startServer()
	defer stop()

	c := baton.New(baton.Config{Address: addr})
	held, err := c.Acquire(context.Background(), "deploy", 2*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer held.Release(context.Background())

	_, err = c.TryAcquire(context.Background(), "deploy", 2*time.Second)
	fmt.Println(errors.Is(err, baton.ErrBusy))
	// Output: true
}

func ExampleServerError() {
	// What a client sees when the server shuts down gracefully.
	var err error = &baton.ServerError{Code: protocol.CodeShuttingDown, Reason: "server shutting down"}

	var se *baton.ServerError
	if errors.As(err, &se) {
		fmt.Printf("code 0x%02x, temporary: %v\n", uint8(se.Code), se.Temporary())
	}
	fmt.Println(errors.Is(err, protocol.ErrShuttingDown))
	fmt.Println(err)
	// Output:
	// code 0x01, temporary: true
	// true
	// baton: server error 0x01 (server shutting down)
}
