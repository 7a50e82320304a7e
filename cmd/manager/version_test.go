package main

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestVersionFlag builds the manager as a release does, with its version, commit and date given
// at link time (the Makefile's VERSION_LDFLAGS), and checks that --version prints them and exits
// before anything is connected: the link-time names are the contract with the release build.
func TestVersionFlag(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "manager")
	const pkg = "github.com/lockedjob/lockedjob/internal/version"
	ldflags := "-X " + pkg + ".version=v9.9.9 -X " + pkg + ".commit=c0ffee -X " + pkg + ".date=2026-01-02T03:04:05Z"
	if out, err := exec.Command("go", "build", "-ldflags", ldflags, "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("--version: %v\n%s", err, out)
	}
	want := "lockedjob manager v9.9.9 (commit c0ffee, built 2026-01-02T03:04:05Z, " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + ")"
	if got := strings.TrimSpace(string(out)); got != want {
		t.Errorf("--version printed %q, want %q", got, want)
	}
}
