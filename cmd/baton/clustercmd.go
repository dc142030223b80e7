package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/batonlock/baton/cluster"
	"github.com/batonlock/baton/internal/memberclient"
	"github.com/batonlock/baton/internal/tlsfiles"
	"github.com/batonlock/baton/protocol"
)

// 'baton cluster': the cluster's members and their health, and the
// removal of members, over the member API a cluster node serves on its
// admin listener (docs/cluster.md).

const clusterSynopsis = "baton cluster status|join|leave|remove|lease-ceiling [flags] [MEMBER_ADMIN|ID|DURATION]"

const clusterHelp = `
Subcommands, each asking the node whose admin API is --admin:

  status       the cluster as that node sees it: leader, ring version, and
               per member its addresses, state, and health (its own Raft
               state and applied ring version, asked of it directly;
               "unreachable" when it does not answer)
  join MEMBER_ADMIN
               add the node at --admin to the cluster of the member whose
               admin address is MEMBER_ADMIN, and wait until it serves:
               for a node started with -node-id but neither -bootstrap nor
               -join, which waits to be added
  leave        the node at --admin leaves the cluster (planned): out of
               the ring and of Raft; it keeps running, relaying to the
               remaining members
  remove ID    remove member ID: how a dead node's names get a live owner
               again (until then they are granted nowhere); a live node's
               claims on them are not handed over (not yet available)
  lease-ceiling DURATION
               refuse leases above DURATION on every node (0: no ceiling
               beyond each node's -max-lease); below the largest lease the
               cluster has recorded, it also lowers that lease, which
               bounds every take-over's warm-up, once every member has
               acknowledged that it has no session above it (--wait waits
               for that, within --timeout)

With TLS on the nodes, give --tls-ca, --tls-cert and --tls-key: every
request but status needs a certificate whose identity matches the nodes'
-cluster-identity (a node's own certificate will do); status also
accepts one the ACL grants the admin "read" action. When the nodes have
a -cluster-secret-file, join, leave and remove need the same secret:
--cluster-secret-file.

Exit status: 0 on success (join: also when the node already serves), 1
on a failure (lease-ceiling --wait: also when the lowering did not end
within --timeout or was cancelled), 2 on bad usage, 3 for an unknown
member.
`

// clusterSubcommands are the subcommands of 'baton cluster'.
var clusterSubcommands = []string{"status", "join", "leave", "remove", "lease-ceiling"}

type clusterCmdConfig struct {
	addr       string
	json       bool
	timeout    time.Duration
	tls        *tlsfiles.ClientFiles
	secretFile string
	wait       bool
}

func clusterFlags(sub string, stderr io.Writer) (*flagSet, *clusterCmdConfig) {
	cfg := &clusterCmdConfig{}
	fs := newFlagSet("baton cluster "+sub, clusterSynopsis, stderr)
	fs.StringVar(&cfg.addr, "admin", "BATON_ADMIN_ADDRESS", defaultAdminAddr, "admin API of a cluster node: host:port")
	fs.DurationVar(&cfg.timeout, "timeout", "BATON_ADMIN_TIMEOUT", 10*time.Second, "give up on the request after this long")
	cfg.tls = clientTLSFlags(fs)
	if sub == "status" {
		fs.BoolVar(&cfg.json, "json", "BATON_JSON", false, "print the node's JSON status instead of a table")
	} else {
		if sub == "lease-ceiling" {
			fs.BoolVar(&cfg.wait, "wait", "BATON_WAIT", false, "wait until the largest lease has come down to the ceiling")
		}
		fs.StringVar(&cfg.secretFile, "cluster-secret-file", "BATON_CLUSTER_SECRET_FILE", "", "file holding the cluster's shared secret, as the nodes' -cluster-secret-file: needed when the nodes have one")
	}
	return fs, cfg
}

