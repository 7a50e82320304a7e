package utils

import (
	"os"
	"path/filepath"
	"testing"
)

// TestRunsNamesTheRecordedBinary: a live PID counts as a survivor of down only while it runs the
// binary recorded for it, so a PID reused by another program is not one.
func TestRunsNamesTheRecordedBinary(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if self, err = filepath.EvalSymlinks(self); err != nil {
		t.Fatal(err)
	}
	pid := os.Getpid()
	if !runs(pid, self) {
		t.Errorf("runs(%d, %q) = false for this very process", pid, self)
	}
	if runs(pid, self+"-another-program") {
		t.Errorf("runs(%d, another binary) = true: a reused PID would count as a survivor", pid)
	}
	if !runs(pid, "") {
		t.Errorf("runs(%d, no recorded binary) = false, want any live pid to count", pid)
	}
}
