package version

import (
	"runtime/debug"
	"testing"
)

// TestFill: the toolchain's build information fills what the linker did not set, and never
// overrides what it did.
func TestFill(t *testing.T) {
	bi := &debug.BuildInfo{Main: debug.Module{Version: "v0.3.0"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.time", Value: "2026-12-06T10:00:00Z"}, {Key: "vcs.modified", Value: "true"},
	}}
	var got Info
	fill(&got, bi)
	if want := (Info{Version: "v0.3.0", Commit: "abc123-dirty", Date: "2026-12-06T10:00:00Z"}); got != want {
		t.Errorf("from build info: %+v, want %+v", got, want)
	}

	linked := Info{Version: "v1.0.0", Commit: "def456", Date: "2026-12-01T00:00:00Z"}
	got = linked
	fill(&got, bi)
	if got != linked {
		t.Errorf("link-time values overridden: %+v, want %+v", got, linked)
	}

	got = Info{}
	fill(&got, &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}})
	if got.Version != "" || got.Commit != "" {
		t.Errorf("a devel build without VCS stamps: %+v, want nothing filled", got)
	}
}

// TestGet always says something: a test binary has no link-time values.
func TestGet(t *testing.T) {
	i := Get()
	if i.Version == "" || i.Commit == "" || i.Date == "" || i.GoVersion == "" || i.Platform == "" {
		t.Errorf("Get() = %+v: every field must say something", i)
	}
}
