package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"github.com/batonlock/baton/ranges"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/batonlock/baton"
	"github.com/batonlock/baton/fusefs"
	"github.com/batonlock/baton/internal/tlsfiles"
	"github.com/batonlock/baton/protocol"
)

const mountSynopsis = "baton mount [flags] SRC MNT"

const mountHelp = `
Mounts a FUSE passthrough of the directory SRC on MNT whose flock(2) and
fcntl(2) locks are held on the baton server instead of in the local
kernel: every 'baton mount' of the same shared directory (an NFS export,
say) with the same --namespace sees the others' locks. A file's lock key is
NAMESPACE:PATH, its path relative to SRC.

The mount keeps one protocol version 2 session with the server: if the
mount process dies, its connection closes and all its locks go at once.
Closing a file releases its owner's locks as POSIX requires. SIGINT or
SIGTERM unmounts and exits. Needs root (the kernel's mount(2), no
fusermount) and FUSE (/dev/fuse; 'modprobe fuse' is tried).

Only root may use the mount, unless --allow-other lets every local user
in. The kernel checks every access against the files' owners and modes
as on SRC, and the mount opens, creates, changes and removes files in
SRC as the calling user (its file system uid, gid and groups), so that
nobody can do through the mount what SRC would refuse them.

The server is a single baton server or any node of a cluster, which
relays each lock to its key's owner. On a cluster, that node hands the
locks over when a planned change moves a key, and re-asserts them at the
key's next owner when its owner dies, if --lease is longer than twice the
cluster's failover time; a lock that cannot be kept ends the session (I/O
through the files it locked then fails with EIO), as does the death of
the node the mount talks to, unless the mount is --resumable: its session
then resumes through the next --server address and re-asserts its locks
there, the programs seeing a pause. A --resumable mount that is killed
leaves its locks for --lease (the server cannot tell it from a broken
connection). While a key's new owner warms up, fcntl and flock without
waiting fail with ENOLCK.

Exit status:
  0   unmounted after SIGINT or SIGTERM
  1   the mount failed or ended on its own
  2   usage error
  69  EX_UNAVAILABLE: the server is unreachable or FUSE is unavailable
`

// mountConfig is what 'baton mount' reads from flags and env.
type mountConfig struct {
	server    string
	resumable bool
	namespace string
	label     string
	lease     time.Duration
	debug     bool
	passthru  bool
	allowOth  bool
	tls       *tlsfiles.ClientFiles
}

func mountFlags(stderr io.Writer) (*flagSet, *mountConfig) {
	cfg := &mountConfig{}
	host, _ := os.Hostname()
	fs := newFlagSet("baton mount", mountSynopsis, stderr)
	fs.StringVar(&cfg.server, "server", "BATON_SERVER", "127.0.0.1:7070", "lock server address (host:port); on a cluster, nodes may be listed, comma-separated, for --resumable")
	fs.BoolVar(&cfg.resumable, "resumable", "BATON_MOUNT_RESUMABLE", false, "keep the locks through a broken connection or the death of the node the mount talks to (resumed through the --server addresses in turn); a killed mount's locks then stay for --lease")
	fs.StringVar(&cfg.namespace, "namespace", "BATON_MOUNT_NAMESPACE", "mount", "starts every lock key; mounts of one shared directory must agree")
	fs.StringVar(&cfg.label, "label", "BATON_MOUNT_LABEL", "mount@"+host, "session label shown to operators and in F_GETLK conflicts")
	fs.DurationVar(&cfg.lease, "lease", "BATON_LEASE", 15*time.Second, "session lease: a mount the server stops hearing from loses its locks after this")
	fs.BoolVar(&cfg.debug, "debug", "BATON_MOUNT_DEBUG", false, "log every FUSE request")
	fs.BoolVar(&cfg.allowOth, "allow-other", "BATON_MOUNT_ALLOW_OTHER", false, "let every local user use the mount, not only root; the kernel checks each access against the files' owners and modes, and the mount acts in SRC as the calling user")
	fs.BoolVar(&cfg.passthru, "passthrough", "BATON_MOUNT_PASSTHROUGH", false, "let the kernel read and write the source files directly (FUSE passthrough): faster, but I/O after a lost lock no longer fails with EIO")
	cfg.tls = clientTLSFlags(fs)
	return fs, cfg
}

