package ops

import (
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"
)

// Timeouts and the connection cap of the HTTP servers (ops and admin).
// They bound what idle, slow or hostile HTTP clients can hold: a
// descriptor each, for at most these times, and never more than the cap,
// so the HTTP ports can never starve the protocol port of descriptors.
const (
	ReadHeaderTimeout = 5 * time.Second  // request line and headers
	ReadTimeout       = 10 * time.Second // the whole request
	WriteTimeout      = 30 * time.Second // the whole response (a large /api/locks)
	IdleTimeout       = 15 * time.Second // a keep-alive connection between requests

	// DefaultMaxConns is the default cap on open connections per HTTP
	// listener.
	DefaultMaxConns = 32
)

// NewHTTPServer returns an http.Server for h with the timeouts above.
func NewHTTPServer(h http.Handler, logger *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: ReadHeaderTimeout,
		ReadTimeout:       ReadTimeout,
		WriteTimeout:      WriteTimeout,
		IdleTimeout:       IdleTimeout,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
}

// LimitListener returns a listener that has at most n accepted
// connections open at a time. At the cap, Accept waits for one to close,
// so further clients wait in the kernel's listen backlog and hold no
// descriptor of the process. n <= 0 means no cap.
//
// (golang.org/x/net/netutil has the same; these few lines avoid a
// dependency for them.)
func LimitListener(l net.Listener, n int) net.Listener {
	if n <= 0 {
		return l
	}
	return &limitListener{Listener: l, sem: make(chan struct{}, n), done: make(chan struct{})}
}

type limitListener struct {
	net.Listener
	sem       chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.sem <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	return &limitConn{Conn: c, release: func() { <-l.sem }}, nil
}

func (l *limitListener) Close() error {
	err := l.Listener.Close()
	l.closeOnce.Do(func() { close(l.done) })
	return err
}

type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
