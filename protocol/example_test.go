package protocol_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/batonlock/baton/protocol"
)

// A client encodes its ACQUIRE, writes it, and then reads server frames
// for the life of the connection. Here the "connection" is two buffers.
func Example() {
	lease := 2 * time.Second
	if err := protocol.ValidateLease(lease); err != nil {
		fmt.Println(err)
		return
	}
	req := protocol.AppendAcquire(nil, protocol.Acquire{
		Version: protocol.Version,
		LeaseMS: protocol.LeaseMS(lease),
		Name:    "job",
	})
	fmt.Printf("ACQUIRE (%v lease): % x\n", lease, req)

	// What a server might answer: WAITING, then a promotion push, then a
	// shutdown notice.
	var replies []byte
	replies = protocol.AppendWaiting(replies)
	replies = protocol.AppendAcquired(replies, 1_700_000_000<<20)
	replies = protocol.AppendError(replies, protocol.CodeShuttingDown, "")

	r := bytes.NewReader(replies)
	for r.Len() > 0 {
		f, err := protocol.ReadServerFrame(r)
		if err != nil {
			fmt.Println("close:", err)
			return
		}
		switch f.Type {
		case protocol.TypeWaiting:
			fmt.Println("queued")
		case protocol.TypeAcquired:
			fmt.Println("owner, fencing token", f.Token)
		case protocol.TypeError:
			fmt.Printf("error %v, retry: %v\n", f.Code, f.Code.Temporary())
		}
	}
	// Output:
	// ACQUIRE (2s lease): 01 01 00 00 07 d0 00 03 6a 6f 62
	// queued
	// owner, fencing token 1782579200000000
	// error 0x01 (server shutting down), retry: true
}

// The server reads the type byte, then lets ReadAcquireBody check the
// rest in protocol order; each refusal is a sentinel whose code goes into
// the ERROR frame.
func ExampleReadAcquireBody() {
	conn := bytes.NewReader([]byte{0x01, 0x01, 0x00, 0x00, 0x07, 0xd0, 0x01, 0x00})
	var typ [1]byte
	conn.Read(typ[:])
	if protocol.Type(typ[0]) != protocol.TypeAcquire {
		return
	}
	_, err := protocol.ReadAcquireBody(conn)
	code, _ := protocol.CodeOf(err)
	fmt.Printf("% x\n", protocol.AppendError(nil, code, "name is 256 bytes"))
	// Output:
	// 13 15 11 6e 61 6d 65 20 69 73 20 32 35 36 20 62 79 74 65 73
}

// A version 2 server reads the opening with the version 1 decoder: version
// 2 in an ACQUIRE header is the preamble. Then it reads HELLO and the
// client's frames, answering a claim-level fault with REFUSED and reading
// on.
func ExampleReadClientFrame() {
	var stream []byte
	stream = protocol.AppendPreamble(stream)
	stream = protocol.AppendHello(stream, 2000, "worker-1")
	stream = protocol.AppendClaim(stream, 1, protocol.ModeShared, 0, 0, "db")
	stream = protocol.AppendClaim(stream, 2, protocol.ModeSemaphore, 0, 0, "pool")
	stream = protocol.AppendPing(stream, 1)
	conn := bytes.NewReader(stream)

	var typ [1]byte
	conn.Read(typ[:])
	if a, err := protocol.ReadAcquireBody(conn); err != protocol.ErrUnsupportedVersion || a.Version != protocol.Version2 {
		return // version 1, or an ERROR 0x10
	}
	if err := protocol.ReadPreambleTail(conn); err != nil {
		return // answer the version 1 ERROR 0x10
	}
	hello, err := protocol.ReadHello(conn)
	if err != nil {
		return // answer the version 2 ERROR with CodeOf(err)
	}
	fmt.Printf("session %q, lease %v\n", hello.Label, hello.Lease())
	for {
		f, err := protocol.ReadClientFrame(conn)
		var ce *protocol.ClaimError
		switch {
		case err == io.EOF:
			return
		case errors.As(err, &ce):
			code, _ := protocol.CodeOf(err)
			fmt.Printf("% x\n", protocol.AppendRefused(nil, ce.Claim, code, ""))
		case err != nil:
			code, _ := protocol.CodeOf(err)
			fmt.Printf("ERROR %v, close\n", code)
			return
		default:
			fmt.Println(f)
		}
	}
	// Output:
	// session "worker-1", lease 2s
	// CLAIM(1 shared limit=0 flags=0x00 "db")
	// 00 2b 38 00 00 00 02 21 24 69 6e 76 61 6c 69 64 20 73 65 6d 61 70 68 6f 72 65 20 6c 69 6d 69 74 20 66 6f 72 20 74 68 65 20 6d 6f 64 65
	// PING(1)
}
