//go:build !unix

package main

import (
	"fmt"
	"io"
)

// runRun needs process groups and signals: 'baton run' is for Unix.
func runRun(args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "baton run: not supported on this operating system")
	return exitError
}
