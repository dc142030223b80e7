package protocol_test

import (
	"encoding/hex"
	"io"
	"strings"
	"testing"
)

// countingReader counts the bytes its reader returned, so a test can tell
// how far a decoder read.
type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// unhex decodes space-separated hex such as "01 01 00 00 07 d0".
func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatalf("bad hex %q: %v", s, err)
	}
	return b
}

// spaced formats b as space-separated hex for failure messages.
func spaced(b []byte) string {
	var sb strings.Builder
	for i, c := range b {
		if i > 0 {
			sb.WriteByte(' ')
		}
		sb.WriteString(hex.EncodeToString([]byte{c}))
	}
	return sb.String()
}
