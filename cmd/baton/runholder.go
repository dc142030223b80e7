package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/batonlock/baton/admin"
)

// whoHoldsTimeout bounds the admin API lookup of a waiting run's
// message: the message is help, never a reason to wait longer.
const whoHoldsTimeout = time.Second

// whoHolds describes, for the waiting message of baton run, who holds
// the lock and how many claims queue for it, from the admin API named
// by --admin. Without it, or when the lookup fails, it says what can be
// said without one.
func whoHolds(ctx context.Context, cfg *runConfig, name string) string {
	const unknown = "held by another client, or the server is slow"
	if cfg.admin == "" {
		return unknown + "; --admin names the admin API to ask who holds it"
	}
	c, err := newAdminClient(&adminConfig{addr: cfg.admin, tls: cfg.tls})
	if err != nil {
		return unknown + "; " + err.Error()
	}
	ctx, cancel := context.WithTimeout(ctx, whoHoldsTimeout)
	defer cancel()
	l, err := c.Lock(ctx, name)
	if err != nil {
		return fmt.Sprintf("%s; admin API %s: %v", unknown, cfg.admin, err)
	}
	return describeQueue(l, time.Now())
}

// describeQueue says who holds l and how many claims wait for it, for
// example `held by 10.0.0.7:51234 ("deploy pid 81") for 12s, token 42;
// 2 waiting`.
func describeQueue(l admin.Lock, now time.Time) string {
	if len(l.Holders) == 0 {
		return "not held any more; the grant is on its way"
	}
	var hs []string
	for _, h := range l.Holders {
		who := h.RemoteAddr
		if h.Label != "" {
			who += fmt.Sprintf(" (%q)", h.Label)
		}
		if h.Identity != "" {
			who += " identity " + h.Identity
		}
		hs = append(hs, fmt.Sprintf("%s for %s, token %d", who, now.Sub(h.Since.Time).Round(100*time.Millisecond), h.Token))
	}
	held := "held by " + strings.Join(hs, "; ")
	if len(hs) > 1 {
		held = fmt.Sprintf("held by %d holders: %s", len(hs), strings.Join(hs, "; "))
	}
	return fmt.Sprintf("%s; %d waiting", held, l.QueueLength())
}
