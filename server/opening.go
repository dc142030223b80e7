package server

import "io"

// opening reads a connection's opening (a hop header if a cluster node
// relayed it, then a version 1 ACQUIRE or the version 2 preamble) in as
// few reads as it can without reading past it. Each read asks for what
// the caller needs now and for what every valid opening is still sure to
// send after that (readFull's then), never more: nothing that the
// session reads later (heartbeats, version 2 frames, the relayed
// client's bytes) is taken here. A version 1 ACQUIRE then takes two
// reads, where reading field by field took four; a relayed one at its
// owner three, where it took seven. Each read is a system call, and on
// a relayed acquire's critical path.
type opening struct {
	r    io.Reader
	buf  [openingAhead]byte
	head int // buf[head:tail] has been read and not yet taken
	tail int
	// sure is how many bytes a valid opening still sends after what has
	// been taken: a read may ask for that many.
	sure int
}

// openingAhead bounds a read ahead; a longer field (an identity of more
// bytes, say) is read into the caller's buffer as it comes.
const openingAhead = 288

// openingMin is the least any valid opening sends: an ACQUIRE header
// (and at least one byte of name), the version 2 preamble, or a hop
// header followed by one of them.
const openingMin = 8

// readFull fills p; then is how many bytes every valid opening sends
// after p.
func (o *opening) readFull(p []byte, then int) error {
	o.sure = len(p) + then
	_, err := io.ReadFull(o, p)
	return err
}

// Read serves what was read ahead, then reads from the connection up to
// o.sure bytes. An error that comes with bytes is seen by the next read
// of the connection, which returns it again.
func (o *opening) Read(p []byte) (int, error) {
	if o.head == o.tail {
		want := max(len(p), o.sure)
		if want == len(p) || want > len(o.buf) {
			n, err := o.r.Read(p)
			o.took(n)
			return n, err
		}
		n, err := o.r.Read(o.buf[:want])
		if n == 0 {
			return 0, err
		}
		o.head, o.tail = 0, n
	}
	n := copy(p, o.buf[o.head:o.tail])
	o.head += n
	o.took(n)
	return n, nil
}

func (o *opening) took(n int) { o.sure = max(o.sure-n, 0) }
