package cluster

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"
)

// The inter-node HTTP API (/cluster/v1/...), served by Handler on a
// member's admin address: join, remove, epoch, lease, handed, handoff and
// contact writes, and the status and cluster reads. Each write is one
// typed operation, decoded strictly; every POST must be application/json
// and carry the cluster's secret when it has one (401 without, 403 with
// another). A write that reaches a follower is forwarded once to the
// leader (Baton-Forwarded: 1), never twice; 503 means retry elsewhere.
// The endpoints and their bodies:
// docs/design/2026-12-07-security.md#clusterhttpgo.
const (
	pathJoin   = "/cluster/v1/join"
	pathRemove = "/cluster/v1/remove"
	pathEpoch  = "/cluster/v1/epoch"
	pathLease  = "/cluster/v1/lease"
	pathHanded = "/cluster/v1/handed"
	// pathLeaseCeiling: an operator's ceiling on leases (leasebound.go);
	// pathLeaseAck: a member's acknowledgement of a lowering.
	pathLeaseCeiling = "/cluster/v1/lease-ceiling"
	pathLeaseAck     = "/cluster/v1/lease-ack"
	pathStatus       = "/cluster/v1/status"
	// pathHandoff: a prior owner's hand-off of moving names (handoff.go).
	pathHandoff = "/cluster/v1/handoff"

	// HeaderForwarded marks a request forwarded by a member.
	HeaderForwarded = "Baton-Forwarded"
)

// The reasons of a refusal by Handler, as Config.OnRefused receives them.
const (
	// RefusedSecret: a POST without the cluster's secret, or with
	// another (401, 403).
	RefusedSecret = "secret"
	// RefusedContentType: a POST whose body is not application/json
	// (415).
	RefusedContentType = "content_type"
	// RefusedInvalid: a write whose body is not a valid operation (400).
	RefusedInvalid = "invalid"
)

const maxBody = 64 << 10

// maxMemberID bounds a member id, as a lock name is bounded.
const maxMemberID = 255

// SecretToken is what a request carries for secret: the hex SHA-256 of
// it, so that a secret file may hold any bytes and its content never
// appears in a header as it is.
func SecretToken(secret []byte) string {
	sum := sha256.Sum256(secret)
	return hex.EncodeToString(sum[:])
}

// SetRequestSecret makes req carry secret (Authorization: Bearer,
// SecretToken); nothing for an empty secret.
func SetRequestSecret(req *http.Request, secret []byte) {
	if len(secret) > 0 {
		req.Header.Set("Authorization", "Bearer "+SecretToken(secret))
	}
}

// secrets are a node's cluster secrets: the token its requests carry
// and the tokens its Handler accepts (none: no secret).
type secrets struct {
	send   []byte
	accept [][]byte
}

// SetSecret replaces the cluster secret (Config.Secret) and the old ones
// still accepted (Config.OldSecrets), for the requests that follow: a
// secret is changed without a restart by giving every node the new one
// as an old one first, then as the secret, then alone. An empty secret
// turns the check off.
func (n *Node) SetSecret(secret []byte, old ...[]byte) {
	s := &secrets{}
	if len(secret) > 0 {
		s.send = []byte(SecretToken(secret))
		s.accept = append(s.accept, s.send)
		for _, o := range old {
			if len(o) > 0 {
				s.accept = append(s.accept, []byte(SecretToken(o)))
			}
		}
	}
	n.secrets.Store(s)
}

// epochRequest is the body of POST /cluster/v1/epoch.
type epochRequest struct {
	ID string `json:"id"`
}

// leaseRequest is the body of POST /cluster/v1/lease.
type leaseRequest struct {
	LeaseMS uint64 `json:"lease_ms"`
}

// leaseCeilingRequest is the body of POST /cluster/v1/lease-ceiling
// (0: no ceiling).
type leaseCeilingRequest struct {
	LeaseMS uint64 `json:"lease_ms"`
}

