//go:build linux || darwin || freebsd || netbsd || openbsd

package server

import (
	"crypto/tls"
	"net"
	"syscall"
)

// hopAlive tells whether an idle hop connection is still open: a
// non-blocking peek at its socket finds the owner's close (end of stream),
// a reset, or bytes the owner sent before any ACQUIRE (its ERROR on
// shutdown). With TLS, pending bytes may be a post-handshake record, so
// only a close or reset counts; the pooled hop's redial covers the rest.
func hopAlive(c net.Conn) bool {
	tc, isTLS := c.(*tls.Conn)
	if isTLS {
		c = tc.NetConn()
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	alive := true
	err = rc.Read(func(fd uintptr) bool {
		var b [1]byte
		n, _, rerr := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		switch {
		case rerr == syscall.EAGAIN || rerr == syscall.EWOULDBLOCK || rerr == syscall.EINTR:
		case rerr != nil, n == 0:
			alive = false
		default:
			alive = isTLS
		}
		return true // never wait for readiness
	})
	return err == nil && alive
}