func runCluster(args []string, stdout, stderr io.Writer) int {
	sub, usage, code := subcommand("cluster", clusterSynopsis, clusterHelp, clusterSubcommands, args, stdout, stderr)
	if code >= 0 {
		return code
	}
	fs, cfg := clusterFlags(sub, stderr)
	if code := fs.parseOrExit(args[1:], stdout, stderr); code >= 0 {
		if code == exitOK {
			fmt.Fprint(stdout, clusterHelp)
		}
		return code
	}
	pos, err := parseInterspersed(fs, args[1:])
	if err != nil {
		return usage("%v", strings.TrimSpace(err.Error()))
	}
	want, what := 0, ""
	switch sub {
	case "remove":
		want, what = 1, "ID"
	case "join":
		want, what = 1, "MEMBER_ADMIN"
	case "lease-ceiling":
		want, what = 1, "DURATION"
	}
	switch {
	case len(pos) < want:
		return usage("missing %s", what)
	case len(pos) > want:
		return usage("unexpected argument %q", pos[want])
	case cfg.timeout <= 0:
		return usage("--timeout must be positive, got %v", cfg.timeout)
	}
	if err := checkHostPort(cfg.addr); err != nil {
		return usage("--admin: %v", err)
	}
	if sub == "join" {
		if err := checkHostPort(pos[0]); err != nil {
			return usage("MEMBER_ADMIN: %v", err)
		}
	}
	var ceiling time.Duration
	if sub == "lease-ceiling" {
		if ceiling, err = parseLeaseCeiling(pos[0]); err != nil {
			return usage("DURATION: %v", err)
		}
	}
	if (cfg.tls.Cert == "") != (cfg.tls.Key == "") {
		return usage("--tls-cert and --tls-key go together")
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.timeout)
	defer cancel()
	cc := &memberclient.Client{TLS: cfg.tls}
	if cfg.secretFile != "" {
		if cc.Secret, _, err = memberclient.ReadSecret(cfg.secretFile); err != nil {
			fmt.Fprintf(stderr, "baton cluster %s: %v\n", sub, err)
			return exitError
		}
	}
	switch sub {
	case "status":
		err = clusterStatus(ctx, cc, cfg, stdout)
	case "join":
		err = clusterJoin(ctx, cc, cfg.addr, pos[0], stdout)
	case "leave":
		var st cluster.Status
		if st, err = cc.Status(ctx, cfg.addr); err == nil {
			err = cc.Post(ctx, cfg.addr, "/cluster/v1/remove", map[string]any{"id": st.ID, "planned": true})
			if err == nil {
				fmt.Fprintf(stdout, "%s left the cluster\n", st.ID)
			}
		}
	case "remove":
		err = cc.Post(ctx, cfg.addr, "/cluster/v1/remove", map[string]any{"id": pos[0]})
		if err == nil {
			fmt.Fprintf(stdout, "%s removed from the cluster\n", pos[0])
		}
	case "lease-ceiling":
		err = clusterLeaseCeiling(ctx, cc, cfg, ceiling, stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "baton cluster %s: %v\n", sub, err)
		if he, ok := err.(*memberclient.HTTPError); ok && he.Status == http.StatusNotFound {
			return exitAdminNotFound
		}
		return exitError
	}
	return exitOK
}

// clusterJoin asks the member at memberAddr to add the node at addr (its
// own record, as its status gives it), then waits until that node has
// applied its entry as a serving member.
func clusterJoin(ctx context.Context, cc *memberclient.Client, addr, memberAddr string, out io.Writer) error {
	st, err := cc.Status(ctx, addr)
	if err != nil {
		return err
	}
	if st.Self.State == cluster.Serving {
		fmt.Fprintf(out, "%s already serves in the cluster (ring version %d)\n", st.ID, st.AppliedRingVersion)
		return nil
	}
	if st.Self.ID == "" || st.Self.RaftAddr == "" {
		return fmt.Errorf("the node at %s did not give its own record (is it a cluster node of this version?)", addr)
	}
	if err := cc.Post(ctx, memberAddr, "/cluster/v1/join", st.Self); err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		st, err = cc.Status(ctx, addr)
		if err == nil && st.Self.State == cluster.Serving {
			fmt.Fprintf(out, "%s joined the cluster: ring version %d (%s)\n", st.ID, st.AppliedRingVersion, strings.Join(st.Ring, " "))
			return nil
		}
		t := time.NewTimer(min(10*time.Millisecond<<min(attempt, 5), 250*time.Millisecond))
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("added through %s, but %s does not serve yet: %w", memberAddr, st.ID, ctx.Err())
		case <-t.C:
		}
	}
}

