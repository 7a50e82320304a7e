//go:build fault

package fault

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/lockedjob/lockedjob/test/utils"
)

// operatorNamespace holds each operator's leader-election Lease and token-key Secret.
const operatorNamespace = "lockedjob-system"

// leaseMode is the operator's leader-election setting.
type leaseMode int

const (
	// steadyLease survives a SIGSTOP and an API server outage of ~15 s: a
	// leader that cannot renew steps down (and campaigns again), which these
	// scenarios must not turn into a time without a leader.
	steadyLease leaseMode = iota
	// fastLease lets a successor of a SIGKILLed operator lead within ~4 s.
	fastLease
)

// operator is the manager process of one cluster. Exits the suite did not ask
// for are kept as crashes.
type operator struct {
	c         *cluster
	redisArgs []string // --redis-addr <proxy> or the Sentinel flags
	mode      leaseMode
	// slowable: the operator reaches its API server through the cluster's API proxy, so a scenario
	// can slow its path down. Off by default: through the proxy the operator sees an API server that
	// came back sooner than the recorder does, and apiserver-a-down's history would show pods that
	// ran on only in the recorder's late view (the recorder errs towards overlaps).
	slowable bool

	mu       sync.Mutex
	seq      int
	logPath  string
	logs     []string // every log of this operator, oldest first
	cmd      *exec.Cmd
	done     chan struct{}
	waitErr  error
	stopping bool     // the suite asked this process to go
	crashes  []string // unexpected exits, with the log tail
}

func newOperator(c *cluster, redisArgs []string) *operator {
	return &operator{c: c, redisArgs: redisArgs}
}

// start starts a new process and waits until it leads and its workers run.
func (o *operator) start() error {
	o.mu.Lock()
	o.seq++
	o.logPath = filepath.Join(env.work, fmt.Sprintf("operator-%s-%02d.log", o.c.name, o.seq))
	o.logs = append(o.logs, o.logPath)
	o.stopping = false
	args := []string{
		"--kubeconfig", o.kubeconfig(),
		"--namespace", operatorNamespace,
		"--cluster-id", o.c.name,
		"--cluster-scope-namespaces", "*",
		"--key-prefix", keyPrefix,
		"--release-channel", keyPrefix + "released",
		"--metrics-bind-address", "0",
		"--health-probe-bind-address", "0",
		"--leader-elect=true",
		// Waiters retry often, so a lease that ends is taken at once: the
		// contender a Jepsen test wants, and what makes a late stop visible.
		"--wait-backoff-max", "250ms",
		"--zap-log-level", "debug",
		// Scenarios time what the operator logged (apiserver-a-slow: the time without a leader).
		"--zap-time-encoding", "rfc3339nano",
	}
	args = append(args, o.redisArgs...)
	if o.mode == fastLease {
		args = append(args, "--leader-election-lease-duration", "4s",
			"--leader-election-renew-deadline", "3s", "--leader-election-retry-period", "500ms")
	} else {
		args = append(args, "--leader-election-lease-duration", "30s",
			"--leader-election-renew-deadline", "20s", "--leader-election-retry-period", "2s")
	}
	logFile, err := os.OpenFile(o.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		o.mu.Unlock()
		return err
	}
	defer func() { _ = logFile.Close() }()
	_, _ = fmt.Fprintf(logFile, "# %s %s\n", env.managerBin, strings.Join(args, " "))
	cmd := exec.Command(env.managerBin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		o.mu.Unlock()
		return fmt.Errorf("start operator %s: %w", o.c.name, err)
	}
	done := make(chan struct{})
	o.cmd, o.done = cmd, done
	logPath := o.logPath
	o.mu.Unlock()
	go func() {
		err := cmd.Wait()
		o.mu.Lock()
		o.waitErr = err
		if !o.stopping {
			o.crashes = append(o.crashes, fmt.Sprintf("operator %s (pid %d) exited unasked: %v; log %s:\n%s",
				o.c.name, cmd.Process.Pid, err, logPath, utils.TailFile(logPath, 15)))
		}
		o.mu.Unlock()
		close(done)
	}()
	t0 := time.Now()
	err = poll(90*time.Second, func() (bool, string) {
		select {
		case <-done:
			return true, ""
		default:
		}
		b, _ := os.ReadFile(logPath)
		return strings.Contains(string(b), "Starting workers"), "operator " + o.c.name + " has not started its workers"
	})
	if err == nil && o.exited() {
		err = errors.New("operator " + o.c.name + " exited while starting:\n" + utils.TailFile(logPath, 30))
	}
	if err != nil {
		return err
	}
	logf("operator %s (pid %d) leads after %s; log %s", o.c.name, cmd.Process.Pid, since(t0), logPath)
	return nil
}

