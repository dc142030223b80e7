//go:build unix

package main

import "io"

// runFlagTable returns the flags of 'baton run'.
func runFlagTable() *flagSet {
	fs, _ := runFlags(io.Discard)
	return fs
}

// electFlagTable returns the flags of 'baton elect'.
func electFlagTable() *flagSet {
	fs, _ := electFlags(io.Discard)
	return fs
}
