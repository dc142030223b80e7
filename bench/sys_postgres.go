package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

func postgresSystem() *system {
	return &system{
		name:   "postgres",
		client: "github.com/jackc/pgx/v5: SELECT pg_advisory_lock($1) / pg_advisory_unlock($1) on a session connection held by each worker",
		start:  startPostgres,
		dial:   dialPostgres,
		// An advisory lock lives as long as its session: it has no lease.
		// A killed holder's kernel closes the socket, the backend exits and
		// the lock goes at once; a frozen holder keeps it forever.
		deadLease:    0,
		leaseNote:    "none: session-scoped advisory lock, released when the backend sees the connection close; a frozen (SIGSTOP) holder keeps it indefinitely",
		capacityNote: "one connection (and so one backend process) per held lock",
	}
}

// pgBin finds a PostgreSQL server binary: on PATH, or the newest
// /usr/lib/postgresql/*/bin (Debian keeps them off PATH).
func pgBin(name string) (string, error) {
	return lookPath(name, "/usr/lib/postgresql/*/bin/"+name)
}

func startPostgres(ctx context.Context, e *env) (*server, error) {
	initdb, err := pgBin("initdb")
	if err != nil {
		return nil, err
	}
	postgres := filepath.Join(filepath.Dir(initdb), "postgres")
	dir, err := mkdirOwned(e.tmp, "postgres-", e.pgUID, e.pgGID)
	if err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data")
	ip, err := startProcess("initdb", dir, e.pgUID, e.pgGID, []string{initdb,
		"-D", data, "-U", "bench", "--auth=trust", "--no-sync", "-E", "UTF8", "--locale=C"}, nil)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	select {
	case <-ip.done:
	case <-time.After(120 * time.Second):
		ip.stop(time.Second)
	}
	if ip.err != nil || ip.cmd.ProcessState == nil || !ip.cmd.ProcessState.Success() {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("initdb failed: %v: %s", ip.err, ip.tail())
	}
	// The capacity scenario connects from many loopback addresses; the
	// default pg_hba.conf trusts only 127.0.0.1.
	hba, err := os.OpenFile(filepath.Join(data, "pg_hba.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	fmt.Fprintln(hba, "host all all 127.0.0.0/8 trust")
	hba.Close()
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	// Defaults except what the scenarios need: loopback only, a socket
	// directory of its own, and room for every session the run opens.
	p, err := startProcess("postgres", dir, e.pgUID, e.pgGID, []string{postgres,
		"-D", data, "-p", fmt.Sprint(port), "-c", "listen_addresses=127.0.0.1",
		"-c", "unix_socket_directories=" + dir, "-c", fmt.Sprintf("max_connections=%d", e.pgMaxConns),
		"-c", "logging_collector=off", "-c", "log_min_messages=error"}, nil)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	p.stopSignal = syscall.SIGINT
	if err := waitTCP(addr, p, 60*time.Second); err != nil {
		p.stop(time.Second)
		os.RemoveAll(dir)
		return nil, err
	}
	// PostgreSQL listens before it accepts sessions ("the database
	// system is starting up"): wait for a session, so that the first
	// scenario does not fail on a loaded machine.
	if err := waitUntil(60*time.Second, func() error {
		c, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		l, err := dialPostgres(c, addr, clientOpts{})
		if err == nil {
			l.close()
		}
		return err
	}); err != nil {
		p.stop(time.Second)
		os.RemoveAll(dir)
		return nil, fmt.Errorf("postgres not accepting sessions: %w", err)
	}
	pid := p.pid()
	return &server{
		addr:    addr,
		proc:    p,
		version: firstLine(postgres, "--version"),
		memory: func() (int64, string, error) {
			var sum int64
			for _, q := range descendants(pid) {
				k, err := pssKiB(q)
				if err != nil {
					continue // a backend that just exited
				}
				sum += k
			}
			return sum, "sum of PSS over the postmaster and all its processes (one backend per session; PSS counts shared memory once)", nil
		},
		stop: func() { p.stop(10 * time.Second); os.RemoveAll(dir) },
	}, nil
}

type pgLocker struct{ conn *pgx.Conn }

func dialPostgres(ctx context.Context, addr string, o clientOpts) (locker, error) {
	host, port, _ := net.SplitHostPort(addr)
	cfg, err := pgx.ParseConfig(fmt.Sprintf("postgres://bench@%s:%s/postgres?sslmode=disable", host, port))
	if err != nil {
		return nil, err
	}
	if o.dialer != nil {
		cfg.DialFunc = o.dialer.DialContext
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return &pgLocker{conn: conn}, nil
}

func (l *pgLocker) lock(ctx context.Context, name string) (unlocker, error) {
	key := lockKey(name)
	if _, err := l.conn.Exec(ctx, "SELECT pg_advisory_lock($1)", key); err != nil {
		return nil, err
	}
	return pgHeld{l.conn, key}, nil
}

func (l *pgLocker) close() {
	c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	l.conn.Close(c)
}

type pgHeld struct {
	conn *pgx.Conn
	key  int64
}

func (h pgHeld) unlock() error {
	var ok bool
	if err := h.conn.QueryRow(context.Background(), "SELECT pg_advisory_unlock($1)", h.key).Scan(&ok); err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("pg_advisory_unlock: lock was not held")
	}
	return nil
}

// pgUser picks the unprivileged account PostgreSQL runs as.
func pgUser() (name string, uid, gid int) {
	for _, n := range []string{"postgres", "nobody"} {
		b, err := os.ReadFile("/etc/passwd")
		if err != nil {
			break
		}
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Split(line, ":")
			if len(f) > 3 && f[0] == n {
				var u, g int
				fmt.Sscan(f[2], &u)
				fmt.Sscan(f[3], &g)
				return n, u, g
			}
		}
	}
	return "", 0, 0
}
