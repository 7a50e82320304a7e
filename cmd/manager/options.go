package main

import (
	"flag"
	"os"
	"strings"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/lockedjob/lockedjob/internal/locks"
	"github.com/lockedjob/lockedjob/internal/webhook"
)

// options are the command-line settings.
type options struct {
	metricsAddr, probeAddr string
	pprofAddr              string
	secureMetrics          bool
	showVersion            bool
	leaderElect            bool
	leaseDuration          time.Duration
	renewDeadline          time.Duration
	retryPeriod            time.Duration
	namespace              string

	redisMode               string
	redisAddr, redisAddrs   string
	redisSentinelMaster     string
	redisCluster, redisTLS  bool
	redisUsername           string
	redisPasswordFile       string
	redisTLSCAFile          string
	redisDB                 int
	keyPrefix               string
	releaseChannel          string
	clusterID               string
	tokenKeyFile            string
	clusterScopeNamespaces  string
	statusInterval          time.Duration
	waitBackoffMax          time.Duration
	queueRecheck            time.Duration
	redlockNodeTimeout      time.Duration
	waitReplicas            int
	waitReplicasTimeout     time.Duration
	maxConcurrentReconciles int
	kubeAPIQPS              float64
	kubeAPIBurst            int
	redisTimeout            time.Duration
	legacyLockKeys          bool
	allowEviction           bool

	guardAdmission string
	webhook        webhook.Options
}

// The values of --guard-admission.
const (
	guardAdmissionPolicy  = "policy"
	guardAdmissionWebhook = "webhook"
)

