package server_test

// Random byte streams never crash the server nor disturb other clients.

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/batonlock/baton/protocol"
)

// garbageSeed makes the streams reproducible; a failure names the stream.
const garbageSeed = 20240601

// garbage returns a random byte stream: pure noise, noise over the
// protocol's own bytes, or a valid ACQUIRE followed by noise.
func garbage(rng *rand.Rand) []byte {
	n := rng.IntN(600)
	var b []byte
	switch rng.IntN(4) {
	case 0: // any bytes
		for range n {
			b = append(b, byte(rng.UintN(256)))
		}
	case 1: // the bytes a frame parser branches on
		alphabet := []byte{0x00, 0x01, 0x02, 0x03, 0x11, 0x12, 0x13, 0xff, 'a'}
		for range n {
			b = append(b, alphabet[rng.IntN(len(alphabet))])
		}
	case 2: // a plausible ACQUIRE header with random fields, then noise
		b = append(b, 0x01, byte(rng.IntN(3)))
		// Leases are zero or long: a claim that expired while the
		// stream was still arriving would be closed with unread bytes,
		// and the reset that follows is not what this test is about.
		b = binary.BigEndian.AppendUint32(b, []uint32{0, 10_000 + rng.Uint32N(1<<20), math.MaxUint32}[rng.IntN(3)])
		b = binary.BigEndian.AppendUint16(b, uint16(rng.IntN(300)))
		for range n {
			b = append(b, byte(rng.UintN(256)))
		}
	case 3: // a valid ACQUIRE (sometimes of the held lock), then noise
		name := fmt.Sprintf("g%d", rng.IntN(5))
		if rng.IntN(3) == 0 {
			name = "keep"
		}
		b = acquireFrame(name, time.Duration(10_000+rng.IntN(60_000))*time.Millisecond)
		for range n {
			b = append(b, []byte{0x02, 0x02, 0x02, byte(rng.UintN(256))}[rng.IntN(4)])
		}
	}
	return b
}

// TestGarbage sends 300 random streams. Each connection then either
// half-closes and reads until the server closes (every frame it gets
// must be well formed, an ERROR only last and with a client-error code),
// or resets. After each, a new client still acquires a free lock, and the
// client that held another lock throughout still holds it.
func TestGarbage(t *testing.T) {
	t.Parallel()
	ts := startServer(t)
	holder := ts.dial(t)
	token := holder.mustOwn("keep", longLease)
	rng := rand.New(rand.NewPCG(garbageSeed, 0))
	t.Logf("seed %d", garbageSeed)

	for i := range 300 {
		stream := garbage(rng)
		reset := rng.IntN(4) == 0
		c := ts.dial(t)
		c.write(stream) // may fail once the server has given up on it
		if reset {
			c.reset()
		} else {
			c.conn.CloseWrite()
			frames, end := c.readUntilClosed()
			if end != nil {
				t.Fatalf("stream %d (% x): read %v then %v, want well-formed frames then EOF", i, stream, frames, end)
			}
			for j, f := range frames {
				if f.Type == protocol.TypeError && (j != len(frames)-1 || f.Code.Temporary() || f.Code.Err() == nil) {
					t.Fatalf("stream %d (% x): frames %v: an ERROR must be last and a known client error", i, stream, frames)
				}
			}
		}

		probe := ts.dial(t)
		probe.mustOwn(fmt.Sprintf("probe-%d", i), longLease)
		probe.close()
		holder.mustWrite(heartbeats(1))
		if f := holder.mustRead(); f.Type != protocol.TypeAcquired || f.Token != token {
			t.Fatalf("after stream %d (% x) the holder's heartbeat answered %v, want ACQUIRED(%d)", i, stream, f, token)
		}
	}
	if info, ok := ts.Lock("keep"); !ok || info.Holder.Peer.Addr != holder.addr() {
		t.Fatalf("Lock(keep) = %+v, %v; want held by %s", info.Holder, ok, holder)
	}
}
