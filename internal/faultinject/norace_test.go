//go:build linux && !race

package faultinject_test

const raceEnabled = false
