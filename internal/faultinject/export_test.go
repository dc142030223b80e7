//go:build linux

package faultinject

// ReadSQLFor is readSQL, for the fence's own test.
var ReadSQLFor = readSQL
