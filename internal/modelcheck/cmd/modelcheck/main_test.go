package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestExitCodes(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		out  string
	}{
		{[]string{"-model=table", "-sessions=2", "-locks=1"}, 0, "ok: every property holds"},
		{[]string{"-model=claims", "-sessions=2", "-claims=2"}, 0, "477 states"},
		{[]string{"-model=claims", "-sessions=3", "-claims=1", "-mutation=reader-overtakes"}, 1, "counterexample, 3 steps"},
		{[]string{"-model=claims", "-rw=0", "-sems=1", "-claims=1", "-mutation=semaphore-over-limit"}, 1, "no conflicting holders"},
		{[]string{"-model=claims", "-mutation=no-claim"}, 2, ""},
		{[]string{"-model=claims", "-claims=7"}, 2, ""},
		{[]string{"-model=claims", "-sessions=2", "-claims=1", "-watches=1", "-values"}, 0, "696 states"},
		{[]string{"-model=claims", "-sessions=2", "-claims=1", "-watches=1", "-values", "-mutation=value-untold"}, 1, "counterexample, 3 steps"},
		{[]string{"-model=claims", "-watches=4"}, 2, ""},
		{[]string{"-model=client"}, 0, "ok: every property holds"},
		{[]string{"-model=client", "-giveup=1.0"}, 1, "counterexample, 15 steps"},
		{[]string{"-model=session", "-lease=5", "-delay=0", "-lag=0", "-workstop=2"}, 0, "16077 states"},
		{[]string{"-model=session", "-lease=5", "-delay=1", "-lag=0", "-mutation=anchor-on-push"}, 1, "counterexample, 15 steps"},
		{[]string{"-model=session", "-delay=0", "-mutation=close-at-giveup"}, 1, "counterexample, 17 steps"},
		{[]string{"-model=session", "-mutation=tempting"}, 2, ""},
		{[]string{"-model=session", "-lease=3"}, 2, ""},
		{[]string{"-model=dirlock-seed", "-hosts=3", "-procs=1"}, 0, "44 states"},
		{[]string{"-model=dirlock-seed", "-mutation=tempting"}, 1, "counterexample, 4 steps"},
		{[]string{"-model=dirlock-steps", "-hosts=2", "-procs=1"}, 0, "ok: every property holds"},
		{[]string{"-model=dirlock-steps", "-mutation=no-claim"}, 1, "at most one process holds the lock"},
		{[]string{"-model=dirlock-steps", "-mutation=tempting"}, 2, ""},
		{[]string{"-model=dirlock-seed", "-hosts=4"}, 2, ""},
		{[]string{"-model=cluster"}, 0, "156831 states"},
		{[]string{"-model=cluster", "-clients=1", "-v1=0"}, 0, "1 client × 1 acquisition"},
		{[]string{"-model=cluster", "-mutation=grant-before-told"}, 1, "counterexample, 6 steps"},
		{[]string{"-model=cluster", "-clients=1"}, 0, "1 client (1 version 1)"},
		{[]string{"-model=cluster", "-clients=1", "-v1=2"}, 2, ""},
		{[]string{"-model=cluster", "-mutation=forward-again"}, 1, "no forwarding loop"},
		{[]string{"-model=cluster", "-nodes=4"}, 2, ""},
		{[]string{"-model=cluster", "-mutation=tempting"}, 2, ""},
		{[]string{"-model=cluster-continue", "-nodes=2"}, 0, "86062 states"},
		{[]string{"-model=cluster-continue", "-restarts=0", "-mutation=release-at-host"}, 1, "no stale claim"},
		{[]string{"-model=cluster-continue", "-mutation=switch-first"}, 2, ""},
		{[]string{"-model=cluster-continue", "-clients=4"}, 2, ""},
		{[]string{"-model=ranges", "-owners=2", "-positions=1"}, 0, "242 states"},
		{[]string{"-model=ranges", "-owners=3", "-positions=1", "-mutation=false-deadlock"}, 1, "counterexample, 4 steps"},
		{[]string{"-model=ranges", "-mutation=tempting"}, 2, ""},
		{[]string{"-model=ranges", "-owners=4"}, 2, ""},
		{[]string{"-model=ranges", "-owners=2", "-range-sessions=3"}, 2, ""},
		{[]string{"-model=cluster-ranges"}, 0, "366 states"},
		{[]string{"-model=cluster-ranges", "-range-relay", "-range-move"}, 0, "4902 states"},
		{[]string{"-model=cluster-ranges", "-range-relay", "-mutation=range-relay-unconfirmed"}, 1, "counterexample, 13 steps"},
		{[]string{"-model=cluster-ranges", "-waiter", "-waiter-lease=80"}, 0, "every property holds"},
		{[]string{"-model=cluster-ranges", "-waiter", "-waiter-lease=80", "-mutation=range-gate-holders-only"}, 1, "counterexample, 17 steps"},
		{[]string{"-model=cluster-ranges", "-mutation=range-owner-drops-relayed"}, 2, ""},
		{[]string{"-model=cluster-ranges", "-range-relay", "-waiter"}, 2, ""},
		{[]string{"-model=cluster-ranges", "-mutation=tempting"}, 2, ""},
		{[]string{"-model=cluster-ranges", "-range-handover"}, 0, "3232 states"},
		{[]string{"-model=cluster-ranges", "-range-handover", "-range-relay"}, 0, "18531 states"},
		{[]string{"-model=cluster-ranges", "-range-handover", "-range-relay", "-range-host-n"}, 0, "12392 states"},
		{[]string{"-model=cluster-ranges", "-range-handover", "-mutation=range-placeholder-short"}, 1, "counterexample, 11 steps"},
		{[]string{"-model=cluster-ranges", "-range-handover", "-range-relay", "-mutation=range-host-answers-moving"}, 1, "counterexample, 20 steps"},
		{[]string{"-model=cluster-ranges", "-range-handover", "-range-relay", "-mutation=range-moved-unordered"}, 1, "counterexample, 20 steps"},
		{[]string{"-model=cluster-ranges", "-range-handover", "-mutation=range-adopt-any-origin"}, 1, "counterexample, 8 steps"},
		{[]string{"-model=cluster-ranges", "-range-handover", "-mutation=range-moved-unordered"}, 2, ""},
		{[]string{"-model=cluster-ranges", "-range-handover", "-mutation=range-gate-short"}, 2, ""},
		{[]string{"-model=cluster-ranges", "-range-host-n"}, 2, ""},
		{[]string{"-model=cluster-ranges", "-range-handover", "-waiter"}, 2, ""},
		{[]string{"-model=cluster-ranges-failover"}, 0, "14673 states"},
		{[]string{"-model=cluster-ranges-failover", "-mutation=range-warmup-short"}, 1, "counterexample, 12 steps"},
		{[]string{"-model=cluster-ranges-failover", "-mutation=range-reassert-answers-early"}, 1, "counterexample, 18 steps"},
		{[]string{"-model=cluster-ranges-failover", "-mutation=range-accept-conflict"}, 0, "14683 states"},
		{[]string{"-model=cluster-ranges-failover", "-removal=20"}, 1, "the old owner serves nothing on the key"},
		{[]string{"-model=cluster-ranges-failover", "-mutation=relay-answers-unconfirmed"}, 2, ""},
		{[]string{"-model=cluster-ranges-failover", "-lease=200"}, 2, ""},
		{[]string{"-model=cluster-ranges-resume"}, 0, "5802 states"},
		{[]string{"-model=cluster-ranges-resume", "-resume-second"}, 0, "154289 states"},
		{[]string{"-model=cluster-ranges-resume", "-mutation=resume-name-once"}, 1, "counterexample, 10 steps"},
		{[]string{"-model=cluster-ranges-resume", "-resume-sessions=3"}, 0, "17348 states"},
		{[]string{"-model=cluster-ranges-resume", "-resume-sessions=3", "-mutation=resume-name-latest-only"}, 1, "counterexample, 9 steps"},
		{[]string{"-model=cluster-ranges-resume", "-resume-sessions=4"}, 2, ""},
		{[]string{"-model=cluster-ranges-resume", "-drift=2"}, 1, "counterexample, 7 steps"},
		{[]string{"-model=cluster-ranges-resume", "-mutation=range-warmup-short"}, 2, ""},
		{[]string{"-model=failover", "-lease=20"}, 0, "ok: every property holds"},
		{[]string{"-model=failover", "-mutation=no-tself"}, 1, "counterexample, 7 steps"},
		{[]string{"-model=failover", "-clients=4"}, 2, ""},
		{[]string{"-model=failover", "-mutation=tempting"}, 2, ""},
		{[]string{"-model=failover", "-relay=2", "-mutation=relay-answers-unconfirmed"}, 1, "counterexample, 10 steps"},
		{[]string{"-model=failover", "-mutation=relay-answers-unconfirmed"}, 2, ""},
		{[]string{"-model=failover", "-relay=3"}, 2, ""},
		{[]string{"-model=failover", "-relay=2", "-relay-fails", "-mutation=relay-death-releases"}, 1, "counterexample, 5 steps"},
		{[]string{"-model=failover", "-relay=2", "-mutation=relay-death-releases"}, 2, ""},
		{[]string{"-model=failover", "-relay-fails"}, 2, ""},
		{[]string{"-model=nope"}, 2, ""},
		{[]string{"-sessions=0"}, 2, ""},
		{[]string{"-locks=9"}, 2, ""},
		{[]string{"-model=client", "-giveup=0"}, 2, ""},
		{[]string{"-bogus"}, 2, ""},
		{[]string{"extra"}, 2, ""},
		{[]string{"-h"}, 0, ""},
	} {
		var stdout, stderr bytes.Buffer
		code := run(tc.args, &stdout, &stderr)
		if code != tc.code {
			t.Errorf("modelcheck %v: exit %d, want %d\nstdout: %s\nstderr: %s", tc.args, code, tc.code, &stdout, &stderr)
		}
		if !strings.Contains(stdout.String(), tc.out) {
			t.Errorf("modelcheck %v: output does not contain %q:\n%s", tc.args, tc.out, &stdout)
		}
		if tc.code == 2 && stderr.Len() == 0 {
			t.Errorf("modelcheck %v: exit 2 without a message", tc.args)
		}
	}
}
