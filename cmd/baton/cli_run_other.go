//go:build !unix

package main

// runFlagTable returns nil: 'baton run' is for Unix.
func runFlagTable() *flagSet { return nil }
