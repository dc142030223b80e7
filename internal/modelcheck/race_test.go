//go:build race

package modelcheck

// raceEnabled trims the optional, larger bounds under the race detector,
// which slows the replays roughly tenfold; the required bounds are always
// checked.
const raceEnabled = true
