package testkit

import (
	"strings"
	"time"
)

// Flags are the manager flags a suite chooses. Args renders them in one fixed order, so the
// command line at the top of each log reads the same from run to run; a zero field leaves its
// flag out, and the manager's default applies.
type Flags struct {
	Kubeconfig string
	// Namespace holds the leader-election Lease and the token-key Secret.
	Namespace string
	ClusterID string
	// ClusterScopeNamespaces is --cluster-scope-namespaces ("*": every namespace may take locks
	// of scope Cluster).
	ClusterScopeNamespaces string
	// KeyPrefix is --key-prefix; the release channel is named after it, so two suites (or two
	// scenarios) on one Redis hear only their own releases.
	KeyPrefix      string
	WaitBackoffMax time.Duration
	// RedlockNodeTimeout is --redlock-node-timeout.
	RedlockNodeTimeout time.Duration
	// TimeEncoding is --zap-time-encoding (e.g. rfc3339nano, for a scenario that times log lines).
	TimeEncoding string
	// Redis are the flags that name the Redis servers: RedisAddrs, or Sentinel's flags.
	Redis []string
	// LeaderElection is the leader-election timing; the zero value keeps the manager's defaults.
	LeaderElection LeaderElection
}

// LeaderElection is the manager's leader-election timing.
type LeaderElection struct {
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// FastFailover lets the successor of a SIGKILLed manager lead within about four seconds. A SIGSTOP
// longer than its renew deadline makes the paused leader step down when it resumes.
var FastFailover = LeaderElection{LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second,
	RetryPeriod: 500 * time.Millisecond}

// RedisAddrs are the flags for Redis at addrs: one server is --redis-addr, several are the
// independent nodes of Redlock (--redis-addrs).
func RedisAddrs(addrs ...string) []string {
	if len(addrs) == 1 {
		return []string{"--redis-addr", addrs[0]}
	}
	return []string{"--redis-addrs", strings.Join(addrs, ",")}
}

// Args is the manager's command line. Metrics and probes are off: several managers run side by
// side on one machine, and no test scrapes them. Debug logs are on, because the suites read them.
func (f Flags) Args() []string {
	args := []string{
		"--kubeconfig", f.Kubeconfig,
		"--namespace", f.Namespace,
		"--cluster-id", f.ClusterID,
	}
	if f.ClusterScopeNamespaces != "" {
		args = append(args, "--cluster-scope-namespaces", f.ClusterScopeNamespaces)
	}
	args = append(args,
		"--key-prefix", f.KeyPrefix,
		"--release-channel", f.KeyPrefix+"released",
		"--metrics-bind-address", "0",
		"--health-probe-bind-address", "0",
		"--leader-elect=true",
	)
	if f.WaitBackoffMax > 0 {
		args = append(args, "--wait-backoff-max", f.WaitBackoffMax.String())
	}
	if f.RedlockNodeTimeout > 0 {
		args = append(args, "--redlock-node-timeout", f.RedlockNodeTimeout.String())
	}
	args = append(args, "--zap-log-level", "debug")
	if f.TimeEncoding != "" {
		args = append(args, "--zap-time-encoding", f.TimeEncoding)
	}
	args = append(args, f.Redis...)
	if le := f.LeaderElection; le != (LeaderElection{}) {
		args = append(args,
			"--leader-election-lease-duration", le.LeaseDuration.String(),
			"--leader-election-renew-deadline", le.RenewDeadline.String(),
			"--leader-election-retry-period", le.RetryPeriod.String())
	}
	return args
}
