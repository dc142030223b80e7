package main

import (
	"cmp"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/batonlock/baton/admin"
	"github.com/batonlock/baton/internal/tlsfiles"
	"github.com/batonlock/baton/protocol"
)

// exitAdminNotFound is the exit status of the admin subcommands for an
// unknown lock or waiter, so scripts can tell "nothing to do" from a
// failure.
const exitAdminNotFound = 3

const adminHelp = `
Talks to the admin API of a running 'baton serve -admin-listen ADDR'.
Flags may come before or after the arguments; use -- before a lock name
that starts with '-'.

Exit status:
  0  success
  1  error: server unreachable, bad answer, timeout
  2  usage error (bad flag, missing or extra argument)
  3  not found: the lock is not held, or has no such waiter
`

// adminCommand describes one admin subcommand.
type adminCommand struct {
	name    string
	args    []string // names of the positional arguments
	summary string
	match   bool // has --match
	holder  bool // has --token and --claim (release)
	owned   bool // its first argument is a name: a cluster node's owner of it is asked
	run     func(ctx context.Context, c *admin.Client, cfg *adminConfig, args []string, out io.Writer) error
}

type adminConfig struct {
	addr    string
	json    bool
	timeout time.Duration
	match   string
	token   string // release: the holder granted this token
	claim   string // release: the holder SESSION/CLAIM
	tls     *tlsfiles.ClientFiles
}

// newAdminClient connects the admin client to --admin, over HTTPS when a
// --tls-* flag is given (the server serves its admin API with its TLS
// certificate when it has one).
func newAdminClient(cfg *adminConfig) (*admin.Client, error) {
	addr := cfg.addr
	tlsCfg, err := clientTLSConfig(cfg.tls, strings.TrimPrefix(strings.TrimPrefix(addr, "https://"), "http://"))
	if err != nil {
		return nil, err
	}
	if tlsCfg != nil && !strings.Contains(addr, "://") {
		addr = "https://" + addr
	}
	client, err := admin.NewClient(addr)
	if err != nil {
		return nil, fmt.Errorf("--admin: %v", err)
	}
	if u, err := url.Parse(client.BaseURL); err == nil {
		if err := checkHostPort(u.Host); err != nil {
			return nil, fmt.Errorf("--admin: %v", err)
		}
	}
	if tlsCfg != nil {
		client.HTTPClient = &http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg}}
	}
	return client, nil
}

func adminCommands() []adminCommand {
	return []adminCommand{
		{name: "locks", summary: "list held locks and their queues", match: true, run: cmdLocks},
		{name: "show", args: []string{"NAME"}, summary: "show a lock's holder and waiters", owned: true, run: cmdLock},
		{name: "release", args: []string{"NAME"}, summary: "force-release a lock, or one holder with --token or --claim (version 1: ERROR 0x02; version 2: REVOKED 0x02, the session lives on)", holder: true, owned: true, run: cmdRelease},
		{name: "kick", args: []string{"NAME", "WAITER"}, summary: "remove a waiter from a lock's queue: WAITER is a remote address (the first waiter from it) or SESSION/CLAIM as 'baton show' lists it", owned: true, run: cmdKick},
		{name: "info", summary: "show server version, uptime, configuration and counts", run: cmdInfo},
		{name: "ranges", summary: "list byte-range (fcntl) and flock locks by key: holders and waiting requests", match: true, run: cmdRanges},
		{name: "release-ranges", args: []string{"KEY", "OWNER"}, summary: "release the range locks of OWNER (SESSION/OWNER, as 'baton ranges' lists it) on KEY; its session is ended with ERROR 0x02", owned: true, run: cmdReleaseRanges},
	}
}

func adminCommandNamed(name string) adminCommand {
	for _, c := range adminCommands() {
		if c.name == name {
			return c
		}
	}
	panic("no admin command " + name)
}

