package utils

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
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
