package baton_test

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestCIRunsTheREADMETestCommand pins two promises of the README: CI runs
// exactly the test command a new user is told to run, and that command
// executes the tests instead of reporting results cached by an earlier
// run (CI runs on a machine whose build cache may already hold them).
func TestCIRunsTheREADMETestCommand(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	ci, err := os.ReadFile(".ci/run")
	if err != nil {
		t.Fatal(err)
	}
	cmd := regexp.MustCompile("(?m)^go test [^`\n]*$").Find(readme)
	if cmd == nil {
		t.Fatal("README.md has no line starting with `go test`")
	}
	if !regexp.MustCompile(`(^| )-count[= ]1( |$)`).Match(cmd) {
		t.Errorf("README's test command %q lacks -count=1: it may report cached results", cmd)
	}
	found := false
	for line := range strings.Lines(string(ci)) {
		if strings.TrimSpace(line) == string(cmd) {
			found = true
		}
	}
	if !found {
		t.Errorf(".ci/run has no line %q, the README's test command", cmd)
	}
}
