// Package protocol defines the baton wire protocol: for version 1, frame
// types and their exact bytes, error codes, and the validation rules of
// ACQUIRE; for version 2 (one connection, many claims, shared locks and
// semaphores), its preamble, its length-prefixed frames, their encoders
// and decoders, and the codes they produce. It uses only the standard
// library so that implementers of clients in other languages can read it
// next to docs/protocol.md.
//
// All integers on the wire are unsigned and big endian. TCP is a byte
// stream: the decoders here read fixed fields with io.ReadFull and never
// assume that one read returns one frame.
package protocol
