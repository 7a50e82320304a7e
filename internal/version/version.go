// Package version is what a lockedjob binary says it is when asked (--version, the start-up log,
// the lockedjob_build_info metric, `kubectl lockedjob version`): its release, commit and build
// date. A release build sets them at link time:
//
//	go build -ldflags "-X github.com/lockedjob/lockedjob/internal/version.version=v0.1.0 \
//	  -X github.com/lockedjob/lockedjob/internal/version.commit=$(git rev-parse HEAD) \
//	  -X github.com/lockedjob/lockedjob/internal/version.date=$(git log -1 --format=%cI)"
//
// The date is the commit's, not the clock's, so two builds of one commit are identical. A build
// without them (go build, go run, make build) reports what the Go toolchain recorded: the
// module's version, or "devel", and the VCS revision and time it stamped.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Set by -ldflags -X at link time; empty otherwise.
var (
	version string
	commit  string
	date    string
)

// Info describes a build.
type Info struct {
	Version   string `json:"version"`
	Commit    string `json:"commit"`
	Date      string `json:"date"`
	GoVersion string `json:"goVersion"`
	Platform  string `json:"platform"`
}

// Get returns the build's Info: the link-time values, else the toolchain's build information.
func Get() Info {
	info := Info{Version: version, Commit: commit, Date: date, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok {
		fill(&info, bi)
	}
	if info.Version == "" {
		info.Version = "devel"
	}
	if info.Commit == "" {
		info.Commit = "unknown"
	}
	if info.Date == "" {
		info.Date = "unknown"
	}
	return info
}

// fill completes what the linker did not set from the toolchain's build information.
func fill(info *Info, bi *debug.BuildInfo) {
	if info.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		info.Version = bi.Main.Version
	}
	var revision, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			revision = s.Value
		case "vcs.time":
			if info.Date == "" {
				info.Date = s.Value
			}
		case "vcs.modified":
			modified = s.Value
		}
	}
	if info.Commit == "" && revision != "" {
		info.Commit = revision
		if modified == "true" {
			info.Commit += "-dirty"
		}
	}
}

// String is the one line a binary prints for --version.
func (i Info) String() string {
	return fmt.Sprintf("%s (commit %s, built %s, %s %s)", i.Version, i.Commit, i.Date, i.GoVersion, i.Platform)
}
