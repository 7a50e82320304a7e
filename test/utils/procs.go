package utils

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/lockedjob/lockedjob/internal/testutil/ports"
)

// ProcessAlive reports whether pid exists and is not a zombie.
func ProcessAlive(pid int) bool {
	state, err := statState(fmt.Sprintf("/proc/%d/stat", pid))
	return err == nil && state != 'Z' && state != 'X'
}

// ProcessStopped reports whether every thread of pid is stopped (SIGSTOP).
func ProcessStopped(pid int) bool {
	entries, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil || len(entries) == 0 {
		return false
	}
	for _, e := range entries {
		state, err := statState(fmt.Sprintf("/proc/%d/task/%s/stat", pid, e.Name()))
		if err != nil || (state != 'T' && state != 't') {
			return false
		}
	}
	return true
}

// statState reads the state letter of a /proc stat file: the field after the command name, which
// may itself contain spaces and parentheses.
func statState(path string) (byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return 0, fmt.Errorf("%s: unexpected format", path)
	}
	return s[i+2], nil
}

// LocalCluster names one local control plane run by hack/cluster.sh.
type LocalCluster struct {
	Root     string   // the project's root
	Dir      string   // LOCKEDJOB_CLUSTER_DIR
	PortBase int      // LOCKEDJOB_CLUSTER_PORT_BASE
	BinDir   string   // K8S_BIN_DIR
	Env      []string // more environment for the script, e.g. LOCKEDJOB_REAL_NODE=1
}

// PortBlock is how many ports from PortBase hack/cluster.sh uses: the control plane's and the
// real node's (kubelet, its healthz, containerd's stream server).
const PortBlock = 9

// DeveloperPortBase is hack/cluster.sh's default LOCKEDJOB_CLUSTER_PORT_BASE: the developer's own
// cluster (and the demo's), which no test may take or disturb.
const DeveloperPortBase = 26440

// ControlPlane are the processes `hack/cluster.sh up` starts for the control plane, each recorded
// in the cluster folder's pids/ (the real node's are not among them).
var ControlPlane = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"}

// FreeClusterPorts returns a PortBase for a cluster: preferred if its PortBlock ports are free and
// no real-node bridge of that base is on the host (preferred <= 0: none), else a random such block
// away from DeveloperPortBase.
//
// A bridge outlives a run killed before its down, and hack/cluster.sh cannot tell a crashed
// cluster's bridge from a live one's, so it refuses that base: a stale bridge of the e2e suite's
// default base failed every later run of the suite until it was removed by hand.
func FreeClusterPorts(preferred int) (int, error) {
	for range 20 {
		base, err := ports.FreeBlock(preferred, PortBlock, DeveloperPortBase)
		if err != nil {
			return 0, err
		}
		if !linkExists(RealNodeBridge(base)) {
			return base, nil
		}
		preferred = 0
	}
	return 0, errors.New("no free cluster port block whose real-node bridge name is unused on this host")
}

// RealNodeBridge is the name of the bridge hack/cluster.sh gives the real node of the cluster of
// port base base (hack/lib/realnode.sh, rn_names).
func RealNodeBridge(base int) string { return "ljrn-" + strconv.Itoa(base) }

func linkExists(name string) bool {
	_, err := os.Stat(filepath.Join("/sys/class/net", name))
	return err == nil
}

// Script runs hack/cluster.sh with args for this cluster, killed after timeout.
func (c LocalCluster) Script(timeout time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", append([]string{filepath.Join(c.Root, "hack", "cluster.sh")}, args...)...)
	cmd.Dir = c.Root
	cmd.Env = append(os.Environ(),
		"LOCKEDJOB_CLUSTER_DIR="+c.Dir,
		"LOCKEDJOB_CLUSTER_PORT_BASE="+strconv.Itoa(c.PortBase),
		"K8S_BIN_DIR="+c.BinDir,
	)
	cmd.Env = append(cmd.Env, c.Env...)
	return Run(cmd)
}

// PID reads the PID hack/cluster.sh recorded for a component (one of ControlPlane, or a real-node
// process); the process may have exited since.
func (c LocalCluster) PID(component string) (int, error) {
	b, err := os.ReadFile(filepath.Join(c.Dir, "pids", component+".pid"))
	if err != nil {
		return 0, fmt.Errorf("pid of %s: %w", component, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("pid of %s: %w", component, err)
	}
	return pid, nil
}

// Down runs `hack/cluster.sh down`, killed after timeout, and checks that every ControlPlane
// process recorded before it is gone: a down that exits 0 and leaves a process running is a
// failure. It returns the script's output.
func (c LocalCluster) Down(timeout time.Duration) (string, error) {
	type recorded struct {
		pid int
		exe string
	}
	procs := map[string]recorded{}
	for _, name := range ControlPlane {
		if pid, err := c.PID(name); err == nil {
			exe, _ := os.ReadFile(filepath.Join(c.Dir, "pids", name+".exe"))
			procs[name] = recorded{pid, strings.TrimSpace(string(exe))}
		}
	}
	out, err := c.Script(timeout, "down")
	if err != nil {
		return out, err
	}
	for name, p := range procs {
		if ProcessAlive(p.pid) && runs(p.pid, p.exe) {
			return out, fmt.Errorf("%s (pid %d) still runs after hack/cluster.sh down of %s", name, p.pid, c.Dir)
		}
	}
	return out, nil
}

// runs reports whether pid runs the binary exe, which hack/lib/procs.sh records beside the pid
// file, so that a PID the kernel handed to another program since is not taken for a survivor.
// Without a recorded binary any live pid counts.
func runs(pid int, exe string) bool {
	if exe == "" {
		return true
	}
	got, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		return !errors.Is(err, os.ErrNotExist) // unreadable, not gone: count it
	}
	return strings.TrimSuffix(got, " (deleted)") == exe
}
