package protocol_test

import (
	"bytes"
	"fmt"
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