// leaseAckRequest is the body of POST /cluster/v1/lease-ack.
type leaseAckRequest struct {
	ID       string `json:"id"`
	TargetMS uint64 `json:"target_ms"`
}

// handedRequest is the body of POST /cluster/v1/handed.
type handedRequest struct {
	ID      string `json:"id"`
	Version uint64 `json:"version"`
}

type removeRequest struct {
	ID string `json:"id"`
	// Planned marks a member's own leave: it is marked leaving first.
	Planned bool `json:"planned,omitempty"`
	// Stop (with Planned) keeps the member a voter, out of the ring,
	// marked stopped (Node.Stop).
	Stop bool `json:"stop,omitempty"`
}

type applyReply struct {
	applyResult
	Index uint64 `json:"index"`
}

// httpError is a non-200 answer of another member's Handler.
type httpError struct {
	Status int
	Msg    string
}

func (e *httpError) Error() string { return fmt.Sprintf("%s (HTTP %d)", e.Msg, e.Status) }

// Status is a node's view of the cluster, as GET /cluster/v1/status
// returns it.
type Status struct {
	ID string `json:"id"`
	// ClusterID is the id of the cluster this node belongs to (drawn
	// when it was formed; "" before it belongs to one, or for a cluster
	// formed before cluster ids existed).
	ClusterID          string            `json:"cluster_id,omitempty"`
	Leader             string            `json:"leader"`
	IsLeader           bool              `json:"is_leader"`
	RaftState          string            `json:"raft_state"`
	AppliedRingVersion uint64            `json:"applied_ring_version"`
	RingCommittedAt    time.Time         `json:"ring_committed_at"`
	Ring               []string          `json:"ring"`
	Members            []Member          `json:"members"`
	Epochs             map[string]uint64 `json:"epochs"`
	MaxLease           string            `json:"max_lease"`
	// LeaseCeiling is the operator's ceiling on leases ("" for none);
	// LeaseLowering the lowering of MaxLease to it in progress, if any.
	LeaseCeiling  string         `json:"lease_ceiling,omitempty"`
	LeaseLowering *LeaseLowering `json:"lease_lowering,omitempty"`
	// Unreachable lists, on the leader, members it cannot heartbeat.
	Unreachable []string `json:"unreachable,omitempty"`
	// Self is this node's own record as it would join with it (its
	// state is what the applied metadata says, "" before it is a
	// member): what 'baton cluster join' sends to a member.
	Self Member `json:"self"`
	// CommitIndex is the last Raft log index this node knows committed;
	// AppliedIndex the last it has applied to its metadata.
	CommitIndex  uint64 `json:"commit_index"`
	AppliedIndex uint64 `json:"applied_index"`
	// Pending is the planned change in progress, if any.
	Pending *Pending `json:"pending,omitempty"`
	// QuorumContact tells whether this node is in contact with its
	// quorum and serves; ContactAge is how old its latest contact is
	// (the send time of its latest request the leader answered); Removed
	// that it applied its own removal (contact.go).
	QuorumContact bool   `json:"quorum_contact"`
	ContactAge    string `json:"contact_age,omitempty"`
	Removed       bool   `json:"removed,omitempty"`
	// MixedState tells that another cluster's log entries were applied
	// on top of this node's own (Node.Mixed): it serves nothing.
	MixedState bool `json:"mixed_state,omitempty"`
}

