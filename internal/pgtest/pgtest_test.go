//go:build unix

package pgtest

import (
	"os"
	"path/filepath"
	"testing"
)

// TestStart: the server comes up on a socket in its directory, with no
// TCP port, and Stop removes everything.
func TestStart(t *testing.T) {
	s := New(t)
	if _, err := os.Stat(filepath.Join(s.Dir, ".s.PGSQL.5432")); err != nil {
		t.Errorf("no socket in the server's directory: %v\n%s", err, s.Log())
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(s.Dir); !os.IsNotExist(err) {
		t.Errorf("Stop left %s behind (%v)", s.Dir, err)
	}
}
