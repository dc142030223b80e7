package server

// SetAfterTableEntry sets the hook that runs between an ACQUIRE's entry
// into the table and the reply to it.
func SetAfterTableEntry(srv *Server, h func(addr string)) { srv.afterTableEntry = h }