func runLocks(args []string, stdout, stderr io.Writer) int {
	return runAdmin(adminCommandNamed("locks"), args, stdout, stderr)
}

func runShow(args []string, stdout, stderr io.Writer) int {
	return runAdmin(adminCommandNamed("show"), args, stdout, stderr)
}

// runLock is 'baton lock', the old name of 'baton show': users of
// 'etcdctl lock NAME' and 'consul lock' type it to take a lock, so it
// says what it does now and points them to 'baton run'.
func runLock(args []string, stdout, stderr io.Writer) int {
	for i, a := range args {
		if a == "--" && i > 0 && i+1 < len(args) && !strings.HasPrefix(args[i-1], "-") {
			fmt.Fprintln(stderr, "baton lock: to run a command while holding a lock, use 'baton run NAME -- COMMAND'")
			return exitUsage
		}
	}
	fmt.Fprintln(stderr, "baton lock: deprecated, use 'baton show NAME' (it shows a lock; 'baton run' takes one)")
	return runShow(args, stdout, stderr)
}

func runRelease(args []string, stdout, stderr io.Writer) int {
	return runAdmin(adminCommandNamed("release"), args, stdout, stderr)
}

func runKick(args []string, stdout, stderr io.Writer) int {
	return runAdmin(adminCommandNamed("kick"), args, stdout, stderr)
}

func runInfo(args []string, stdout, stderr io.Writer) int {
	return runAdmin(adminCommandNamed("info"), args, stdout, stderr)
}

func runRanges(args []string, stdout, stderr io.Writer) int {
	return runAdmin(adminCommandNamed("ranges"), args, stdout, stderr)
}

func runReleaseRanges(args []string, stdout, stderr io.Writer) int {
	return runAdmin(adminCommandNamed("release-ranges"), args, stdout, stderr)
}

func adminFlags(ac adminCommand, stderr io.Writer) (*flagSet, *adminConfig) {
	cfg := &adminConfig{}
	synopsis := "baton " + ac.name + " [flags]"
	if len(ac.args) > 0 {
		synopsis += " " + strings.Join(ac.args, " ")
	}
	fs := newFlagSet("baton "+ac.name, synopsis, stderr)
	fs.StringVar(&cfg.addr, "admin", "BATON_ADMIN_ADDRESS", defaultAdminAddr, "admin API of the server: host:port or http(s)://host:port")
	fs.BoolVar(&cfg.json, "json", "BATON_JSON", false, "print the API's JSON answer instead of a table")
	fs.DurationVar(&cfg.timeout, "timeout", "BATON_ADMIN_TIMEOUT", 10*time.Second, "give up on the request after this long")
	cfg.tls = clientTLSFlags(fs)
	if ac.holder {
		fs.StringVar(&cfg.token, "token", "BATON_RELEASE_TOKEN", "", "release only the holder granted this fencing token (a shared or semaphore lock has several)")
		fs.StringVar(&cfg.claim, "claim", "BATON_RELEASE_CLAIM", "", "release only the holder SESSION/CLAIM, as 'baton show' lists it")
	}
	if ac.match {
		fs.StringVar(&cfg.match, "match", "BATON_LOCKS_MATCH", "", "only locks whose whole name matches this glob: '*' any run of characters (also '/'), '?' one character")
	}
	return fs, cfg
}

