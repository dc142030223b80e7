package main

import (
	"fmt"
	"io"
)

// runRun implements 'baton run'. Placeholder until the client lands.
func runRun(args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "baton run: not implemented yet")
	return exitError
}
