// Command leader-election keeps exactly one leader among any number of
// copies of itself. Each copy campaigns for a baton lock; the holder leads
// until it loses the lock or is stopped, and a copy that lost the lock
// campaigns again. Every term of leadership prints a line
//
//	leader token=N
//
// where N is the fencing token of the term: larger than every earlier
// term's, so the resources the leader writes to can refuse a deposed one.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/batonlock/baton"
)

func main() {
	server := flag.String("server", "127.0.0.1:7070", "baton server address (host:port)")
	name := flag.String("lock", "leader-election-example", "the lock whose holder is the leader")
	lease := flag.Duration("lease", 2*time.Second, "lease: how long a hung leader can keep the others waiting")
	flag.Parse()
	log.SetPrefix(fmt.Sprintf("leader-election[%d]: ", os.Getpid()))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	c := baton.New(baton.Config{Address: *server})
	for {
		// Campaign: wait in the lock's queue (reconnecting with backoff
		// while the server is unreachable), then lead while the lock is
		// held.
		err := c.DoRetry(ctx, *name, *lease, lead)
		if ctx.Err() != nil {
			log.Print("stopped") // the lock, if held, is released
			return
		}
		if !baton.Temporary(err) {
			log.Fatalf("cannot campaign: %v", err) // for example not authorized
		}
		// The term ended: the lock was lost (server unreachable, shut
		// down, or an administrator force-released it). Another copy may
		// already lead. Campaign again, at the back of the queue.
		log.Printf("no longer leader: %v", err)
	}
}

// lead is the leader's work. It runs only while this process holds the
// lock, and returns as soon as ctx is done: the lock was lost, or the
// program is stopping.
func lead(ctx context.Context, token uint64) error {
	fmt.Printf("leader token=%d\n", token)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			// The leader's periodic duty goes here. Pass token along to
			// anything that can fence (see ../fenced-postgres).
			log.Printf("leading with token %d", token)
		}
	}
}
