package tokenstore

import (
	"testing"
	"time"
)

// BenchmarkNext is the cost of a token on the hot path, the occasional
// background reservation included.
func BenchmarkNext(b *testing.B) {
	s, err := Open(b.TempDir(), Options{Now: func() time.Time { return time.Unix(1, 0) }})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	for b.Loop() {
		s.Next()
	}
}

// BenchmarkReserve is the cost of one durable write of the mark (write,
// fsync, rename, fsync of the directory): what a grant pays when the
// block runs out before the background write is done.
func BenchmarkReserve(b *testing.B) {
	s, err := Open(b.TempDir(), Options{Now: func() time.Time { return time.Unix(1, 0) }})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	limit := s.limit
	for b.Loop() {
		limit += DefaultBlock
		if err := s.reserve(limit); err != nil {
			b.Fatal(err)
		}
	}
}
