package main

import (
	"runtime/debug"
	"strings"
	"testing"
)

// The version comes from the build information when -ldflags does not set
// it: 'go install ...@v1.2.3' reports v1.2.3, a clone its revision.
func TestBuildVersion(t *testing.T) {
	for _, tc := range []struct {
		info *debug.BuildInfo
		ok   bool
		want string
	}{
		{nil, false, "dev"},
		{&debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}}, true, "v1.2.3"},
		{&debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.modified", Value: "true"}}}, true, "dev-0123456789ab-dirty"},
		{&debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, true, "dev"},
	} {
		if got := buildVersion(tc.info, tc.ok); got != tc.want {
			t.Errorf("buildVersion(%+v) = %q, want %q", tc.info, got, tc.want)
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
		{[]string{"--version"}, exitOK, "baton " + version},
		{[]string{"version"}, exitOK, "baton " + version},
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
