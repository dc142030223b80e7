// Package memberclient calls the member API that a cluster node serves
// on its admin listener: 'baton cluster' uses it as an operator's
// client, a node (package node) as the client of the dashboard's
// cluster view; both read the cluster's secret file with ReadSecret.
package memberclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/batonlock/baton/admin"
	"github.com/batonlock/baton/cluster"
	"github.com/batonlock/baton/internal/tlsfiles"
)

// HTTPError is a member API error answer.
type HTTPError struct {
	Status int
	Msg    string
}

func (e *HTTPError) Error() string { return fmt.Sprintf("%s (HTTP %d)", e.Msg, e.Status) }

// Client calls the member API of nodes, over HTTPS when a --tls-*
// flag is given (a node serves its admin listener with its TLS
// certificate), or through a node's own member client when http is set.
type Client struct {
	TLS *tlsfiles.ClientFiles
	// http and scheme, when set, are a node's client for other members
	// (mutual TLS with its own certificate when TLS is on).
	HTTP   *http.Client
	Scheme string
	// secret is the cluster's secret, which every write carries; nil for
	// none.
	Secret []byte
}

func (cc *Client) Do(ctx context.Context, method, addr, path string, body any, out any) error {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	scheme, client := "http", http.DefaultClient
	if cc.HTTP != nil {
		scheme, client = cc.Scheme, cc.HTTP
	} else {
		tlsCfg, err := tlsfiles.ClientConfigForAddr(cc.TLS, addr)
		if err != nil {
			return err
		}
		if tlsCfg != nil {
			scheme = "https"
			tr := &http.Transport{TLSClientConfig: tlsCfg}
			defer tr.CloseIdleConnections()
			client = &http.Client{Transport: tr}
		}
	}
	req, err := http.NewRequestWithContext(ctx, method, scheme+"://"+addr+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if method != http.MethodGet {
		cluster.SetRequestSecret(req, cc.Secret)
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(b, &e) != nil || e.Error == "" {
			e.Error = strings.TrimSpace(string(b))
		}
		if resp.StatusCode == http.StatusNotFound && e.Error == "404 page not found" {
			e.Error = "no member API at this address: is it the admin listener of a cluster node (baton serve -node-id)?"
		}
		return &HTTPError{Status: resp.StatusCode, Msg: e.Error}
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

func (cc *Client) Status(ctx context.Context, addr string) (cluster.Status, error) {
	var st cluster.Status
	err := cc.Do(ctx, http.MethodGet, addr, "/cluster/v1/status", nil, &st)
	return st, err
}

func (cc *Client) Post(ctx context.Context, addr, path string, body any) error {
	return cc.Do(ctx, http.MethodPost, addr, path, body, nil)
}

// ProbeTimeout bounds the probe of one member.
const ProbeTimeout = 2 * time.Second

// Probe is a member's answer about itself, asked over its admin
// address: its status and, when asked for, its /api/info (counts).
type Probe struct {
	Status cluster.Status
	Info   admin.Info
	Err    error
}

// ProbeMembers asks every member, all at once and each within
// ProbeTimeout, for its own status (GET /cluster/v1/status) and,
// with counts, its /api/info. A member without an admin address is not
// asked.
func ProbeMembers(ctx context.Context, cc *Client, members []cluster.Member, counts bool) map[string]Probe {
	out := make(map[string]Probe, len(members))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, m := range members {
		if m.AdminAddr == "" {
			out[m.ID] = Probe{Err: errors.New("no admin address recorded")}
			continue
		}
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, ProbeTimeout)
			defer cancel()
			var p Probe
			p.Status, p.Err = cc.Status(ctx, m.AdminAddr)
			if p.Err == nil && counts {
				p.Err = cc.Do(ctx, http.MethodGet, m.AdminAddr, "/api/info", nil, &p.Info)
			}
			mu.Lock()
			out[m.ID] = p
			mu.Unlock()
		})
	}
	wg.Wait()
	return out
}

// MinSecret is the shortest cluster secret accepted, in bytes.
const MinSecret = 16

// MaxSecret bounds the size of the secret file read.
const MaxSecret = 4096

// ReadSecret reads the cluster's shared secret from path: one
// secret per line, without surrounding white space; the first is the
// one sent, the others are accepted too (the previous secret while a new
// one is rolled out). Empty lines are skipped.
func ReadSecret(path string) (secret []byte, old [][]byte, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("-cluster-secret-file: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxSecret+1))
	if err != nil {
		return nil, nil, fmt.Errorf("-cluster-secret-file %s: %w", path, err)
	}
	if len(b) > MaxSecret {
		return nil, nil, fmt.Errorf("-cluster-secret-file %s: more than %d bytes; is it the right file?", path, MaxSecret)
	}
	var all [][]byte
	for i, line := range bytes.Split(b, []byte("\n")) {
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		if len(line) < MinSecret {
			return nil, nil, fmt.Errorf("-cluster-secret-file %s, line %d: the secret is %d bytes, want at least %d (for example: openssl rand -hex 32 > %s)",
				path, i+1, len(line), MinSecret, path)
		}
		all = append(all, line)
	}
	if len(all) == 0 {
		return nil, nil, fmt.Errorf("-cluster-secret-file %s: no secret in it (for example: openssl rand -hex 32 > %s)", path, path)
	}
	return all[0], all[1:], nil
}
