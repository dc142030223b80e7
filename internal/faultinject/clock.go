//go:build linux

package faultinject

import "golang.org/x/sys/unix"

// Mono returns the host's CLOCK_MONOTONIC in nanoseconds. It is one clock
// for every process on the host, so the ownership intervals that
// different workers log can be compared with each other and with the
// times at which the test injected its faults. (A time.Time's monotonic
// reading cannot: it is private to its process.)
func Mono() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic("faultinject: clock_gettime(CLOCK_MONOTONIC): " + err.Error())
	}
	return ts.Nano()
}