func runAdmin(ac adminCommand, args []string, stdout, stderr io.Writer) int {
	fs, cfg := adminFlags(ac, stderr)
	usage := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "baton %s: "+format+"\n", append([]any{ac.name}, a...)...)
		fmt.Fprintf(stderr, "Run 'baton %s -h' for usage.\n", ac.name)
		return exitUsage
	}
	help := func() int {
		fs.printUsage(stdout)
		fmt.Fprint(stdout, adminHelp)
		return exitOK
	}
	if code := fs.parseOrExit(args, stdout, stderr); code >= 0 {
		if code == exitOK {
			fmt.Fprint(stdout, adminHelp)
		}
		return code
	}
	pos, err := parseInterspersed(fs, args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return help()
	case err != nil:
		return usage("%v", strings.TrimSpace(err.Error()))
	case len(pos) < len(ac.args):
		return usage("missing %s", ac.args[len(pos)])
	case len(pos) > len(ac.args):
		return usage("unexpected argument %q", pos[len(ac.args)])
	case cfg.timeout <= 0:
		return usage("--timeout must be positive, got %v", cfg.timeout)
	}
	if cfg.token != "" {
		if t, err := strconv.ParseUint(cfg.token, 10, 64); err != nil || t == 0 {
			return usage("--token %q: want a positive decimal number", cfg.token)
		}
	}
	if cfg.claim != "" {
		if _, _, err := admin.ParseClaimRef(cfg.claim); err != nil {
			return usage("--claim: %v", err)
		}
	}
	switch {
	case ac.name == "release-ranges":
		// A range key is any 1 to 255 bytes, not only UTF-8.
		if n := len(pos[0]); n == 0 || n > protocol.MaxNameLen {
			return usage("key %q: want 1 to %d bytes", pos[0], protocol.MaxNameLen)
		}
		if _, _, err := admin.ParseRangeOwner(pos[1]); err != nil {
			return usage("%v", err)
		}
	case len(pos) > 0:
		if err := protocol.ValidateName(pos[0]); err != nil {
			return usage("lock name %q: %v", pos[0], err)
		}
	}
	client, err := newAdminClient(cfg)
	if err != nil {
		return usage("%v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.timeout)
	defer cancel()
	if ac.owned {
		client, err = ownerClient(ctx, client, cfg, ac.name, pos[0], stderr)
	}
	if err == nil {
		err = ac.run(ctx, client, cfg, pos, stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "baton %s: %v\n", ac.name, err)
		switch {
		case errors.Is(err, admin.ErrNotFound):
			return exitAdminNotFound
		case errors.Is(err, syscall.ECONNREFUSED):
			fmt.Fprintf(stderr, "Is 'baton serve -admin-listen %s' running? Set --admin or BATON_ADMIN_ADDRESS to its address.\n", cfg.addr)
		default:
			if hint := adminAddrHint(client, cfg); hint != "" {
				fmt.Fprintln(stderr, hint)
			}
		}
		return exitError
	}
	return exitOK
}

// ownerClient returns the admin client of the node that owns name when
// client calls a cluster node that does not: only the owner has the
// name's holders and queue, and any other node would answer that it is
// not held. A server that is not a cluster node is asked itself.
func ownerClient(ctx context.Context, client *admin.Client, cfg *adminConfig, cmd, name string, stderr io.Writer) (*admin.Client, error) {
	if protocol.ValidateName(name) != nil {
		return client, nil // a range key that is no lock name: the node asked cannot look it up
	}
	o, err := client.Owner(ctx, name)
	switch {
	case errors.Is(err, admin.ErrNotFound): // not a cluster node
		return client, nil
	case err != nil:
		return nil, fmt.Errorf("asking which node owns %q: %w", name, err)
	case o.Owner == nil:
		return nil, fmt.Errorf("the node has applied no ring yet, so it cannot tell which node owns %q; try again", name)
	case o.Owner.Self:
		return client, nil
	case o.Owner.AdminAddr == "":
		return nil, fmt.Errorf("%q is owned by node %s, which has no admin API (-admin-listen)", name, o.Owner.ID)
	}
	oc, err := memberClient(client, cfg, *o.Owner)
	if err != nil {
		return nil, fmt.Errorf("the admin API of node %s, which owns %q: %w", o.Owner.ID, name, err)
	}
	fmt.Fprintf(stderr, "baton %s: %q is owned by node %s; asking its admin API at %s\n", cmd, name, o.Owner.ID, o.Owner.AdminAddr)
	return oc, nil
}

// memberClient returns an admin client for cluster member m, with the
// scheme and TLS settings of client.
func memberClient(client *admin.Client, cfg *adminConfig, m admin.ClusterMember) (*admin.Client, error) {
	if m.Self {
		return client, nil
	}
	mc := *cfg
	mc.addr = m.AdminAddr
	if u, err := url.Parse(client.BaseURL); err == nil && u.Scheme == "https" {
		mc.addr = "https://" + mc.addr
	}
	return newAdminClient(&mc)
}

// eachNode calls visit with the admin client of every node of the ring
// when client calls a cluster node (each lists only the names or keys it
// owns), or with client alone, node "", on a single server. A node that
// fails is reported in the error, after the others are visited.
func eachNode(ctx context.Context, client *admin.Client, cfg *adminConfig, visit func(node string, c *admin.Client) error) (clustered bool, err error) {
	st, err := client.Cluster(ctx)
	if errors.Is(err, admin.ErrNotFound) { // a single server
		return false, visit("", client)
	}
	if err != nil {
		return true, fmt.Errorf("reading the cluster's members: %w", err)
	}
	var errs []error
	for _, m := range st.Members {
		if !slices.Contains(st.Ring, m.ID) {
			continue // owns no names
		}
		err := errors.New("no admin API (-admin-listen)")
		if m.AdminAddr != "" || m.Self {
			var mc *admin.Client
			if mc, err = memberClient(client, cfg, m); err == nil {
				err = visit(m.ID, mc)
			}
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("node %s at %s: %w", m.ID, m.AdminAddr, err))
		}
	}
	return true, errors.Join(errs...)
}