// clusterStatus prints the view of the node at cfg.addr, with each
// member's own Raft state and applied ring version.
func clusterStatus(ctx context.Context, cc *memberclient.Client, cfg *clusterCmdConfig, out io.Writer) error {
	st, err := cc.Status(ctx, cfg.addr)
	if err != nil {
		return err
	}
	if cfg.json {
		return printJSON(out, st)
	}
	fmt.Fprintf(out, "node %s (asked), leader %s, ring version %d (%s)\n", st.ID, cell(st.Leader), st.AppliedRingVersion, strings.Join(st.Ring, " "))
	fmt.Fprintf(out, "cluster id %s, largest lease %s, lease ceiling %s", cell(st.ClusterID), st.MaxLease, cell(st.LeaseCeiling))
	if l := st.LeaseLowering; l != nil {
		fmt.Fprintf(out, ", lowering to %v acknowledged by %s", l.Target, cell(strings.Join(l.Acked, " ")))
	}
	fmt.Fprint(out, "\n\n")
	members := st.Members
	sort.Slice(members, func(i, j int) bool { return members[i].ID < members[j].ID })
	tw := newTable(out)
	fmt.Fprintln(tw, "ID\tSTATE\tPROTOCOL\tADMIN\tRAFT\tHEALTH")
	probes := memberclient.ProbeMembers(ctx, cc, members, false)
	for _, m := range members {
		health := "unreachable"
		if p := probes[m.ID]; p.Err == nil {
			health = fmt.Sprintf("%s, ring %d, epoch %d", p.Status.RaftState, p.Status.AppliedRingVersion, p.Status.Epochs[m.ID])
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", m.ID, m.State, cell(m.ProtocolAddr), cell(m.AdminAddr), cell(m.RaftAddr), health)
	}
	return tw.Flush()
}

// parseLeaseCeiling reads a ceiling: 0, or a lease the protocol can carry.
func parseLeaseCeiling(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	switch {
	case err != nil:
		return 0, err
	case d == 0:
		return 0, nil
	case protocol.ValidateLease(d) != nil || d%time.Millisecond != 0:
		return 0, fmt.Errorf("%v: want 0 or whole milliseconds from 1ms to 49 days", d)
	}
	return d, nil
}

// cell0 is a ceiling as Status shows it: "" for none.
func cell0(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return d.String()
}

// clusterLeaseCeiling sets the cluster's lease ceiling and, with --wait,
// waits until the largest lease recorded is within it.
func clusterLeaseCeiling(ctx context.Context, cc *memberclient.Client, cfg *clusterCmdConfig, ceiling time.Duration, out io.Writer) error {
	if err := cc.Post(ctx, cfg.addr, "/cluster/v1/lease-ceiling", map[string]any{"lease_ms": ceiling.Milliseconds()}); err != nil {
		return err
	}
	// The node asked may apply the entry a moment after the leader.
	var st cluster.Status
	for {
		var err error
		if st, err = cc.Status(ctx, cfg.addr); err != nil {
			return err
		}
		if st.LeaseCeiling == cell0(ceiling) {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the ceiling was committed but %s has not applied it: %w", st.ID, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	if ceiling == 0 {
		fmt.Fprintf(out, "no lease ceiling beyond each node's -max-lease; largest lease recorded %s\n", st.MaxLease)
		return nil
	}
	fmt.Fprintf(out, "leases above %v are refused; largest lease recorded %s\n", ceiling, st.MaxLease)
	if st.LeaseLowering == nil || !cfg.wait {
		if st.LeaseLowering != nil {
			fmt.Fprintf(out, "it comes down to %v once every member has acknowledged: see 'baton cluster status'\n", ceiling)
		}
		return nil
	}
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("the largest lease is still %s; acknowledged by %v (--timeout): sessions with a longer lease, or a warm-up, hold it up", st.MaxLease, st.LeaseLowering.Acked)
		case <-time.After(200 * time.Millisecond):
		}
		next, err := cc.Status(ctx, cfg.addr)
		if err != nil {
			continue
		}
		if st = next; st.LeaseLowering == nil {
			if d, err := time.ParseDuration(st.MaxLease); err == nil && d <= ceiling {
				fmt.Fprintf(out, "largest lease lowered to %s\n", st.MaxLease)
				return nil
			}
			return fmt.Errorf("the lowering was cancelled (a member was removed before it acknowledged, or the ceiling was set again); the largest lease is %s", st.MaxLease)
		}
	}
}
