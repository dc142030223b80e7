package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// ErrNotFound matches (with errors.Is) an *Error for an unknown lock or
// waiter.
var ErrNotFound = errors.New("not found")

// Error is an error answer of the API.
type Error struct {
	StatusCode int
	// Message is the "error" field of the body; empty when the body was
	// not the API's JSON, for example when the address is some other
	// HTTP server.
	Message string
}

func (e *Error) Error() string {
	if e.Message == "" {
		return fmt.Sprintf("admin API: %d %s (not an answer of the baton admin API; check the address)",
			e.StatusCode, http.StatusText(e.StatusCode))
	}
	return "admin API: " + e.Message
}

// Is makes errors.Is(err, ErrNotFound) true for a 404 of the admin API
// (not for a 404 of some other server at the address).
func (e *Error) Is(target error) bool {
	return target == ErrNotFound && e.StatusCode == http.StatusNotFound && e.Message != ""
}

// Client calls the admin API of one server.
type Client struct {
	// BaseURL is the API's root, for example "http://127.0.0.1:7072".
	BaseURL string
	// HTTPClient makes the requests; nil means http.DefaultClient.
	HTTPClient *http.Client
}

// NewClient returns a client for the admin API at addr, either host:port
// or a URL such as http://host:port.
func NewClient(addr string) (*Client, error) {
	if addr == "" {
		return nil, errors.New("admin: empty address")
	}
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	u, err := url.Parse(addr)
	if err != nil {
		return nil, fmt.Errorf("admin: bad address: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("admin: bad address %q: want host:port or http(s)://host:port", addr)
	}
	return &Client{BaseURL: strings.TrimSuffix(u.String(), "/")}, nil
}

// LockPath returns the escaped API path of lock name, optionally followed
// by more escaped segments.
func LockPath(name string, more ...string) string {
	p := "/api/locks/" + url.PathEscape(name)
	for _, m := range more {
		p += "/" + url.PathEscape(m)
	}
	return p
}

// Info returns the server's version, uptime, configuration and counts.
func (c *Client) Info(ctx context.Context) (Info, error) {
	var out Info
	return out, c.do(ctx, http.MethodGet, "/api/info", &out)
}

// Owner returns the member that owns lock name in the ring of the
// cluster node the client calls; an error matching ErrNotFound when the
// server is not a cluster node.
func (c *Client) Owner(ctx context.Context, name string) (ClusterOwner, error) {
	var out ClusterOwner
	return out, c.do(ctx, http.MethodGet, "/api/cluster/owner?name="+url.QueryEscape(name), &out)
}

// Cluster returns the cluster as the node the client calls sees it; an
// error matching ErrNotFound when the server is not a cluster node.
func (c *Client) Cluster(ctx context.Context) (ClusterStatus, error) {
	var out ClusterStatus
	return out, c.do(ctx, http.MethodGet, "/api/cluster", &out)
}

// Locks returns every lock with an owner or a queue whose name matches
// the glob pattern; an empty pattern returns all.
func (c *Client) Locks(ctx context.Context, match string) ([]Lock, error) {
	p := "/api/locks"
	if match != "" {
		p += "?match=" + url.QueryEscape(match)
	}
	var out LockList
	err := c.do(ctx, http.MethodGet, p, &out)
	return out.Locks, err
}

// Lock returns one lock; an error matching ErrNotFound when nobody holds
// it.
func (c *Client) Lock(ctx context.Context, name string) (Lock, error) {
	var out Lock
	return out, c.do(ctx, http.MethodGet, LockPath(name), &out)
}

// Release force-releases lock name: its owner receives ERROR 0x02 and the
// next waiter is promoted.
func (c *Client) Release(ctx context.Context, name string) (Released, error) {
	var out Released
	return out, c.do(ctx, http.MethodPost, LockPath(name, "release"), &out)
}

// ReleaseHolder force-releases one holder of lock name: the one granted
// token (when not 0), or the claim SESSION/CLAIM (when claim is not
// empty). A version 2 holder receives REVOKED(0x02) and its session
// lives on.
func (c *Client) ReleaseHolder(ctx context.Context, name string, token uint64, claim string) (Released, error) {
	q := url.Values{}
	if token != 0 {
		q.Set("token", strconv.FormatUint(token, 10))
	}
	if claim != "" {
		q.Set("claim", claim)
	}
	path := LockPath(name, "release")
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var out Released
	return out, c.do(ctx, http.MethodPost, path, &out)
}

// Kick removes a waiter from the queue of lock name: the first with
// remote address addr, or, when addr is SESSION/CLAIM, that claim. A
// version 1 waiter receives ERROR 0x02 and is closed; a version 2 claim
// receives REVOKED(0x02) and its session lives on.
func (c *Client) Kick(ctx context.Context, name, addr string) (Kicked, error) {
	var out Kicked
	return out, c.do(ctx, http.MethodDelete, LockPath(name, "waiters", addr), &out)
}

// Ranges returns the first page of range-lock keys (fcntl and flock)
// whose key matches the glob pattern (empty: all), in key order, with
// the total.
func (c *Client) Ranges(ctx context.Context, match string) (RangeList, error) {
	p := "/api/ranges"
	if match != "" {
		p += "?match=" + url.QueryEscape(match)
	}
	var out RangeList
	return out, c.do(ctx, http.MethodGet, p, &out)
}

// ReleaseRanges releases the range locks and waiting range requests of
// owner SESSION/OWNER on key; its session is ended with ERROR 0x02.
func (c *Client) ReleaseRanges(ctx context.Context, key, owner string) (RangesReleased, error) {
	var out RangesReleased
	path := "/api/ranges/" + url.PathEscape(key) + "/release?" + url.Values{"owner": {owner}}.Encode()
	return out, c.do(ctx, http.MethodPost, path, &out)
}

func (c *Client) do(ctx context.Context, method, path string, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, c.BaseURL+path, nil)
	if err != nil {
		return err
	}
	hc := c.HTTPClient
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		var eb ErrorBody
		json.Unmarshal(body, &eb)
		return &Error{StatusCode: resp.StatusCode, Message: eb.Error}
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(out); err != nil {
		return fmt.Errorf("admin API: bad answer to %s %s: %w", method, path, err)
	}
	return nil
}
