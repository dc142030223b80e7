package ops

import (
	"errors"
	"net"
	"os"
	"sync"
	"syscall"
)

// ReserveListener returns a listener that keeps one file descriptor in
// reserve (an open /dev/null) for its own connections. When accept fails
// because the process is out of descriptors (EMFILE, ENFILE), it closes
// the reserve and accepts into the freed slot at once, so the health
// probes stay reachable while protocol clients have taken every other
// descriptor. The reserve is taken back when that connection closes (or
// at the next Accept, if another part of the process took the slot
// first).
func ReserveListener(l net.Listener) (net.Listener, error) {
	r := &reserveListener{Listener: l}
	if err := r.refill(); err != nil {
		return nil, err
	}
	return r, nil
}

type reserveListener struct {
	net.Listener
	mu     sync.Mutex
	spare  *os.File // nil while spent
	closed bool
}

func (l *reserveListener) refill() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.spare != nil || l.closed {
		return nil
	}
	f, err := os.Open(os.DevNull)
	if err != nil {
		return err
	}
	l.spare = f
	return nil
}

func (l *reserveListener) Accept() (net.Conn, error) {
	l.refill() // after a spent reserve whose slot was taken; fails quietly while exhausted
	c, err := l.Listener.Accept()
	if err == nil || !outOfDescriptors(err) {
		return c, err
	}
	l.mu.Lock()
	spare := l.spare
	l.spare = nil
	l.mu.Unlock()
	if spare == nil {
		return nil, err
	}
	spare.Close()
	c, err = l.Listener.Accept()
	if err != nil {
		l.refill()
		return nil, err
	}
	return &reserveConn{Conn: c, l: l}, nil
}

func (l *reserveListener) Close() error {
	err := l.Listener.Close()
	l.mu.Lock()
	l.closed = true
	if l.spare != nil {
		l.spare.Close()
		l.spare = nil
	}
	l.mu.Unlock()
	return err
}

// reserveConn was accepted with the reserve; closing it refills the
// reserve.
type reserveConn struct {
	net.Conn
	l    *reserveListener
	once sync.Once
}

func (c *reserveConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.refill() })
	return err
}

func outOfDescriptors(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)
}
