// Package modelcheck explores, breadth first, every interleaving of a
// bounded configuration and checks baton's safety and liveness properties
// in every reachable state.
//
// Seven models are checked:
//
//   - The lock-table model (CheckTable) drives the real
//     internal/locktable.Table, not a copy, through every interleaving of
//     acquire, heartbeat, graceful end, lease expiry, force-release, kick
//     and shutdown for a bounded number of sessions, locks and claims per
//     session. The table has no Clone, so a state is rebuilt by replaying
//     its breadth-first path from a fresh table; states are deduplicated by
//     a canonical encoding that keeps owners, queues, lives used and the
//     order of the owners' tokens, and drops absolute time and token
//     values.
//
//   - The claims model (CheckClaims) drives the same real table through
//     sessions that hold several claims at once, in exclusive, shared and
//     semaphore modes, waiting or no-wait: claim, refused claim (a mode
//     mix or another semaphore limit), session heartbeat, release, close,
//     session expiry, force-release and kick of one claim, revoke and
//     shutdown. It checks that holders never conflict, strict FIFO (a
//     claim is granted only when it conflicts with no holder and no
//     earlier waiter, so a reader never overtakes a queued writer), that
//     no grant is withheld, tokens, leases and, on the whole graph, that
//     no waiter starves while holders eventually let go. Mutations
//     (NewClaimsMutant) show that it catches a reader overtaking a queued
//     writer and a semaphore over its limit. With ClaimsConfig.Watches
//     and Values it also starts and ends watches and sets claims'
//     values, and checks that each watch's picture, built only from the
//     changes it was sent, is its name's holders in grant order with
//     their values after every step, never passes through a picture the
//     table never had (tokens increase, an exclusive holder is alone),
//     and that a watch is told nothing after it ends; watch mutations
//     drop, reorder or misdirect changes.
//
//   - The client-rule model (CheckClient) composes a client that follows
//     docs/protocol.md "Client obligations" 2-4, the work it guards (which
//     stops a bounded but arbitrary time after being told), a server
//     session and a channel with bounded but arbitrary delays, in discrete
//     time steps, and checks that whenever the client considers itself
//     owner, the server still has it as owner, and that the server never
//     ends the claim while the client's work runs unless anchor + lease
//     has passed.
//
//   - The session model (CheckSession) is the client-rule model for
//     protocol version 2: a client that follows internal/clientrule's
//     Session (docs/protocol-v2-client.md "v2 client obligations" 2-5, the rule of
//     baton.Session) with two claims on one connection, pipelined
//     requests, PINGs, QUEUED and pushed PROMOTED, RELEASE, the work of
//     each claim, a server session and delayed channels. It checks that a
//     claim the client believes held is held at the server, that the
//     server never ends a held claim under running work before anchor +
//     lease, and that a correct server never looks like a violation.
//     Mutations show that it catches an anchor taken at an answer's
//     arrival or moved by a push, and a close at the give-up or before
//     the work is told.
//
//   - The directory-lock models (CheckDirlockSeed, CheckDirlockSteps)
//     check the serverless lock of package dirlock: the seed's model with
//     an atomic acquire guarded by "no record, or stale and on the
//     owner's host", and a model of the real file-system steps (mkdir,
//     write, rename, remove) with a crash between any two. Their liveness
//     properties are checked under fairness on the whole state graph.
//     See docs/dirlock.md.
//
//   - The cluster-ownership model (CheckCluster) checks who may grant one
//     lock name across nodes of a cluster through ring changes: planned
//     moves (the prior owner hands holders with tokens and queues to the
//     new owner before the ring switches), node deaths and restarts (fail
//     closed: a name taken without its state is gated until no holder of a
//     dead incarnation can still believe), one-hop forwarding with a
//     forwarded mark, and token epochs committed before serving. Version
//     1 clients do not continue through a planned move: the prior owner
//     ends their waiters and tells their holders ERROR 0x01, keeping a
//     told holder's claim, granting nothing in its place and handing
//     nothing over, until the client has let go (hung up, or its lease
//     ran out). It checks one holder at a time, strictly increasing
//     tokens, no lost claim and no forwarding loop; mutations
//     (ClusterMutations) drop each rule. See docs/cluster.md.
//
//   - The continuation model (CheckContinue) extends it with version 2
//     sessions that continue through the new owner of a planned move:
//     each client's session is on a host node, the hand-off is split into
//     export, install and commit (or a fallback to a gated commit), hosts
//     adopt their moving claims at the new owner, releases of moving
//     claims are queued and replayed, and the lease is abstract (an expiry
//     of a record whose session the node cannot hear). It checks one
//     holder, increasing tokens, no lost claim and no stale claim;
//     mutations (ContinueMutations) drop each rule. See docs/cluster.md
//     and docs/verification.md.
//
//   - The failover model (CheckFailover) is timed: an owner node cut off
//     from the Raft quorum stops serving after TSelf on its own clock,
//     the leader removes it after T on its own, and the new owner takes
//     its names over without their state, gated for a warm-up W, while
//     clients that follow the give-up rule re-assert their claims there
//     (with their old tokens) or re-queue. Every process's clock drifts
//     within [1−ρ, 1+ρ], messages are delayed without bound or lost, and
//     processes freeze or die. It checks that no two clients ever believe
//     they hold conflicting claims, that tokens strictly increase, that a
//     holder is never refused or expired while it believes, and that the
//     old owner serves nothing once the new one has taken over; mutations
//     (FailoverMutations) drop each rule. See docs/high-availability.md.
//
//   - The range model (CheckRanges) drives the real
//     internal/rangelock.Table through every interleaving of fcntl
//     byte-range and flock requests (waiting or not), unlocks,
//     release-owner, interrupted waits and session closes, for two or
//     three owners over a few byte positions, against a byte-by-byte
//     reference record. It checks that no conflicting locks are held,
//     that held ranges, F_GETLK answers and conflicts follow the fcntl
//     and flock semantics, strict FIFO, that no grant is withheld, tokens,
//     that deadlock detection is sound (a refusal would have closed a
//     wait-for cycle) and complete (the wait-for graph never has a
//     cycle), and, on the whole graph, that no waiter starves while
//     holders eventually let go. Mutations (NewRangeMutant) show that it
//     catches a waiter overtaken, a deadlock queued, a false deadlock and
//     an unlock that drops too much.
//
// The cluster models run the cluster core's rules (internal/clustercore)
// where a rule of theirs is one the core now decides, mapping their ticks
// to times from an arbitrary present: the relaying node's outbox
// (relayoutbox.go: failover -relay, cluster-ranges, cluster-continue),
// the take-over's answer (failover), the range re-assertion's window
// (cluster-ranges-failover), whose locks a re-assertion takes
// (cluster-ranges-resume) and what a hand-off's export does with each
// session (cluster-continue). A mutation that bent such a rule now
// changes its input or output, and docs/verification.md lists the rules.
//
// A violation is reported with the shortest counterexample (breadth-first
// order makes the first one found the shortest) as a readable trace; a
// liveness violation is a lasso: a path to a cycle and the cycle.
//
// The package is test and tooling code: nothing in the server or the
// client imports it.
package modelcheck