// listLocks returns the locks of client's server, or of every node of
// its cluster, each with its Node, in name order.
func listLocks(ctx context.Context, client *admin.Client, cfg *adminConfig) ([]admin.Lock, bool, error) {
	var all []admin.Lock
	clustered, err := eachNode(ctx, client, cfg, func(node string, c *admin.Client) error {
		locks, err := c.Locks(ctx, cfg.match)
		for i := range locks {
			locks[i].Node = node
		}
		all = append(all, locks...)
		return err
	})
	slices.SortFunc(all, func(a, b admin.Lock) int { return strings.Compare(a.Name, b.Name) })
	return all, clustered, err
}

// listRanges returns the range locks of client's server, or of every
// node of its cluster, each key with its Node, in key order.
func listRanges(ctx context.Context, client *admin.Client, cfg *adminConfig) (admin.RangeList, bool, error) {
	var all admin.RangeList
	clustered, err := eachNode(ctx, client, cfg, func(node string, c *admin.Client) error {
		list, err := c.Ranges(ctx, cfg.match)
		for i := range list.Ranges {
			list.Ranges[i].Node = node
		}
		all.Ranges = append(all.Ranges, list.Ranges...)
		all.Total += list.Total
		if all.SnapshotAt.IsZero() {
			all.SnapshotAt = list.SnapshotAt
		}
		return err
	})
	slices.SortFunc(all.Ranges, func(a, b admin.RangeKey) int {
		return cmp.Or(strings.Compare(a.Key, b.Key), strings.Compare(a.Namespace, b.Namespace))
	})
	if all.Ranges == nil {
		all.Ranges = []admin.RangeKey{}
	}
	return all, clustered, err
}

// parseInterspersed parses the flags that follow positional arguments
// (the flag package stops at the first one) and returns the positional
// arguments. After "--" everything is positional.
// args are the arguments of the first parse, already done.
func parseInterspersed(fs *flagSet, args []string) ([]string, error) {
	fs.SetOutput(io.Discard)
	defer fs.SetOutput(nil)
	var pos []string
	rest := fs.Args()
	if terminated(args, rest) {
		return rest, nil
	}
	for len(rest) > 0 {
		pos = append(pos, rest[0])
		in := rest[1:]
		if err := fs.FlagSet.Parse(in); err != nil {
			return nil, err
		}
		rest = fs.Args()
		if terminated(in, rest) {
			return append(pos, rest...), nil
		}
	}
	return pos, nil
}

