package protocol

// DETACH and DETACHED (docs/protocol-v2-resume.md, "v2 detach"): a client whose
// session was opened with HelloDetach says, before it closes a
// connection on purpose, that it will come back and re-assert its claims
// elsewhere; the server keeps them and answers DETACHED. Without it, the
// connection's end (FIN or reset) is the client's death, and the server
// releases the session's claims at once. Both frames have no payload.
const (
	TypeDetach   Type = 0x28 // C→S
	TypeDetached Type = 0x3e // S→C: the answer to DETACH
)

// AppendDetach appends a DETACH frame.
func AppendDetach(b []byte) []byte { return AppendFrame(b, Frame{Type: TypeDetach}) }

// AppendDetached appends a DETACHED frame.
func AppendDetached(b []byte) []byte { return AppendFrame(b, Frame{Type: TypeDetached}) }
