//go:build !unix

package tokenstore

import "os"

// lockFile does nothing where flock(2) is not available: one process per
// data directory is then up to the operator.
func lockFile(string) (*os.File, error) { return nil, nil }