func runMount(args []string, stdout, stderr io.Writer) int {
	fs, cfg := mountFlags(stderr)
	if code := fs.parseOrExit(args, stdout, stderr); code >= 0 {
		if code == exitOK {
			fmt.Fprint(stdout, mountHelp)
		}
		return code
	}
	usage := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "baton mount: "+format+"\n", a...)
		fmt.Fprintf(stderr, "Usage: %s\nRun 'baton mount -h' for more.\n", mountSynopsis)
		return exitUsage
	}
	if fs.NArg() != 2 {
		return usage("want SRC and MNT, got %d arguments", fs.NArg())
	}
	src, err := filepath.Abs(fs.Arg(0))
	if err != nil {
		return usage("SRC: %v", err)
	}
	mnt := fs.Arg(1)
	servers := strings.Split(cfg.server, ",")
	for i, addr := range servers {
		servers[i] = strings.TrimSpace(addr)
		if err := checkHostPort(servers[i]); err != nil {
			return usage("--server: %v", err)
		}
	}
	if len(servers) > 1 && !cfg.resumable {
		return usage("--server lists %d addresses: only a --resumable mount uses more than one", len(servers))
	}
	if err := protocol.ValidateLease(cfg.lease); err != nil {
		return usage("--lease %v: %v", cfg.lease, err)
	}
	if cfg.namespace == "" {
		return usage("--namespace must not be empty")
	}
	nameFrom := servers[0]
	if len(servers) > 1 {
		nameFrom = "" // each dial checks the name of the node it reaches
	}
	tlsCfg, err := clientTLSConfig(cfg.tls, nameFrom)
	if err != nil {
		return usage("%v", err)
	}
	bc := baton.Config{Address: servers[0]}
	if tlsCfg != nil {
		bc.Dialer = &tls.Dialer{Config: tlsCfg}
	}
	logger := slog.New(slog.NewTextHandler(stderr, nil))
	opts := baton.SessionOptions{Lease: cfg.lease, Label: cfg.label, RefuseOldServer: true, Resume: resumeMode(cfg.resumable)}
	if cfg.resumable {
		opts.Addrs = servers
	}
	sess := &mountSession{c: baton.New(bc), opts: opts, log: logger}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	_, err = sess.get(ctx)
	cancel()
	if err != nil {
		fmt.Fprintf(stderr, "baton mount: server %s: %v\n", servers[0], err)
		return 69
	}
	defer sess.close()

	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	srv, err := fusefs.Mount(src, mnt, fusefs.Options{Namespace: cfg.namespace, Locks: sess.locker, Logger: logger, Debug: cfg.debug, Passthrough: cfg.passthru, AllowOther: cfg.allowOth})
	if err != nil {
		fmt.Fprintf(stderr, "baton mount: %v\n", err)
		if errors.Is(err, fusefs.ErrNoFUSE) {
			return 69
		}
		return 1
	}
	fmt.Fprintf(stderr, "baton mount: %s mounted on %s, locks on %s\n", src, mnt, strings.Join(servers, ","))
	done := make(chan struct{})
	go func() { srv.Wait(); close(done) }()
	select {
	case sig := <-sigs:
		fmt.Fprintf(stderr, "baton mount: %v: unmounting %s\n", sig, mnt)
		for i := 0; ; i++ {
			err := srv.Unmount()
			if err == nil {
				break
			}
			if i == 50 {
				fmt.Fprintf(stderr, "baton mount: unmount %s: %v\n", mnt, err)
				return 1
			}
			time.Sleep(100 * time.Millisecond) // busy: a process still has a file open
		}
		<-done
		return exitOK
	case <-done:
		fmt.Fprintf(stderr, "baton mount: %s was unmounted\n", mnt)
		return 1
	}
}

// mountSession is the mount's session with the server, opened again when
// it is lost (the locks held on the lost one are gone, as on a server
// restart).
type mountSession struct {
	c    *baton.Client
	opts baton.SessionOptions
	log  *slog.Logger

	mu sync.Mutex
	s  *baton.Session
}

func (m *mountSession) get(ctx context.Context) (*baton.Session, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.s != nil && m.s.Err() == nil {
		return m.s, nil
	}
	if m.s != nil {
		m.log.Warn("session lost; its locks are gone; opening a new one", "err", m.s.Err())
		m.s.Close()
	}
	s, err := m.c.OpenSession(ctx, m.opts)
	if err != nil {
		m.s = nil
		return nil, err
	}
	m.s = s
	return s, nil
}

func (m *mountSession) locker(ctx context.Context) (fusefs.Locker, error) {
	s, err := m.get(ctx)
	if err != nil {
		return nil, err
	}
	return ranges.New(s), nil
}

func (m *mountSession) close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.s != nil {
		m.s.Close()
	}
}
