//go:build !unix

package main

import (
	"fmt"
	"io"
)

// runElect runs a command as 'baton run' does: 'baton elect' is for Unix.
func runElect(args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "baton elect: not supported on this operating system")
	return exitError
}

// electFlagTable returns nil: 'baton elect' is for Unix.
func electFlagTable() *flagSet { return nil }