// Status returns this node's view of the cluster.
func (n *Node) Status() Status {
	md, applied := n.fsm.read()
	_, leader := n.raft.LeaderWithID()
	self := n.self()
	self.State = md.Members[n.cfg.ID].State
	st := Status{
		ID: n.cfg.ID, ClusterID: md.ClusterID, Leader: string(leader), IsLeader: n.IsLeader(), RaftState: n.raft.State().String(),
		AppliedRingVersion: md.RingVersion, RingCommittedAt: md.RingCommittedAt, Ring: md.ring().Members(),
		Members: md.MemberList(), Epochs: md.Epochs, MaxLease: md.MaxLease.String(), LeaseLowering: md.Lowering,
		Self: self, CommitIndex: n.raft.CommitIndex(), AppliedIndex: applied, Pending: md.Pending,
		QuorumContact: n.InContact(time.Now()), Removed: n.Removed(), MixedState: n.Mixed(),
	}
	if md.Ceiling > 0 {
		st.LeaseCeiling = md.Ceiling.String()
	}
	if age := n.ContactAge(); age >= 0 {
		st.ContactAge = age.Round(time.Millisecond).String()
	}
	for id := range n.Unreachable() {
		st.Unreachable = append(st.Unreachable, id)
	}
	return st
}

// Handler returns the inter-node HTTP API (see the paths above), for the
// admin listener to mount. It refuses a POST that is not JSON, and one
// without the cluster's secret when it has one; the admin listener's
// server adds its Host check and cross-origin protection, and, with TLS,
// the certificate check of the members' identity.
func (n *Node) Handler() http.Handler {
	mux := http.NewServeMux()
	for _, p := range []string{pathJoin, pathRemove, pathEpoch, pathLease, pathHanded, pathLeaseCeiling, pathLeaseAck} {
		mux.HandleFunc("POST "+p, func(w http.ResponseWriter, r *http.Request) { n.serveWrite(w, r, p) })
	}
	mux.HandleFunc("POST "+pathHandoff, n.serveHandoff)
	mux.HandleFunc("POST "+pathContact, n.serveContact)
	mux.HandleFunc("GET "+pathStatus, func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, n.Status())
	})
	mux.HandleFunc("GET "+pathCluster, func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, n.Belongs())
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		write := r.Method != http.MethodGet && r.Method != http.MethodHead
		// The answer to "do you belong to a cluster" decides whether a
		// node forms one: only members (with the secret) may ask.
		if write || r.URL.Path == pathCluster {
			if status, msg := n.checkSecret(r); status != 0 {
				n.refused(RefusedSecret)
				n.log.Warn("member API: request refused: "+msg, "path", r.URL.Path, "remote_addr", r.RemoteAddr)
				writeJSON(w, status, map[string]string{"error": msg})
				return
			}
		}
		if write {
			if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
				n.refused(RefusedContentType)
				writeJSON(w, http.StatusUnsupportedMediaType, map[string]string{"error": "the member API takes only Content-Type: application/json"})
				return
			}
		}
		mux.ServeHTTP(w, r)
	})
}

// checkSecret returns 0 when r carries the cluster's secret (or the
// cluster has none), else the status and message of the refusal.
func (n *Node) checkSecret(r *http.Request) (int, string) {
	s := n.secrets.Load()
	if len(s.accept) == 0 {
		return 0, ""
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || got == "" {
		return http.StatusUnauthorized, "the member API needs the cluster's secret (-cluster-secret-file)"
	}
	match := 0
	for _, a := range s.accept { // every one compared, in constant time
		match |= subtle.ConstantTimeCompare([]byte(got), a)
	}
	if match != 1 {
		return http.StatusForbidden, "wrong cluster secret (-cluster-secret-file)"
	}
	return 0, ""
}

// refused counts a refusal (Config.OnRefused).
func (n *Node) refused(reason string) {
	if f := n.cfg.OnRefused; f != nil {
		f(reason)
	}
}

// decodeStrict decodes one JSON value into v, refusing unknown fields
// and anything after the value.
func decodeStrict(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("data after the JSON value")
	}
	return nil
}

// checkID checks a member id.
func checkID(id string) error {
	switch {
	case id == "":
		return errors.New("an empty member id")
	case len(id) > maxMemberID:
		return fmt.Errorf("a member id longer than %d bytes", maxMemberID)
	case strings.ContainsFunc(id, func(r rune) bool { return r < 0x21 || r == 0x7f }):
		return fmt.Errorf("member id %q has spaces or control characters", id)
	}
	return nil
}

