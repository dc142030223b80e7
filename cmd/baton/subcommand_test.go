package main

import (
	"strings"
	"testing"
)

// 'baton cluster' and 'baton dirlock' read their subcommand alike: help
// exits 0 with the synopsis, a missing or unknown subcommand is a usage
// error (exit 2) that names the command.
func TestSubcommandUsage(t *testing.T) {
	for _, cmd := range []string{"cluster", "dirlock"} {
		if code, out, _ := cli(cmd, "-h"); code != exitOK || !strings.Contains(out, "Usage: baton "+cmd) {
			t.Errorf("baton %s -h = %d, %q; want 0 and the synopsis", cmd, code, out)
		}
		for _, args := range [][]string{{cmd}, {cmd, "frobnicate"}} {
			code, _, errOut := cli(args...)
			if code != exitUsage || !strings.HasPrefix(errOut, "baton "+cmd+": ") || !strings.Contains(errOut, "Run 'baton "+cmd+" -h'") {
				t.Errorf("baton %q = %d, %q; want %d and a usage error", args, code, errOut, exitUsage)
			}
		}
	}
}
