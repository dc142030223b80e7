package server

import "time"

// SetAfterTableEntry sets the hook that runs between an ACQUIRE's entry
// into the table and the reply to it.
func SetAfterTableEntry(srv *Server, h func(addr string)) { srv.afterTableEntry = h }

// TokenGate is the instant before which the server grants nothing (the
// first second of the process, with the default token source).
func TokenGate(srv *Server) time.Time {
	srv.init()
	return srv.gate
}
