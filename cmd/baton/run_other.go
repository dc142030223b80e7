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

// runInit exists on Linux only.
func runInit(_ []string, stderr io.Writer) int {
	fmt.Fprintf(stderr, "baton: %s is internal to baton run on Linux\n", runInitName)
	return exitUsage
}
