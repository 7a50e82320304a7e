package utils

import (
	"os"
	"os/exec"
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

// TestFreeClusterPortsSkipsALeftBridge: a real-node bridge left on the host by a run killed before
// its down makes its port base unusable (hack/cluster.sh refuses it), so FreeClusterPorts passes
// it over even when its ports are free, and takes it again once the bridge is gone.
func TestFreeClusterPortsSkipsALeftBridge(t *testing.T) {
	if os.Getenv("LOCKEDJOB_REAL_NODE") == "0" {
		t.Skip("LOCKEDJOB_REAL_NODE=0: no real node, so no bridge to leave")
	}
	if os.Geteuid() != 0 {
		t.Fatal("creating a network link needs root; run as root, or set LOCKEDJOB_REAL_NODE=0 to skip this test")
	}
	base, err := FreeClusterPorts(0)
	if err != nil {
		t.Fatal(err)
	}
	bridge := RealNodeBridge(base)
	// A bridge of that name, down and without an address: only the name matters.
	if out, err := exec.Command("ip", "link", "add", bridge, "type", "bridge").CombinedOutput(); err != nil {
		t.Fatalf("ip link add %s: %v: %s", bridge, err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", bridge).Run() })

	got, err := FreeClusterPorts(base)
	if err != nil {
		t.Fatal(err)
	}
	if got == base {
		t.Errorf("FreeClusterPorts(%d) = %d while %s exists; want another base", base, got, bridge)
	}
	if out, err := exec.Command("ip", "link", "del", bridge).CombinedOutput(); err != nil {
		t.Fatalf("ip link del %s: %v: %s", bridge, err, out)
	}
	if got, err := FreeClusterPorts(base); err != nil || got != base {
		t.Errorf("FreeClusterPorts(%d) = %d, %v once %s is gone; want %d", base, got, err, bridge, base)
	}
}
