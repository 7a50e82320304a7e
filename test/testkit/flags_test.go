package testkit

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestFlagsArgs pins the command lines both suites start their managers with: the order is the
// one each suite wrote by hand before the launcher was shared, so their logs read as before.
func TestFlagsArgs(t *testing.T) {
	cases := map[string]struct {
		flags Flags
		want  []string
	}{
		"an e2e manager on one Redis, fast failover": {
			flags: Flags{Kubeconfig: "/k", Namespace: "lockedjob-system", ClusterID: "e2e", KeyPrefix: "e2e-s1:",
				WaitBackoffMax: 2 * time.Second, RedlockNodeTimeout: 250 * time.Millisecond,
				Redis: RedisAddrs("127.0.0.1:6000"), LeaderElection: FastFailover},
			want: []string{"--kubeconfig", "/k", "--namespace", "lockedjob-system", "--cluster-id", "e2e",
				"--key-prefix", "e2e-s1:", "--release-channel", "e2e-s1:released",
				"--metrics-bind-address", "0", "--health-probe-bind-address", "0", "--leader-elect=true",
				"--wait-backoff-max", "2s", "--redlock-node-timeout", "250ms", "--zap-log-level", "debug",
				"--redis-addr", "127.0.0.1:6000",
				"--leader-election-lease-duration", "4s", "--leader-election-renew-deadline", "3s",
				"--leader-election-retry-period", "500ms"},
		},
		"an e2e manager on three Redlock nodes keeps the default leader election": {
			flags: Flags{Kubeconfig: "/k", Namespace: "ns", ClusterID: "e2e", KeyPrefix: "p:",
				WaitBackoffMax: 2 * time.Second, RedlockNodeTimeout: 250 * time.Millisecond,
				Redis: RedisAddrs("a:1", "b:2", "c:3")},
			want: []string{"--kubeconfig", "/k", "--namespace", "ns", "--cluster-id", "e2e",
				"--key-prefix", "p:", "--release-channel", "p:released",
				"--metrics-bind-address", "0", "--health-probe-bind-address", "0", "--leader-elect=true",
				"--wait-backoff-max", "2s", "--redlock-node-timeout", "250ms", "--zap-log-level", "debug",
				"--redis-addrs", "a:1,b:2,c:3"},
		},
		"a fault operator behind Sentinel, with its own lease": {
			flags: Flags{Kubeconfig: "/k", Namespace: "lockedjob-system", ClusterID: "a", ClusterScopeNamespaces: "*",
				KeyPrefix: "fault:", WaitBackoffMax: 250 * time.Millisecond, TimeEncoding: "rfc3339nano",
				Redis: []string{"--redis-addrs", "s:1", "--redis-sentinel-master", "fault"},
				LeaderElection: LeaderElection{LeaseDuration: 30 * time.Second, RenewDeadline: 20 * time.Second,
					RetryPeriod: 2 * time.Second}},
			want: []string{"--kubeconfig", "/k", "--namespace", "lockedjob-system", "--cluster-id", "a",
				"--cluster-scope-namespaces", "*", "--key-prefix", "fault:", "--release-channel", "fault:released",
				"--metrics-bind-address", "0", "--health-probe-bind-address", "0", "--leader-elect=true",
				"--wait-backoff-max", "250ms", "--zap-log-level", "debug", "--zap-time-encoding", "rfc3339nano",
				"--redis-addrs", "s:1", "--redis-sentinel-master", "fault",
				"--leader-election-lease-duration", "30s", "--leader-election-renew-deadline", "20s",
				"--leader-election-retry-period", "2s"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, tc.flags.Args()); diff != "" {
				t.Errorf("unexpected args (-want,+got):\n%s", diff)
			}
		})
	}
}
