//go:build linux && race

package faultinject_test

// raceEnabled: this test binary has the race detector, and so will the
// server binary it builds.
const raceEnabled = true