func (o *operator) exited() bool {
	o.mu.Lock()
	done := o.done
	o.mu.Unlock()
	if done == nil {
		return true
	}
	select {
	case <-done:
		return true
	default:
		return false
	}
}

func (o *operator) pid() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.cmd.Process.Pid
}

// stop sends SIGTERM (and SIGCONT, should it be paused) and waits; after 15 s
// it kills. A graceful stop gives up the leader lease, so a successor leads
// at once.
func (o *operator) stop() {
	cmd, done, ok := o.beginStop()
	if !ok {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	_ = cmd.Process.Signal(syscall.SIGCONT)
	select {
	case <-done:
		return
	case <-time.After(15 * time.Second):
	}
	logf("operator %s ignored SIGTERM for 15s; killing it", o.c.name)
	o.kill()
}

// beginStop marks a stop the test asked for (so the exit is not judged a crash) and returns the
// process and its done channel; ok is false when it has exited already.
func (o *operator) beginStop() (cmd *exec.Cmd, done <-chan struct{}, ok bool) {
	if o.exited() {
		return nil, nil, false
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.stopping = true
	return o.cmd, o.done, true
}

// kill SIGKILLs the process, like a crashed node, and waits until it is gone.
func (o *operator) kill() {
	cmd, done, ok := o.beginStop()
	if !ok {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-done
}

// pause SIGSTOPs the process and returns once all its threads are stopped.
func (o *operator) pause() error {
	pid := o.pid()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return err
	}
	return poll(10*time.Second, func() (bool, string) { return utils.ProcessStopped(pid), "operator not stopped" })
}

func (o *operator) resume() error {
	if o.exited() {
		return nil
	}
	return syscall.Kill(o.pid(), syscall.SIGCONT)
}

// restart stops the process gracefully and starts a new one in mode.
func (o *operator) restart(mode leaseMode) error {
	o.stop()
	o.mode = mode
	return o.start()
}

// ensure starts the operator again if it is not running (after a crash the
// scenario reported), in mode and on the API path slowable asks for.
func (o *operator) ensure(mode leaseMode, slowable bool) error {
	if !o.exited() && o.mode == mode && o.slowable == slowable {
		return nil
	}
	o.slowable = slowable
	return o.restart(mode)
}

// kubeconfig is the operator's path to its API server: through the cluster's API proxy when
// slowable, else direct.
func (o *operator) kubeconfig() string {
	if o.slowable {
		return o.c.operatorKubeconfig
	}
	return o.c.kubeconfig
}

// logMark is a place in an operator's logs: the index of a log and an offset in it.
type logMark struct {
	log    int
	offset int64
}

// mark returns where the operator's logs end now.
func (o *operator) mark() logMark {
	o.mu.Lock()
	defer o.mu.Unlock()
	m := logMark{log: len(o.logs) - 1}
	if st, err := os.Stat(o.logPath); err == nil {
		m.offset = st.Size()
	}
	return m
}

// takeCrashes returns the unexpected exits since the last call, plus the
// first panic logged since m (controller-runtime recovers a panicking
// reconcile and logs it: the process survives, the operator is broken).
func (o *operator) takeCrashes(m logMark) []string {
	o.mu.Lock()
	out := o.crashes
	o.crashes = nil
	logs := slices.Clone(o.logs)
	o.mu.Unlock()
	for i := max(m.log, 0); i < len(logs); i++ {
		b, _ := os.ReadFile(logs[i])
		if i == m.log && int64(len(b)) >= m.offset {
			b = b[m.offset:]
		}
		for line := range strings.SplitSeq(string(b), "\n") {
			if strings.Contains(line, "panic: ") || strings.Contains(line, "Observed a panic") {
				out = append(out, fmt.Sprintf("operator %s logged a panic (%s): %.300s", o.c.name, logs[i], line))
				return out
			}
		}
	}
	return out
}

// logSince returns what the operator logged since m, across restarts.
func (o *operator) logSince(m logMark) string {
	o.mu.Lock()
	logs := slices.Clone(o.logs)
	o.mu.Unlock()
	var b strings.Builder
	for i := max(m.log, 0); i < len(logs); i++ {
		data, _ := os.ReadFile(logs[i])
		if i == m.log && int64(len(data)) >= m.offset {
			data = data[m.offset:]
		}
		b.Write(data)
	}
	return b.String()
}