func parseFlags() (options, zap.Options) {
	var o options
	flag.StringVar(&o.metricsAddr, "metrics-bind-address", "0", "Address of the Prometheus metrics endpoint, e.g. :8443 (secure) or :8080; \"0\" turns it off.")
	flag.BoolVar(&o.secureMetrics, "metrics-secure", true, "Serve metrics over HTTPS, allowing only callers that may get /metrics (TokenReview + SubjectAccessReview).")
	flag.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081", "Address of the /healthz and /readyz endpoints.")
	flag.StringVar(&o.pprofAddr, "pprof-bind-address", "0", "Address of Go's /debug/pprof endpoints, for profiling the operator, e.g. 127.0.0.1:6060; \"0\" (default) turns them off. Unauthenticated: bind it to loopback or keep it off.")
	flag.BoolVar(&o.leaderElect, "leader-elect", true, "Elect a leader, so only one replica acts at a time.")
	// A new leader re-adopts the locks of a crashed one only after the lease runs out, so keep
	// lease duration plus start-up time well under the shortest spec.lock.ttl (default
	// batchv1alpha1.DefaultLockTTL).
	flag.DurationVar(&o.leaseDuration, "leader-election-lease-duration", 15*time.Second, "How long a crashed leader's lease blocks a successor. Keep it well under the shortest lock TTL.")
	flag.DurationVar(&o.renewDeadline, "leader-election-renew-deadline", 10*time.Second, "How long the leader keeps trying to renew its lease before it steps down.")
	flag.DurationVar(&o.retryPeriod, "leader-election-retry-period", 2*time.Second, "How often candidates try to take the lease.")
	flag.StringVar(&o.namespace, "namespace", envOr("POD_NAMESPACE", ""),
		"The operator's namespace (leader-election lease, token-key Secret). Default: $POD_NAMESPACE. Without either, the lease goes to the kubeconfig's namespace and the token key must come from --token-key-file.")
	flag.StringVar(&o.redisMode, "redis-mode", "",
		"How to reach Redis: single (one node, --redis-addr), sentinel (the primary that the Sentinels at --redis-addrs name for --redis-sentinel-master), cluster (Redis Cluster seeds at --redis-addrs) or redlock (a majority of independent nodes at --redis-addrs, an odd number, at least 3). Default: sentinel with --redis-sentinel-master, cluster with --redis-cluster, redlock with --redis-addrs, else single.")
	flag.StringVar(&o.redisAddr, "redis-addr", envOr("LOCKEDJOB_REDIS_ADDR", "127.0.0.1:6379"), "Redis address (host:port) of single mode. Env: LOCKEDJOB_REDIS_ADDR.")
	flag.StringVar(&o.redisAddrs, "redis-addrs", envOr("LOCKEDJOB_REDIS_ADDRS", ""),
		"Comma-separated addresses of the Sentinels (sentinel mode), the Cluster seeds (cluster mode) or the independent nodes (redlock mode). Env: LOCKEDJOB_REDIS_ADDRS.")
	flag.StringVar(&o.redisSentinelMaster, "redis-sentinel-master", "", "Sentinel master name (sentinel mode).")
	flag.BoolVar(&o.redisCluster, "redis-cluster", false, "Deprecated alias of --redis-mode cluster.")
	flag.StringVar(&o.redisUsername, "redis-username", "", "Redis ACL user name.")
	flag.StringVar(&o.redisPasswordFile, "redis-password-file", envOr("LOCKEDJOB_REDIS_PASSWORD_FILE", ""), "File holding the Redis password (never pass it as a flag).")
	flag.BoolVar(&o.redisTLS, "redis-tls", false, "Connect to Redis over TLS.")
	flag.StringVar(&o.redisTLSCAFile, "redis-tls-ca-file", "", "CA bundle to verify Redis' TLS certificate (default: system roots).")
	flag.IntVar(&o.redisDB, "redis-db", 0, "Redis database number (single and sentinel modes only).")
	flag.StringVar(&o.keyPrefix, "key-prefix", "lockedjob:", "Prefix of every Redis key the operator writes.")
	flag.StringVar(&o.releaseChannel, "release-channel", "lockedjob:released", "Redis pub/sub channel that announces releases, so waiters start at once.")
	flag.StringVar(&o.clusterID, "cluster-id", "", "Name of this cluster in holder names and tokens. Default: the UID of the kube-system namespace.")
	flag.StringVar(&o.tokenKeyFile, "token-key-file", "", "File holding the HMAC key for lock tokens. Default: the Secret "+locks.TokenSecretName+" in --namespace, created on first start.")
	flag.StringVar(&o.clusterScopeNamespaces, "cluster-scope-namespaces", "", "Comma-separated namespaces allowed to use spec.lock.scope Cluster; \"*\" allows all.")
	flag.DurationVar(&o.statusInterval, "status-interval", 0, "Deprecated and ignored: renewals are no longer written to status.")
	flag.DurationVar(&o.waitBackoffMax, "wait-backoff-max", 15*time.Second, "Longest pause between two lock attempts of the LockedJob at the head of a lock's queue, and of a waiting guarded Job or Pod (release wake-ups come sooner).")
	flag.DurationVar(&o.queueRecheck, "queue-recheck", 0, "How often a waiter (LockedJob, guarded Job or Pod) behind the head of its queue asks Redis again; handoffs wake it in between. Default: 20 × --wait-backoff-max.")
	flag.DurationVar(&o.redlockNodeTimeout, "redlock-node-timeout", 50*time.Millisecond, "Per-node timeout of Redlock operations.")
	flag.IntVar(&o.waitReplicas, "redis-wait-replicas", 0, "After acquiring a lock, WAIT until this many replicas acknowledged it, or give it back (0 = off; not in cluster mode).")
	flag.DurationVar(&o.waitReplicasTimeout, "redis-wait-timeout", 500*time.Millisecond, "How long --redis-wait-replicas waits.")
	flag.IntVar(&o.maxConcurrentReconciles, "max-concurrent-reconciles", 4, "LockedJobs reconciled in parallel, and as many guarded Jobs and as many guarded Pods.")
	// controller-runtime's default: no client-side limit; the API server's priority and fairness
	// queues the operator's requests (and config/ gives its Lease requests their own level).
	flag.Float64Var(&o.kubeAPIQPS, "kube-api-qps", -1, "Queries per second the manager's API client may send; -1 (default) sets no client-side limit and leaves it to the API server's priority and fairness.")
	flag.IntVar(&o.kubeAPIBurst, "kube-api-burst", 30, "Burst of the manager's API client above a positive --kube-api-qps.")
	flag.BoolVar(&o.allowEviction, "allow-redis-eviction", false, "Start even when a Redis node's maxmemory-policy may evict keys (an evicted lock can have two holders). Off: refuse to start.")
	flag.BoolVar(&o.legacyLockKeys, "legacy-lock-keys", true, "Before acquiring a Namespace-scoped lock, wait while it is held under the key layout of versions before the cluster ID was part of it (docs/design.md, Migration). Turn off once no LockedJob acquired before the upgrade is left.")
	flag.DurationVar(&o.redisTimeout, "redis-timeout", 2*time.Second, "Deadline of each Redis call a reconcile makes (renewals have their own budget, from the lease).")
	flag.StringVar(&o.guardAdmission, "guard-admission", guardAdmissionPolicy,
		"Who gates guarded Jobs and Pods at creation: policy (the MutatingAdmissionPolicies of config/guard, Kubernetes 1.36 and later; the manager serves nothing) or webhook (the manager serves the same mutation as a webhook on every replica and rotates its certificate).")
	flag.StringVar(&o.webhook.Host, "webhook-host", "", "Address the guard webhook listens on (--guard-admission webhook); empty: all.")
	flag.IntVar(&o.webhook.Port, "webhook-port", webhook.DefaultPort, "Port of the guard webhook (--guard-admission webhook).")
	flag.StringVar(&o.webhook.CertDir, "webhook-cert-dir", webhook.DefaultCertDir, "Where the guard webhook's Secret is mounted (tls.crt, tls.key).")
	flag.StringVar(&o.webhook.SecretName, "webhook-secret-name", webhook.DefaultSecretName, "Secret in --namespace that holds the guard webhook's CA and serving certificate, rotated by the manager.")
	flag.StringVar(&o.webhook.ServiceName, "webhook-service-name", webhook.DefaultServiceName, "Service in --namespace in front of the guard webhook (the certificate's name).")
	flag.StringVar(&o.webhook.ConfigurationName, "webhook-configuration-name", webhook.DefaultConfigurationName, "MutatingWebhookConfiguration whose caBundle the manager writes.")
	flag.BoolVar(&o.showVersion, "version", false, "Print the operator's version, commit and build date, and exit.")
	zapOpts := zap.Options{Development: true}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	return o, zapOpts
}

func splitList(s string) []string {
	var out []string
	for part := range strings.SplitSeq(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
