package main

import (
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

// The version comes from the build information when -ldflags does not set
// it: 'go install ...@v1.2.3' reports v1.2.3, a clone its revision and
// commit time, whatever module version the go command stamped from it.
func TestBuildVersion(t *testing.T) {
	const rev, when = "0123456789abcdef0123", "2026-12-07T20:29:07Z"
	vcs := func(modified string) []debug.BuildSetting {
		return []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: rev},
			{Key: "vcs.time", Value: when}, {Key: "vcs.modified", Value: modified}}
	}
	for _, tc := range []struct {
		info     *debug.BuildInfo
		ok       bool
		want     string
		wantTime string
	}{
		{nil, false, "dev", ""},
		{&debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}}, true, "v1.2.3", ""},
		// 'go install ...@COMMIT': a pseudo-version from the module proxy,
		// with no VCS settings, is the best name the build has.
		{&debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20261207202907-0123456789ab"}}, true, "v0.0.0-20261207202907-0123456789ab", ""},
		{&debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: vcs("true")}, true, "dev-0123456789ab-dirty", when},
		// Go 1.24 and later stamp a clone's build with a pseudo-version or
		// a tag plus +dirty: the revision names it better.
		{&debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20261207202907-0123456789ab+dirty"}, Settings: vcs("true")}, true, "dev-0123456789ab-dirty", when},
		{&debug.BuildInfo{Main: debug.Module{Version: "v0.1.1-0.20261207202907-0123456789ab"}, Settings: vcs("false")}, true, "dev-0123456789ab", when},
		{&debug.BuildInfo{Main: debug.Module{Version: "v0.1.0+dirty"}, Settings: vcs("true")}, true, "dev-0123456789ab-dirty", when},
		// A clean checkout of a tag is that release.
		{&debug.BuildInfo{Main: debug.Module{Version: "v0.1.0"}, Settings: vcs("false")}, true, "v0.1.0", when},
		{&debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, true, "dev", ""},
	} {
		got, gotTime := buildVersion(tc.info, tc.ok)
		if got != tc.want || gotTime != tc.wantTime {
			t.Errorf("buildVersion(%+v) = %q, %q; want %q, %q", tc.info, got, gotTime, tc.want, tc.wantTime)
		}
	}
}

func TestVersionLine(t *testing.T) {
	for _, tc := range []struct{ version, time, want string }{
		{"v0.1.0", "", "baton v0.1.0 go1.26.0 linux/arm64"},
		{"dev-0123456789ab-dirty", "2026-12-07T20:29:07Z", "baton dev-0123456789ab-dirty (commit time 2026-12-07T20:29:07Z) go1.26.0 linux/arm64"},
	} {
		if got := versionLine(tc.version, tc.time, "go1.26.0", "linux", "arm64"); got != tc.want {
			t.Errorf("versionLine(%q, %q) = %q, want %q", tc.version, tc.time, got, tc.want)
		}
	}
}

// 'baton --version', 'baton help CMD' and 'baton version -h'.
func TestVersionAndHelp(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--version"}, exitOK, "baton " + version + " "},
		{[]string{"version"}, exitOK, "baton " + version + " "},
		{[]string{"version"}, exitOK, " " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + "\n"},
		{[]string{"version", "-h"}, exitOK, "Usage: baton version"},
		{[]string{"version", "extra"}, exitUsage, "unexpected argument"},
		{[]string{"help", "run"}, exitOK, "BATON_LEASE"},
		{[]string{"help", "serve"}, exitOK, "Usage: baton serve"},
		{[]string{"help", "nope"}, exitUsage, "unknown command"},
		{[]string{"help"}, exitOK, "baton help COMMAND"},
	} {
		code, out, errOut := cli(tc.args...)
		if code != tc.code || !strings.Contains(out+errOut, tc.want) {
			t.Errorf("baton %q = %d, out %q err %q; want %d and %q", tc.args, code, out, errOut, tc.code, tc.want)
		}
	}
	if version == "" {
		t.Error("version is empty")
	}
}
