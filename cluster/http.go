package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
)

// The inter-node HTTP API, served by Handler on a member's admin address.
//
//	POST /cluster/v1/join    body: Member             add a node (any member; forwarded to the leader)
//	POST /cluster/v1/remove  body: {"id": "node-3"}   remove a member (a dead node; "planned": true for a leave)
//	POST /cluster/v1/apply   body: a log command      a member's write, forwarded to the leader
//	POST /cluster/v1/handoff body: handoffRequest     a prior owner's hand-off of moving names (handoff.go)
//	POST /cluster/v1/contact body: {"id": "node-2"}   a member's quorum contact, answered by the leader (contact.go)
//	GET  /cluster/v1/status                           this node's view: Status
//
// A write that reaches a follower is forwarded once to the leader, with
// the header Baton-Forwarded: 1; a node that receives a forwarded write
// and is not the leader answers 503 (retryable) instead of forwarding it
// again, so two nodes that disagree about the leader cannot loop. Errors
// are JSON {"error": "..."}; 503 means "retry, perhaps elsewhere".
const (
	pathJoin   = "/cluster/v1/join"
	pathRemove = "/cluster/v1/remove"
	pathApply  = "/cluster/v1/apply"
	pathStatus = "/cluster/v1/status"
	// pathHandoff: a prior owner's hand-off of moving names (handoff.go).
	pathHandoff = "/cluster/v1/handoff"

	// HeaderForwarded marks a request forwarded by a member.
	HeaderForwarded = "Baton-Forwarded"
)

const maxBody = 64 << 10

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
	ID                 string            `json:"id"`
	Leader             string            `json:"leader"`
	IsLeader           bool              `json:"is_leader"`
	RaftState          string            `json:"raft_state"`
	AppliedRingVersion uint64            `json:"applied_ring_version"`
	RingCommittedAt    time.Time         `json:"ring_committed_at"`
	Ring               []string          `json:"ring"`
	Members            []Member          `json:"members"`
	Epochs             map[string]uint64 `json:"epochs"`
	MaxLease           string            `json:"max_lease"`
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
}

// Status returns this node's view of the cluster.
func (n *Node) Status() Status {
	md, applied := n.fsm.read()
	_, leader := n.raft.LeaderWithID()
	self := n.self()
	self.State = md.Members[n.cfg.ID].State
	st := Status{
		ID: n.cfg.ID, Leader: string(leader), IsLeader: n.IsLeader(), RaftState: n.raft.State().String(),
		AppliedRingVersion: md.RingVersion, RingCommittedAt: md.RingCommittedAt, Ring: md.ring().Members(),
		Members: md.MemberList(), Epochs: md.Epochs, MaxLease: md.MaxLease.String(),
		Self: self, CommitIndex: n.raft.CommitIndex(), AppliedIndex: applied, Pending: md.Pending,
		QuorumContact: n.InContact(time.Now()), Removed: n.Removed(),
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
// admin listener to mount. It does no authentication of its own: mount it
// where only members and operators can reach it (mutual TLS when TLS is
// configured).
func (n *Node) Handler() http.Handler {
	mux := http.NewServeMux()
	for _, p := range []string{pathJoin, pathRemove, pathApply} {
		mux.HandleFunc("POST "+p, func(w http.ResponseWriter, r *http.Request) { n.serveWrite(w, r, p) })
	}
	mux.HandleFunc("POST "+pathHandoff, n.serveHandoff)
	mux.HandleFunc("POST "+pathContact, n.serveContact)
	mux.HandleFunc("GET "+pathStatus, func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, n.Status())
	})
	return mux
}

func (n *Node) serveWrite(w http.ResponseWriter, r *http.Request, path string) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	forwarded := r.Header.Get(HeaderForwarded) != ""
	var out applyReply
	var outp any
	if path == pathApply {
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
