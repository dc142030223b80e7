package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"
)

// zkTick is the server's tickTime. The smallest session timeout
// ZooKeeper grants is 2 ticks, so 500ms makes 1s possible (the default
// 2s tick would make it 4s).
const zkTick = 500 * time.Millisecond

const (
	zkEverydayTimeout = 10 * time.Second
	zkCapacityTimeout = 10 * time.Minute
)

func zookeeperSystem() *system {
	return &system{
		name:   "zookeeper",
		client: "github.com/go-zookeeper/zk: zk.NewLock(...).Lock/Unlock (the standard recipe: ephemeral sequential node, watch the predecessor); each worker its own session",
		start:  startZooKeeper,
		dial:   dialZooKeeper,
		// A ZooKeeper session survives a closed connection (the client
		// may reconnect elsewhere), so even a killed holder's ephemeral
		// node stays until the session times out.
		deadLease:      time.Second,
		leaseNote:      "session timeout 1s (tickTime 500ms; the minimum is 2 ticks), client pings every 1/3 of it; a killed holder's session also lasts until it times out",
		connPerSession: true,
		capacityNote:   "one ZooKeeper session (its own connection) and one ephemeral sequential node per held lock",
	}
}

func startZooKeeper(ctx context.Context, e *env) (*server, error) {
	java, err := lookPath("java")
	if err != nil {
		return nil, err
	}
	jar := "/usr/share/java/zookeeper.jar"
	if _, err := os.Stat(jar); err != nil {
		return nil, fmt.Errorf("%s: %w (run bench/setup)", jar, exec.ErrNotFound)
	}
	dir, err := mkdirOwned(e.tmp, "zookeeper-", 0, 0)
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	cfg := strings.Join([]string{
		fmt.Sprintf("tickTime=%d", zkTick.Milliseconds()),
		"dataDir=" + filepath.Join(dir, "data"),
		fmt.Sprintf("clientPort=%d", port),
		"clientPortAddress=127.0.0.1",
		"maxClientCnxns=0", // no per-address limit: every worker is "another machine"
		fmt.Sprintf("minSessionTimeout=%d", 2*zkTick.Milliseconds()),
		fmt.Sprintf("maxSessionTimeout=%d", zkCapacityTimeout.Milliseconds()),
		"admin.enableServer=false",
		"4lw.commands.whitelist=srvr",
		"",
	}, "\n")
	cfgPath := filepath.Join(dir, "zoo.cfg")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	os.MkdirAll(filepath.Join(dir, "data"), 0o755)
	p, err := startProcess("zookeeper", dir, 0, 0, []string{java,
		"-Dzookeeper.admin.enableServer=false", "-Dzookeeper.4lw.commands.whitelist=srvr", "-Djute.maxbuffer=8388608",
		"-cp", jar, "org.apache.zookeeper.server.ZooKeeperServerMain", cfgPath}, nil)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	if err := waitTCP(addr, p, 60*time.Second); err != nil {
		p.stop(time.Second)
		os.RemoveAll(dir)
		return nil, err
	}
	return &server{
		addr:    addr,
		proc:    p,
		version: zkVersion(addr),
		memory:  vmRSS(p),
		stop:    func() { p.stop(5 * time.Second); os.RemoveAll(dir) },
	}, nil
}

// zkVersion asks the server (four-letter word "srvr").
func zkVersion(addr string) string {
	java := firstLine("java", "-version")
	fallback := "ZooKeeper (Debian package " + firstLine("dpkg-query", "-W", "-f", "${Version}", "zookeeper") + "), " + java
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return fallback
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	c.Write([]byte("srvr"))
	b := make([]byte, 4096)
	n, _ := ioReadAll(c, b)
	for _, line := range strings.Split(string(b[:n]), "\n") {
		if v, ok := strings.CutPrefix(line, "Zookeeper version: "); ok {
			if i := strings.IndexByte(v, ','); i > 0 {
				v = v[:i]
			}
			return "ZooKeeper " + strings.TrimSpace(v) + ", " + java
		}
	}
	return fallback
}

func ioReadAll(c net.Conn, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		m, err := c.Read(b[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

type zkLocker struct{ conn *zk.Conn }

type nopLogger struct{}

func (nopLogger) Printf(string, ...any) {}

func dialZooKeeper(ctx context.Context, addr string, o clientOpts) (locker, error) {
	timeout := o.lease
	switch {
	case timeout == 0 && o.capacity:
		timeout = zkCapacityTimeout
	case timeout == 0:
		timeout = zkEverydayTimeout
	}
	// The option type is unexported: keep the options as plain funcs and
	// pass them as one.
	opts := []func(*zk.Conn){zk.WithLogger(nopLogger{}), zk.WithLogInfo(false)}
	if o.dialer != nil {
		d := o.dialer
		opts = append(opts, zk.WithDialer(func(network, address string, t time.Duration) (net.Conn, error) {
			c, cancel := context.WithTimeout(context.Background(), t)
			defer cancel()
			return d.DialContext(c, network, address)
		}))
	}
	if o.capacity {
		// The library's default buffers are 1.5 MiB each per session.
		opts = append(opts, zk.WithMaxBufferSize(64<<10), zk.WithMaxConnBufferSize(64<<10))
	}
	conn, events, err := zk.Connect([]string{addr}, timeout, func(c *zk.Conn) {
		for _, o := range opts {
			o(c)
		}
	})
	if err != nil {
		return nil, err
	}
	// Connect returns at once; the session exists once the server says so.
	deadline := time.After(30 * time.Second)
	for {
		select {
		case ev := <-events:
			if ev.State == zk.StateHasSession {
				go func() { // keep draining so the event loop never blocks
					for range events {
					}
				}()
				return &zkLocker{conn: conn}, nil
			}
		case <-deadline:
			conn.Close()
			return nil, errors.New("zookeeper: no session after 30s")
		case <-ctx.Done():
			conn.Close()
			return nil, ctx.Err()
		}
	}
}

func (l *zkLocker) lock(ctx context.Context, name string) (unlocker, error) {
	zl := zk.NewLock(l.conn, "/locks/"+name, zk.WorldACL(zk.PermAll))
	// The recipe has no context: run it, and if ctx ends first, let it
	// finish in the background and give the lock straight back.
	done := make(chan error, 1)
	go func() { done <- zl.Lock() }()
	select {
	case err := <-done:
		if err != nil {
			return nil, err
		}
		return zkHeld{zl}, nil
	case <-ctx.Done():
		go func() {
			if <-done == nil {
				zl.Unlock()
			}
		}()
		return nil, ctx.Err()
	}
}

func (l *zkLocker) close() { l.conn.Close() }

type zkHeld struct{ l *zk.Lock }

func (h zkHeld) unlock() error { return h.l.Unlock() }