// terminated reports whether parsing in stopped at "--", leaving rest.
func terminated(in, rest []string) bool {
	used := len(in) - len(rest)
	return used > 0 && in[used-1] == "--"
}

// cmdLocks lists the locks, on a cluster those of every node with a
// NODE column. When a node did not answer, the others' locks are
// printed and the error is returned: the list is incomplete.
func cmdLocks(ctx context.Context, c *admin.Client, cfg *adminConfig, _ []string, out io.Writer) error {
	locks, clustered, listErr := listLocks(ctx, c, cfg)
	if locks == nil && listErr != nil {
		return listErr
	}
	if cfg.json {
		if locks == nil {
			locks = []admin.Lock{} // "locks": [], as the API answers
		}
		if err := printJSON(out, admin.LockList{Locks: locks}); err != nil {
			return err
		}
		return listErr
	}
	node := func(admin.Lock) string { return "" }
	tw := newTable(out)
	head := "NAME\tHOLDER\tIDENTITY\tTOKEN\tSINCE\tLEASE\tWAITERS\tHOLDERS\tMODE\tCLAIM\tLABEL"
	if clustered {
		head += "\tNODE"
		node = func(l admin.Lock) string { return "\t" + cell(l.Node) }
	}
	fmt.Fprintln(tw, head)
	for _, l := range locks {
		h := l.Holder
		if h == nil {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t-\t%d\t0\t-\t-\t-%s\n", cell(l.Name), l.QueueLength(), node(l))
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%d\t%d\t%s\t%s\t%s%s\n", cell(l.Name), cell(h.RemoteAddr), cell(h.Identity),
			h.Token, timeCell(h.Since), leaseCell(h.LeaseMS), l.QueueLength(), len(l.Holders), modeCell(l, h.Mode),
			h.Claim.Ref(), cell(h.Label), node(l))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return listErr
}

// modeCell is a claim's mode, with the lock's limit for a semaphore.
func modeCell(l admin.Lock, mode string) string {
	if mode == "" {
		return "-"
	}
	if l.Limit > 0 {
		return fmt.Sprintf("%s(%d)", mode, l.Limit)
	}
	return mode
}

func cmdLock(ctx context.Context, c *admin.Client, cfg *adminConfig, args []string, out io.Writer) error {
	l, err := c.Lock(ctx, args[0])
	if err != nil {
		return err
	}
	if cfg.json {
		return printJSON(out, l)
	}
	printLock(out, l)
	return nil
}

// printLock prints the holders and then the waiters in queue order.
// CLAIM is SESSION/CLAIM, the address 'baton release --claim' and 'baton
// kick' take; PROTO is the protocol version of the claim's session.
func printLock(out io.Writer, l admin.Lock) {
	fmt.Fprintf(out, "lock %s\n", cell(l.Name))
	tw := newTable(out)
	fmt.Fprintln(tw, "POSITION\tREMOTE_ADDR\tIDENTITY\tTOKEN\tSINCE\tLEASE\tMODE\tCLAIM\tPROTO\tLABEL")
	holders := l.Holders
	if len(holders) == 0 && l.Holder != nil { // an older server
		holders = []admin.Holder{*l.Holder}
	}
	for _, h := range holders {
		fmt.Fprintf(tw, "holder\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%d\t%s\n", cell(h.RemoteAddr), cell(h.Identity), h.Token,
			timeCell(h.Since), leaseCell(h.LeaseMS), modeCell(l, h.Mode), h.Claim.Ref(), h.Protocol, cell(h.Label))
	}
	for i, w := range l.Waiters {
		fmt.Fprintf(tw, "%d\t%s\t%s\t-\t%s\t-\t%s\t%s\t%d\t%s\n", i+1, cell(w.RemoteAddr), cell(w.Identity), timeCell(w.QueuedAt),
			modeCell(l, w.Mode), w.Claim.Ref(), w.Protocol, cell(w.Label))
	}
	tw.Flush()
	if more := l.QueueLength() - l.WaitersOffset - len(l.Waiters); more > 0 {
		fmt.Fprintf(out, "(and %d more waiters)\n", more)
	}
}

func cmdRelease(ctx context.Context, c *admin.Client, cfg *adminConfig, args []string, out io.Writer) error {
	var r admin.Released
	var err error
	if cfg.token == "" && cfg.claim == "" {
		r, err = c.Release(ctx, args[0])
	} else {
		token, _ := strconv.ParseUint(cfg.token, 10, 64) // checked in runAdmin
		r, err = c.ReleaseHolder(ctx, args[0], token, cfg.claim)
	}
	if err != nil {
		return err
	}
	if cfg.json {
		return printJSON(out, r)
	}
	switch {
	case cfg.token != "":
		fmt.Fprintf(out, "released the holder of lock %s with token %s\n", cell(r.Released), cfg.token)
	case cfg.claim != "":
		fmt.Fprintf(out, "released claim %s of lock %s\n", cfg.claim, cell(r.Released))
	default:
		fmt.Fprintf(out, "released lock %s\n", cell(r.Released))
	}
	printAfter(out, r.Lock, r.Released)
	return nil
}

func cmdKick(ctx context.Context, c *admin.Client, cfg *adminConfig, args []string, out io.Writer) error {
	k, err := c.Kick(ctx, args[0], args[1])
	if err != nil {
		return err
	}
	if cfg.json {
		return printJSON(out, k)
	}
	fmt.Fprintf(out, "removed waiter %s from lock %s\n", cell(k.Kicked), cell(args[0]))
	printAfter(out, k.Lock, args[0])
	return nil
}

// printAfter shows the lock as the server reported it right after an
// action.
func printAfter(out io.Writer, l *admin.Lock, name string) {
	if l == nil {
		fmt.Fprintf(out, "lock %s is now free\n", cell(name))
		return
	}
	fmt.Fprintln(out)
	printLock(out, *l)
}

func cmdRanges(ctx context.Context, c *admin.Client, cfg *adminConfig, _ []string, out io.Writer) error {
	list, clustered, listErr := listRanges(ctx, c, cfg)
	if len(list.Ranges) == 0 && listErr != nil {
		return listErr
	}
	if cfg.json {
		if err := printJSON(out, list); err != nil {
			return err
		}
		return listErr
	}
	node := func(admin.RangeKey) string { return "" }
	head := "KEY\tNS\tSTATE\tOWNER\tTYPE\tSTART\tLENGTH\tLABEL\tADDRESS\tIDENTITY"
	if clustered {
		head += "\tNODE"
		node = func(k admin.RangeKey) string { return "\t" + cell(k.Node) }
	}
	tw := newTable(out)
	fmt.Fprintln(tw, head)
	row := func(k admin.RangeKey, state string, h admin.RangeHeld) {
		length := "EOF"
		if h.Length != 0 {
			length = strconv.FormatUint(h.Length, 10)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s%s\n", cell(k.Key), k.Namespace, state, h.Ref(), h.Type,
			h.Start, length, cell(h.Label), cell(h.RemoteAddr), cell(h.Identity), node(k))
	}
	for _, k := range list.Ranges {
		for _, h := range k.Holders {
			row(k, "held", h)
		}
		for _, w := range k.Waiters {
			row(k, "waiting", w.RangeHeld)
		}
		if more := k.HoldersTotal - len(k.Holders) + k.WaitersTotal - len(k.Waiters); more > 0 {
			fmt.Fprintf(tw, "%s\t%s\t(and %d more)\t\t\t\t\t\t\t%s\n", cell(k.Key), k.Namespace, more, node(k))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if more := list.Total - len(list.Ranges); more > 0 {
		fmt.Fprintf(out, "(and %d more keys: narrow with --match)\n", more)
	}
	return listErr
}

func cmdReleaseRanges(ctx context.Context, c *admin.Client, cfg *adminConfig, args []string, out io.Writer) error {
	r, err := c.ReleaseRanges(ctx, args[0], args[1])
	if err != nil {
		return err
	}
	if cfg.json {
		return printJSON(out, r)
	}
	fmt.Fprintf(out, "released the range locks of owner %s on %s; its session was ended with ERROR 0x02\n", r.Owner, cell(r.Released))
	return nil
}

func cmdInfo(ctx context.Context, c *admin.Client, cfg *adminConfig, _ []string, out io.Writer) error {
	info, err := c.Info(ctx)
	if err != nil {
		return err
	}
	if cfg.json {
		return printJSON(out, info)
	}
	tw := newTable(out)
	uptime := (time.Duration(info.UptimeMS) * time.Millisecond).Round(time.Second)
	fmt.Fprintf(tw, "version\t%s\n", cell(info.Version))
	fmt.Fprintf(tw, "started\t%s\n", timeCell(info.StartedAt))
	fmt.Fprintf(tw, "uptime\t%s\n", uptime)
	fmt.Fprintf(tw, "shutting down\t%v\n", info.ShuttingDown)
	fmt.Fprintf(tw, "connections\t%d\n", info.Counts.Connections)
	fmt.Fprintf(tw, "locks held\t%d\n", info.Counts.Locks)
	fmt.Fprintf(tw, "waiters\t%d\n", info.Counts.Waiters)
	tw.Flush()
	fmt.Fprintln(out)
	tw = newTable(out)
	fmt.Fprintln(tw, "SETTING\tVALUE")
	keys := make([]string, 0, len(info.Config))
	for k := range info.Config {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		// An empty setting is shown as "", not as cell's "-", which is
		// a real value of some settings (-audit-log -).
		v := `""`
		if info.Config[k] != "" {
			v = cell(info.Config[k])
		}
		fmt.Fprintf(tw, "%s\t%s\n", cell(k), v)
	}
	return tw.Flush()
}

func newTable(out io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
}

func printJSON(out io.Writer, v any) error {
	enc := json.NewEncoder(out)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// cell makes s safe for a table cell: "-" when empty, Go-quoted when it
// contains spaces or control characters that would break the columns.
func cell(s string) string {
	if s == "" {
		return "-"
	}
	for _, r := range s {
		if unicode.IsSpace(r) || !unicode.IsPrint(r) || r == '"' {
			return strconv.Quote(s)
		}
	}
	return s
}

func timeCell(t admin.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(admin.TimeFormat)
}

func leaseCell(ms int64) string { return (time.Duration(ms) * time.Millisecond).String() }

// adminAddrHint says what --admin points at when it did not answer as the
// admin API: the baton protocol port, or a TLS port spoken to in plain
// HTTP. It asks the address itself rather than reading error strings.
func adminAddrHint(c *admin.Client, cfg *adminConfig) string {
	u, err := url.Parse(c.BaseURL)
	if err != nil {
		return ""
	}
	if _, err := statusProbe(u.Host, &tlsfiles.ClientFiles{}, 2*time.Second); err == nil {
		return fmt.Sprintf("%s is a baton protocol port, not the admin API: set --admin to the address of 'baton serve -admin-listen' (default %s).", u.Host, defaultAdminAddr)
	}
	if u.Scheme == "http" {
		d := &tls.Dialer{Config: &tls.Config{InsecureSkipVerify: true}} // only to learn that it speaks TLS
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if conn, err := d.DialContext(ctx, "tcp", u.Host); err == nil {
			conn.Close()
			return fmt.Sprintf("%s serves TLS: use --admin https://%s with --tls-ca (and --tls-cert, --tls-key for mutual TLS).", u.Host, u.Host)
		}
	}
	return ""
}
