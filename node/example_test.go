package node_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/batonlock/baton"
	"github.com/batonlock/baton/node"
)

// A cluster of one node, formed on a new data directory, in this
// process. The other members of a larger cluster get Join set to this
// node's admin address instead of Bootstrap.
func ExampleStart() {
	dir, err := os.MkdirTemp("", "baton-node")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	n, err := node.Start(context.Background(), node.Config{
		Listen:      "127.0.0.1:0",
		AdminListen: "127.0.0.1:0", // the member API shares it
		NodeID:      "n1",
		RaftListen:  "127.0.0.1:0",
		DataDir:     filepath.Join(dir, "n1"),
		Bootstrap:   true,
		Logger:      slog.New(slog.DiscardHandler),
	})
	if err != nil {
		log.Fatal(err)
	}
	defer n.Shutdown(context.Background()) // SIGTERM's planned stop
	select {
	case <-n.Ready():
	case <-n.Done():
		log.Fatal(n.Err())
	}

	c := baton.New(baton.Config{Address: n.Addrs().Protocol})
	// A new cluster grants a name after its warm-up (docs/cluster.md).
	err = c.Do(context.Background(), "nightly-report", 2*time.Second, func(ctx context.Context, token uint64) error {
		fmt.Println("held, token > 0:", token > 0)
		return nil
	})
	fmt.Println("err:", err)
	// Output:
	// held, token > 0: true
	// err: <nil>
}
