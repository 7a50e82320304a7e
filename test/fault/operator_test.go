//go:build fault

package fault

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/lockedjob/lockedjob/test/testkit"
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

// steadyLeaseTiming is steadyLease's leader election.
var steadyLeaseTiming = testkit.LeaderElection{LeaseDuration: 30 * time.Second, RenewDeadline: 20 * time.Second,
	RetryPeriod: 2 * time.Second}

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
	// procs starts each process, operator-<cluster>-NN, and keeps their logs across restarts.
	procs *testkit.Launcher

	mu      sync.Mutex
	proc    *testkit.Process // the latest process
	crashes []string         // unexpected exits, with the log tail
}

func newOperator(c *cluster, redisArgs []string) *operator {
	o := &operator{c: c, redisArgs: redisArgs}
	o.procs = &testkit.Launcher{Bin: env.managerBin, Dir: env.work, Name: "operator-" + c.name, OnUnaskedExit: o.crashed}
	return o
}

// crashed keeps an exit the suite did not ask for, for the scenario's verdict.
func (o *operator) crashed(p *testkit.Process, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.crashes = append(o.crashes, fmt.Sprintf("operator %s (pid %d) exited unasked: %v; log %s:\n%s",
		o.c.name, p.PID(), err, p.LogPath, utils.TailFile(p.LogPath, 15)))
}

// start starts a new process and waits until it leads and its workers run.
func (o *operator) start() error {
	f := testkit.Flags{
		Kubeconfig:             o.kubeconfig(),
		Namespace:              operatorNamespace,
		ClusterID:              o.c.name,
		ClusterScopeNamespaces: "*",
		KeyPrefix:              keyPrefix,
		// Waiters retry often, so a lease that ends is taken at once: the
		// contender a Jepsen test wants, and what makes a late stop visible.
		WaitBackoffMax: 250 * time.Millisecond,
		// Scenarios time what the operator logged (apiserver-a-slow: the time without a leader).
		TimeEncoding:   "rfc3339nano",
		Redis:          o.redisArgs,
		LeaderElection: steadyLeaseTiming,
	}
	if o.mode == fastLease {
		f.LeaderElection = testkit.FastFailover
	}
	p, err := o.procs.Start(f)
	if err != nil {
		return fmt.Errorf("start operator %s: %w", o.c.name, err)
	}
	o.mu.Lock()
	o.proc = p
	o.mu.Unlock()
	if err := p.WaitReady(90 * time.Second); err != nil {
		return fmt.Errorf("operator %s: %w", o.c.name, err)
	}
	logf("operator %s (pid %d) leads after %s; log %s", o.c.name, p.PID(), since(p.Started), p.LogPath)
	return nil
}

// current is the latest process (nil before the first start).
func (o *operator) current() *testkit.Process {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.proc
}

func (o *operator) exited() bool {
	p := o.current()
	return p == nil || p.Exited()
}

// stop stops the process gracefully (SIGTERM), or kills it after testkit.StopGrace. A graceful
// stop gives up the leader lease, so a successor leads at once.
func (o *operator) stop() {
	p := o.current()
	if p == nil {
		return
	}
	forced, err := p.Stop()
	if forced {
		logf("operator %s ignored SIGTERM for %s; killed it", o.c.name, testkit.StopGrace)
	}
	if err != nil {
		logf("operator %s: %v", o.c.name, err)
	}
}

// kill SIGKILLs the process, like a crashed node, and waits until it is gone.
func (o *operator) kill() {
	if p := o.current(); p != nil {
		if err := p.Kill(); err != nil {
			logf("operator %s: %v", o.c.name, err)
		}
	}
}

// pause SIGSTOPs the process and returns once all its threads are stopped.
func (o *operator) pause() error { return o.current().Pause() }

func (o *operator) resume() error {
	if o.exited() {
		return nil
	}
	return o.current().Resume()
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

// mark returns where the operator's logs end now.
func (o *operator) mark() testkit.LogMark { return o.procs.Mark() }

// takeCrashes returns the unexpected exits since the last call, plus the
// first panic logged since m (controller-runtime recovers a panicking
// reconcile and logs it: the process survives, the operator is broken).
func (o *operator) takeCrashes(m testkit.LogMark) []string {
	o.mu.Lock()
	out := o.crashes
	o.crashes = nil
	o.mu.Unlock()
	panicked := func(line string) bool {
		return strings.Contains(line, "panic: ") || strings.Contains(line, "Observed a panic")
	}
	if line, log, ok := o.procs.FirstLineSince(m, panicked); ok {
		out = append(out, fmt.Sprintf("operator %s logged a panic (%s): %.300s", o.c.name, log, line))
	}
	return out
}

// logSince returns what the operator logged since m, across restarts.
func (o *operator) logSince(m testkit.LogMark) string { return o.procs.LogSince(m) }
