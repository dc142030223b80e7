//go:build unix

package main

import "io"

// runFlagTable returns the flags of 'baton run'.
func runFlagTable() *flagSet {
	fs, _ := runFlags(io.Discard)
	return fs
}