// checkAddr checks a member's address: host:port, or empty when
// optional.
func checkAddr(what, addr string, optional bool) error {
	if addr == "" && optional {
		return nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host == "" || port == "" || len(addr) > 300 {
		return fmt.Errorf("%s %q: want host:port", what, addr)
	}
	return nil
}

// parseWrite decodes and checks the body of the write at path: a
// Member (join), removeRequest, epochRequest, leaseRequest or
// handedRequest. Its errors are the client's (400).
func parseWrite(path string, body []byte) (any, error) {
	switch path {
	case pathJoin:
		var m Member
		if err := decodeStrict(body, &m); err != nil {
			return nil, fmt.Errorf("a join needs a member with id and raft_addr: %w", err)
		}
		if err := errors.Join(checkID(m.ID), checkAddr("raft_addr", m.RaftAddr, false),
			checkAddr("protocol_addr", m.ProtocolAddr, true), checkAddr("admin_addr", m.AdminAddr, true)); err != nil {
			return nil, fmt.Errorf("a join needs a member with id and raft_addr: %w", err)
		}
		return m, nil
	case pathRemove:
		var r removeRequest
		if err := decodeStrict(body, &r); err != nil || r.ID == "" {
			return nil, fmt.Errorf("a removal needs an id (%v)", err)
		}
		return r, nil
	case pathEpoch:
		var e epochRequest
		if err := decodeStrict(body, &e); err != nil {
			return nil, fmt.Errorf("an epoch request needs a member id: %w", err)
		}
		if err := checkID(e.ID); err != nil {
			return nil, fmt.Errorf("an epoch request needs a member id: %w", err)
		}
		return e, nil
	case pathLease:
		var l leaseRequest
		if err := decodeStrict(body, &l); err != nil {
			return nil, fmt.Errorf("a lease needs lease_ms: %w", err)
		}
		if l.LeaseMS == 0 || l.LeaseMS > math.MaxUint32 {
			return nil, fmt.Errorf("lease_ms %d out of range: from 1 to %d (the protocol's largest lease)", l.LeaseMS, uint64(math.MaxUint32))
		}
		return l, nil
	case pathLeaseCeiling:
		var l leaseCeilingRequest
		if err := decodeStrict(body, &l); err != nil {
			return nil, fmt.Errorf("a lease ceiling needs lease_ms: %w", err)
		}
		if l.LeaseMS > math.MaxUint32 {
			return nil, fmt.Errorf("lease_ms %d out of range: from 0 (no ceiling) to %d (the protocol's largest lease)", l.LeaseMS, uint64(math.MaxUint32))
		}
		return l, nil
	case pathLeaseAck:
		var a leaseAckRequest
		if err := decodeStrict(body, &a); err != nil || checkID(a.ID) != nil || a.TargetMS == 0 || a.TargetMS > math.MaxUint32 {
			return nil, fmt.Errorf("a lease acknowledgement needs id and target_ms (%v)", err)
		}
		return a, nil
	case pathHanded:
		var h handedRequest
		if err := decodeStrict(body, &h); err != nil || h.Version == 0 || checkID(h.ID) != nil {
			return nil, fmt.Errorf("a hand-off record needs id and version (%v)", err)
		}
		return h, nil
	}
	return nil, fmt.Errorf("no such write %s", path)
}

func (n *Node) serveWrite(w http.ResponseWriter, r *http.Request, path string) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err == nil {
		// Checked here too, not only on the leader: a bad write is
		// refused where it arrives, and never forwarded.
		_, err = parseWrite(path, body)
	}
	if err != nil {
		n.refused(RefusedInvalid)
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	forwarded := r.Header.Get(HeaderForwarded) != ""
	var out applyReply
	var outp any
	if hasReply(path) {
		outp = &out
	}
	switch {
	case n.IsLeader():
		err = n.leaderDo(r.Context(), path, body, outp)
	case forwarded:
		err = ErrNotLeader
	default:
		if m, ok := n.Leader(); ok && m.AdminAddr != "" {
			err = n.post(r.Context(), m.AdminAddr, path, body, true, outp)
		} else {
			err = ErrNoLeader
		}
	}
	if err != nil {
		status := http.StatusInternalServerError
		var he *httpError
		switch {
		case errors.As(err, &he):
			status = he.Status
			err = errors.New(he.Msg)
		case retryable(err):
			status = http.StatusServiceUnavailable
		}
		writeJSON(w, status, map[string]string{"error": err.Error()})
		return
	}
	if outp != nil {
		writeJSON(w, http.StatusOK, out)
		return
	}
	writeJSON(w, http.StatusOK, struct{}{})
}

// hasReply tells the writes that answer an applyReply: those that become
// one log entry.
func hasReply(path string) bool {
	return path == pathEpoch || path == pathLease || path == pathHanded || path == pathLeaseCeiling || path == pathLeaseAck
}

// opCommand checks a typed write against the applied metadata, on the
// leader, and returns its log entry.
func (n *Node) opCommand(op any) (command, error) {
	md, _ := n.fsm.read()
	switch op := op.(type) {
	case epochRequest:
		if _, ok := md.Members[op.ID]; !ok {
			return command{}, &httpError{Status: http.StatusNotFound, Msg: ErrUnknownMember.Error() + ": " + op.ID}
		}
		return command{Op: opEpoch, ID: op.ID}, nil
	case leaseRequest:
		return command{Op: opRaiseLease, Lease: time.Duration(op.LeaseMS) * time.Millisecond}, nil
	case leaseCeilingRequest:
		return command{Op: opLeaseCeiling, Lease: time.Duration(op.LeaseMS) * time.Millisecond}, nil
	case leaseAckRequest:
		target := time.Duration(op.TargetMS) * time.Millisecond
		if l := md.Lowering; l == nil || l.Target != target {
			return command{}, &httpError{Status: http.StatusConflict, Msg: fmt.Sprintf("no lowering of the largest lease to %v is in progress", target)}
		}
		if _, ok := md.Members[op.ID]; !ok {
			return command{}, &httpError{Status: http.StatusNotFound, Msg: ErrUnknownMember.Error() + ": " + op.ID}
		}
		return command{Op: opLeaseAck, ID: op.ID, Lease: target}, nil
	case handedRequest:
		p := md.Pending
		if p == nil || p.Version != op.Version {
			return command{}, &httpError{Status: http.StatusConflict, Msg: fmt.Sprintf("ring version %d is not pending", op.Version)}
		}
		if !slices.Contains(p.Prior, op.ID) {
			return command{}, &httpError{Status: http.StatusConflict, Msg: fmt.Sprintf("%s is no prior owner of ring version %d", op.ID, op.Version)}
		}
		return command{Op: opHanded, ID: op.ID, Version: op.Version}, nil
	}
	return command{}, fmt.Errorf("cluster: no log entry for %T", op)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// post sends a write to another member's Handler at addr.
func (n *Node) post(ctx context.Context, addr, path string, body []byte, forwarded bool, out any) error {
	return n.do(ctx, http.MethodPost, addr, path, body, forwarded, out)
}

// do sends a request to another member's Handler at addr.
func (n *Node) do(ctx context.Context, method, addr, path string, body []byte, forwarded bool, out any) error {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, n.cfg.Scheme+"://"+addr+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if forwarded {
		req.Header.Set(HeaderForwarded, "1")
	}
	if t := n.secrets.Load().send; t != nil {
		req.Header.Set("Authorization", "Bearer "+string(t))
	}
	resp, err := n.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error string `json:"error"`
		}
		_ = json.Unmarshal(data, &e)
		if e.Error == "" {
			e.Error = http.StatusText(resp.StatusCode)
		}
		return &httpError{Status: resp.StatusCode, Msg: e.Error}
	}
	if out != nil {
		return json.Unmarshal(data, out)
	}
	return nil
}
