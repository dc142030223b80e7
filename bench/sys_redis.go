package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"github.com/go-redsync/redsync/v4"
	rsgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	goredis "github.com/redis/go-redis/v9"
)

func redisSystem() *system {
	return &system{
		name:   "redis",
		client: "github.com/go-redsync/redsync/v4 over github.com/redis/go-redis/v9: Mutex.LockContext + UnlockContext with redsync's default retry (32 tries, 50-250ms apart); each worker its own pooled client",
		start:  startRedis,
		dial:   dialRedis,
		// A Redis lock is a key with an expiry; nothing notices a dead
		// holder, the key simply runs out. 1s with an extension every
		// third of it (as Redisson's watchdog does at 30s/10s) is as
		// tight as a holder can safely renew on a loaded machine.
		deadLease:      time.Second,
		leaseNote:      "key expiry 1s, holder extends every 333ms; waiter polls with redsync's default 50-250ms retry delay",
		connPerSession: true,
		capacityNote:   "one lock key per held lock, each holder its own go-redis client (PoolSize 1, 4KiB buffers) keeping one idle connection open",
	}
}

func startRedis(ctx context.Context, e *env) (*server, error) {
	bin, err := lookPath("redis-server")
	if err != nil {
		return nil, err
	}
	dir, err := mkdirOwned(e.tmp, "redis-", 0, 0)
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	// Persistence off: a lock needs none, and it keeps disk writes out of
	// the numbers. maxclients high enough for the capacity scenario.
	p, err := startProcess("redis", dir, 0, 0, []string{bin,
		"--port", fmt.Sprint(port), "--bind", "127.0.0.1", "--protected-mode", "no",
		"--save", "", "--appendonly", "no", "--dir", dir, "--daemonize", "no",
		"--maxclients", fmt.Sprint(e.maxConns + 1000), "--tcp-backlog", "4096",
		"--loglevel", "warning", "--logfile", ""}, nil)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if err := waitTCP(addr, p, 15*time.Second); err != nil {
		p.stop(time.Second)
		os.RemoveAll(dir)
		return nil, err
	}
	return &server{
		addr:    addr,
		proc:    p,
		version: firstLine(bin, "--version"),
		memory:  vmRSS(p),
		stop:    func() { p.stop(5 * time.Second); os.RemoveAll(dir) },
	}, nil
}

type redisLocker struct {
	cli    *goredis.Client
	rs     *redsync.Redsync
	expiry time.Duration // 0: redsync's default (8s)
}

func dialRedis(ctx context.Context, addr string, o clientOpts) (locker, error) {
	opt := &goredis.Options{Addr: addr}
	if o.dialer != nil {
		d := o.dialer
		opt.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
			return d.DialContext(ctx, network, addr)
		}
	}
	expiry := o.lease
	if o.capacity {
		opt.PoolSize, opt.MinIdleConns = 1, 0
		opt.ReadBufferSize, opt.WriteBufferSize = 4096, 4096
		opt.ConnMaxIdleTime = -1
		expiry = time.Hour
	}
	cli := goredis.NewClient(opt)
	if err := cli.Ping(ctx).Err(); err != nil {
		cli.Close()
		return nil, err
	}
	return &redisLocker{cli: cli, rs: redsync.New(rsgoredis.NewPool(cli)), expiry: expiry}, nil
}

func (r *redisLocker) lock(ctx context.Context, name string) (unlocker, error) {
	var opts []redsync.Option
	if r.expiry > 0 {
		opts = append(opts, redsync.WithExpiry(r.expiry))
	}
	m := r.rs.NewMutex(name, opts...)
	if err := m.LockContext(ctx); err != nil {
		return nil, err
	}
	h := &redisHeld{m: m}
	// A holder whose work may outlast the expiry extends the key, as
	// redsync's documentation asks; with the default 8s expiry no cycle of
	// scenarios 1-3 comes near it.
	if r.expiry > 0 && r.expiry < time.Minute {
		h.stop = make(chan struct{})
		h.wg.Add(1)
		go func() {
			defer h.wg.Done()
			t := time.NewTicker(r.expiry / 3)
			defer t.Stop()
			for {
				select {
				case <-h.stop:
					return
				case <-t.C:
					ectx, cancel := context.WithTimeout(context.Background(), r.expiry/3)
					m.ExtendContext(ectx)
					cancel()
				}
			}
		}()
	}
	return h, nil
}

func (r *redisLocker) close() { r.cli.Close() }

type redisHeld struct {
	m    *redsync.Mutex
	stop chan struct{}
	wg   sync.WaitGroup
}

func (h *redisHeld) unlock() error {
	if h.stop != nil {
		close(h.stop)
		h.wg.Wait()
	}
	ok, err := h.m.UnlockContext(context.Background())
	if err == nil && !ok {
		err = redsync.ErrFailed
	}
	return err
}
