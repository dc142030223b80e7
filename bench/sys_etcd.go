package main

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
)

// etcdCapacityClients is how many gRPC connections carry the capacity
// scenario's sessions (leases).
const etcdCapacityClients = 16

func etcdSystem() *system {
	return &system{
		name:   "etcd",
		client: "go.etcd.io/etcd/client/v3/concurrency: Session (lease with keepalive) + Mutex.Lock/Unlock; each worker its own client and session",
		start:  startEtcd,
		dial:   dialEtcd,
		capacityPool: func(ctx context.Context, addr string, _ int) (func(context.Context) (locker, error), func(), int, error) {
			d, c, err := etcdCapacityPool(ctx, addr)
			return d, c, 0, err
		},
		// etcd raises any TTL below (3·election-ticks/2)·heartbeat,
		// rounded up to whole seconds: 2s with the defaults. We start it
		// with -election-timeout 500ms (5 ticks) so that 1s, the smallest
		// TTL the API can express, is accepted.
		deadLease:    time.Second,
		leaseNote:    "session TTL 1s (server started with -heartbeat-interval 100 -election-timeout 500 so that etcd accepts 1s; with its defaults the minimum is 2s); keepalive every TTL/3",
		capacityNote: "one concurrency.Session (lease + keepalive) and one Mutex key per held lock, sessions multiplexed over 16 gRPC connections",
	}
}

func startEtcd(ctx context.Context, e *env) (*server, error) {
	bin, err := lookPath("etcd")
	if err != nil {
		return nil, err
	}
	dir, err := mkdirOwned(e.tmp, "etcd-", 0, 0)
	if err != nil {
		return nil, err
	}
	cport, err := freePort()
	if err != nil {
		return nil, err
	}
	pport, err := freePort()
	if err != nil {
		return nil, err
	}
	curl := fmt.Sprintf("http://127.0.0.1:%d", cport)
	purl := fmt.Sprintf("http://127.0.0.1:%d", pport)
	p, err := startProcess("etcd", dir, 0, 0, []string{bin,
		"--name", "bench", "--data-dir", dir + "/data",
		"--listen-client-urls", curl, "--advertise-client-urls", curl,
		"--listen-peer-urls", purl, "--initial-advertise-peer-urls", purl,
		"--initial-cluster", "bench=" + purl, "--initial-cluster-state", "new",
		"--heartbeat-interval", "100", "--election-timeout", "500",
		"--logger", "zap", "--log-outputs", "stderr", "--log-level", "error"}, nil)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", cport)
	if err := waitTCP(addr, p, 20*time.Second); err != nil {
		p.stop(time.Second)
		os.RemoveAll(dir)
		return nil, err
	}
	// Wait until the member has elected itself and serves requests.
	cli, err := newEtcdClient(addr)
	if err == nil {
		for i := 0; i < 100; i++ {
			c, cancel := context.WithTimeout(ctx, time.Second)
			_, err = cli.Put(c, "/bench/ready", "1")
			cancel()
			if err == nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		cli.Close()
	}
	if err != nil {
		p.stop(time.Second)
		os.RemoveAll(dir)
		return nil, fmt.Errorf("etcd not ready: %v: %s", err, p.tail())
	}
	return &server{
		addr:    addr,
		proc:    p,
		version: firstLine(bin, "--version"),
		memory:  vmRSS(p),
		stop:    func() { p.stop(5 * time.Second); os.RemoveAll(dir) },
	}, nil
}

func newEtcdClient(addr string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{
		Endpoints:   []string{addr},
		DialTimeout: 10 * time.Second,
		Logger:      zap.NewNop(),
	})
}

type etcdLocker struct {
	cli   *clientv3.Client // nil when shared
	s     *concurrency.Session
	owned bool
}

func ttlSeconds(d time.Duration) int {
	s := int((d + time.Second - 1) / time.Second)
	return max(s, 1)
}

func dialEtcd(ctx context.Context, addr string, o clientOpts) (locker, error) {
	cli, err := newEtcdClient(addr)
	if err != nil {
		return nil, err
	}
	var sopts []concurrency.SessionOption
	if o.lease > 0 {
		sopts = append(sopts, concurrency.WithTTL(ttlSeconds(o.lease)))
	}
	sopts = append(sopts, concurrency.WithContext(context.Background()))
	s, err := concurrency.NewSession(cli, sopts...)
	if err != nil {
		cli.Close()
		return nil, err
	}
	return &etcdLocker{cli: cli, s: s, owned: true}, nil
}

func etcdCapacityPool(ctx context.Context, addr string) (func(ctx context.Context) (locker, error), func(), error) {
	var clis []*clientv3.Client
	closeAll := func() {
		for _, c := range clis {
			c.Close()
		}
	}
	for range etcdCapacityClients {
		c, err := newEtcdClient(addr)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		clis = append(clis, c)
	}
	var next atomic.Uint32
	dial := func(ctx context.Context) (locker, error) {
		c := clis[next.Add(1)%uint32(len(clis))]
		s, err := concurrency.NewSession(c, concurrency.WithTTL(600), concurrency.WithContext(context.Background()))
		if err != nil {
			return nil, err
		}
		return &etcdLocker{s: s}, nil
	}
	return dial, closeAll, nil
}

func (l *etcdLocker) lock(ctx context.Context, name string) (unlocker, error) {
	m := concurrency.NewMutex(l.s, "/locks/"+name)
	if err := m.Lock(ctx); err != nil {
		return nil, err
	}
	return etcdHeld{m}, nil
}

func (l *etcdLocker) close() {
	if !l.owned {
		// A capacity session: closing the pool's clients ends its
		// keepalive; the server is already gone.
		return
	}
	// Close revokes the lease (and with it any key still held) rather
	// than leaving it to expire.
	l.s.Close()
	l.cli.Close()
}

type etcdHeld struct{ m *concurrency.Mutex }

func (h etcdHeld) unlock() error {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return h.m.Unlock(c)
}
