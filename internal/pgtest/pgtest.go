//go:build unix

// Package pgtest runs a private PostgreSQL server for tests: a new cluster
// in a temporary directory, reachable only through a unix socket in that
// directory (no TCP port), with trust authentication and no fsync. It
// needs the PostgreSQL server binaries (initdb, postgres), which Debian
// and Ubuntu install off PATH under /usr/lib/postgresql/VERSION/bin.
//
// PostgreSQL refuses to run as root; as root the cluster belongs to the
// unprivileged user "nobody".
package pgtest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// ErrNotInstalled means that no PostgreSQL server binaries were found.
var ErrNotInstalled = errors.New("pgtest: no PostgreSQL server binaries (initdb, postgres) in /usr/lib/postgresql/*/bin or on PATH (Debian, Ubuntu: apt-get install postgresql)")

// User is the superuser role of the cluster.
const User = "baton"

// BinDir returns the directory of the PostgreSQL server binaries: the
// newest /usr/lib/postgresql/VERSION/bin that has initdb and postgres,
// else the directory of an initdb on PATH that has postgres beside it.
func BinDir() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int { return majorVersion(b) - majorVersion(a) })
	if p, err := exec.LookPath("initdb"); err == nil {
		dirs = append(dirs, filepath.Dir(p))
	}
	for _, d := range dirs {
		if executable(filepath.Join(d, "initdb")) && executable(filepath.Join(d, "postgres")) {
			return d, nil
		}
	}
	return "", ErrNotInstalled
}

func majorVersion(bindir string) int {
	v, _ := strconv.Atoi(strings.SplitN(filepath.Base(filepath.Dir(bindir)), ".", 2)[0])
	return v
}

func executable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// Server is a running private PostgreSQL server.
type Server struct {
	Dir string // the temporary directory: the cluster (data/) and the socket
	DSN string // a connection string for libpq and pgx, database "postgres"

	cmd    *exec.Cmd
	exited chan struct{}
	log    logBuffer
}

// Start creates a cluster in a new temporary directory and starts a server
// on it. It returns when the server accepts connections. Stop stops it
// and removes the directory.
func Start(ctx context.Context) (_ *Server, err error) {
	bindir, err := BinDir()
	if err != nil {
		return nil, err
	}
	cred, err := credential()
	if err != nil {
		return nil, err
	}
	dir, err := tempDir(cred)
	if err != nil {
		return nil, err
	}
	s := &Server{Dir: dir, exited: make(chan struct{}),
		DSN: fmt.Sprintf("host=%s user=%s dbname=postgres sslmode=disable connect_timeout=10", dir, User)}
	defer func() {
		if err != nil {
			os.RemoveAll(dir)
		}
	}()
	command := func(ctx context.Context, name string, args ...string) *exec.Cmd {
		cmd := exec.CommandContext(ctx, filepath.Join(bindir, name), args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "LC_ALL=C", "TZ=UTC")
		cmd.SysProcAttr = sysProcAttr(cred)
		return cmd
	}
	data := filepath.Join(dir, "data")
	initdb := command(ctx, "initdb", "-D", data, "-U", User, "-A", "trust", "-E", "UTF8", "--no-locale", "--no-sync")
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("pgtest: initdb: %v\n%s", err, out)
	}
	// Not bound to ctx, which bounds only the start: Stop ends it.
	s.cmd = command(context.Background(), "postgres", "-D", data, "-k", dir,
		"-c", "listen_addresses=", "-c", "fsync=off", "-c", "synchronous_commit=off",
		"-c", "full_page_writes=off", "-c", "shared_buffers=16MB", "-c", "max_connections=50")
	stderr, err := s.cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("pgtest: postgres: %v", err)
	}
	// The log tells when the server is ready: no polling.
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		once := sync.Once{}
		for sc.Scan() {
			s.log.add(sc.Text())
			if strings.Contains(sc.Text(), "database system is ready to accept connections") {
				once.Do(func() { close(ready) })
			}
		}
		io.Copy(io.Discard, stderr)
		s.cmd.Wait()
		close(s.exited)
	}()
	select {
	case <-ready:
		return s, nil
	case <-s.exited:
		return nil, fmt.Errorf("pgtest: postgres exited (%v) before it was ready:\n%s", s.cmd.ProcessState, s.Log())
	case <-ctx.Done():
		s.Stop()
		return nil, fmt.Errorf("pgtest: postgres not ready: %w\n%s", ctx.Err(), s.Log())
	}
}

// Stop shuts the server down (a fast shutdown, SIGKILL if that takes more
// than 10s) and removes its directory.
func (s *Server) Stop() error {
	s.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
		s.cmd.Process.Kill()
		<-s.exited
	}
	return os.RemoveAll(s.Dir)
}

// Log returns the end of the server's log, for failure messages.
func (s *Server) Log() string { return s.log.String() }

// New starts a server for the test and stops it when the test ends. If
// PostgreSQL is not installed, it skips the test, or fails it when the
// environment variable CI is "true": CI must not pass by skipping.
func New(t testing.TB) *Server {
	t.Helper()
	if _, err := BinDir(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("pgtest: %v", err)
		}
	})
	return s
}

// credential is the user to run PostgreSQL as: this process's own (nil)
// unless it is root, else "nobody".
func credential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("nobody")
	if err != nil {
		return nil, fmt.Errorf("pgtest: running as root, which PostgreSQL refuses, and no user to run it as: %v", err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("pgtest: user nobody has uid %q, gid %q", u.Uid, u.Gid)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}, nil
}

// tempDir makes a new temporary directory that cred's user owns, under a
// parent that user can reach: os.TempDir(), else /tmp. The path is short,
// since a unix socket's path is limited to about 100 bytes.
func tempDir(cred *syscall.Credential) (string, error) {
	parents := []string{os.TempDir()}
	if cred != nil && parents[0] != "/tmp" {
		parents = append(parents, "/tmp")
	}
	var errs []error
	for _, parent := range parents {
		if cred != nil {
			if err := searchable(parent); err != nil {
				errs = append(errs, err)
				continue
			}
		}
		dir, err := os.MkdirTemp(parent, "pgtest-")
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if cred != nil {
			if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
				os.RemoveAll(dir)
				errs = append(errs, err)
				continue
			}
		}
		return dir, nil
	}
	return "", fmt.Errorf("pgtest: no temporary directory PostgreSQL's user can use: %w", errors.Join(errs...))
}

// searchable checks that every user can traverse dir and its parents.
func searchable(dir string) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	for {
		fi, err := os.Stat(dir)
		if err != nil {
			return err
		}
		if fi.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("%s is not searchable by other users (mode %v)", dir, fi.Mode().Perm())
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return nil
		}
		dir = parent
	}
}

// logBuffer keeps the last lines of the server's log.
type logBuffer struct {
	mu    sync.Mutex
	lines []string
}

func (b *logBuffer) add(line string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.lines = append(b.lines, line)
	if len(b.lines) > 200 {
		b.lines = b.lines[len(b.lines)-100:]
	}
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Join(b.lines, "\n")
}
