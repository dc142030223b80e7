package baton

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"time"
)

// The helper process pattern: a test re-executes its own binary with
// BATON_TEST_HELPER set, and TestMain runs the helper instead of the
// tests. The holder helper takes a lock and holds it until killed.
const (
	helperEnv     = "BATON_TEST_HELPER"
	helperAddrEnv = "BATON_TEST_HELPER_ADDR"
)

// runHelper runs the helper named by BATON_TEST_HELPER, if any, and
// reports whether it did.
func runHelper() bool {
	switch os.Getenv(helperEnv) {
	case "":
		return false
	case "holder":
		c := New(Config{Address: os.Getenv(helperAddrEnv)})
		err := c.Do(context.Background(), "killed-holder", 10*time.Second, func(ctx context.Context, token uint64) error {
			fmt.Printf("held %d\n", token)
			<-ctx.Done()
			return nil
		})
		fmt.Fprintln(os.Stderr, "holder:", err)
		os.Exit(1)
	case "session-holder":
		n, _ := strconv.Atoi(os.Getenv("BATON_TEST_HELPER_CLAIMS"))
		runSessionHolder(os.Getenv(helperAddrEnv), n)
		os.Exit(1)
	}
	fmt.Fprintln(os.Stderr, "unknown helper", os.Getenv(helperEnv))
	os.Exit(2)
	return true
}
