/*
Copyright 2026.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

// Command manager runs the lockedjob operator. It only wires things together: flags, the Redis
// backend, the manager and the reconciler. Secrets (Redis password, token key) come from files or
// a Kubernetes Secret, never from flags.
package main

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	_ "k8s.io/client-go/plugin/pkg/client/auth"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/controllers"
	"github.com/lockedjob/lockedjob/internal/campaign"
	"github.com/lockedjob/lockedjob/internal/redislock"
	// +kubebuilder:scaffold:imports
)

var (
	scheme   = runtime.NewScheme()
	setupLog = ctrl.Log.WithName("setup")
)

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(batchv1alpha1.AddToScheme(scheme))
	// +kubebuilder:scaffold:scheme
}

// tokenSecretName holds the HMAC key for lock tokens, in the operator's namespace.
const tokenSecretName = "lockedjob-token-key"

// options are the command-line settings.
type options struct {
	metricsAddr, probeAddr string
	secureMetrics          bool
	leaderElect            bool
	leaseDuration          time.Duration
	renewDeadline          time.Duration
	retryPeriod            time.Duration
	namespace              string

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
}

func parseFlags() (options, zap.Options) {
	var o options
	flag.StringVar(&o.metricsAddr, "metrics-bind-address", "0", "Address of the Prometheus metrics endpoint, e.g. :8443 (secure) or :8080; \"0\" turns it off.")
	flag.BoolVar(&o.secureMetrics, "metrics-secure", true, "Serve metrics over HTTPS, allowing only callers that may get /metrics (TokenReview + SubjectAccessReview).")
	flag.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081", "Address of the /healthz and /readyz endpoints.")
	flag.BoolVar(&o.leaderElect, "leader-elect", true, "Elect a leader, so only one replica acts at a time.")
	// A new leader re-adopts the locks of a crashed one only after the lease runs out, so keep
	// lease duration plus start-up time well under the shortest spec.lock.ttl (default 30s).
	flag.DurationVar(&o.leaseDuration, "leader-election-lease-duration", 15*time.Second, "How long a crashed leader's lease blocks a successor. Keep it well under the shortest lock TTL.")
	flag.DurationVar(&o.renewDeadline, "leader-election-renew-deadline", 10*time.Second, "How long the leader keeps trying to renew its lease before it steps down.")
	flag.DurationVar(&o.retryPeriod, "leader-election-retry-period", 2*time.Second, "How often candidates try to take the lease.")
	flag.StringVar(&o.namespace, "namespace", envOr("POD_NAMESPACE", ""),
		"The operator's namespace (leader-election lease, token-key Secret). Default: $POD_NAMESPACE. Without either, the lease goes to the kubeconfig's namespace and the token key must come from --token-key-file.")
	flag.StringVar(&o.redisAddr, "redis-addr", envOr("LOCKEDJOB_REDIS_ADDR", "127.0.0.1:6379"), "Redis address (host:port) for a single node. Env: LOCKEDJOB_REDIS_ADDR.")
	flag.StringVar(&o.redisAddrs, "redis-addrs", envOr("LOCKEDJOB_REDIS_ADDRS", ""),
		"Comma-separated addresses: independent Redlock nodes (an odd number, at least 3), or Sentinel/Cluster seeds with --redis-sentinel-master or --redis-cluster.")
	flag.StringVar(&o.redisSentinelMaster, "redis-sentinel-master", "", "Sentinel master name; --redis-addrs are then the Sentinels.")
	flag.BoolVar(&o.redisCluster, "redis-cluster", false, "Treat --redis-addrs as Redis Cluster seed nodes.")
	flag.StringVar(&o.redisUsername, "redis-username", "", "Redis ACL user name.")
	flag.StringVar(&o.redisPasswordFile, "redis-password-file", envOr("LOCKEDJOB_REDIS_PASSWORD_FILE", ""), "File holding the Redis password (never pass it as a flag).")
	flag.BoolVar(&o.redisTLS, "redis-tls", false, "Connect to Redis over TLS.")
	flag.StringVar(&o.redisTLSCAFile, "redis-tls-ca-file", "", "CA bundle to verify Redis' TLS certificate (default: system roots).")
	flag.IntVar(&o.redisDB, "redis-db", 0, "Redis database number (single node and Sentinel only).")
	flag.StringVar(&o.keyPrefix, "key-prefix", "lockedjob:", "Prefix of every Redis key the operator writes.")
	flag.StringVar(&o.releaseChannel, "release-channel", "lockedjob:released", "Redis pub/sub channel that announces releases, so waiters start at once.")
	flag.StringVar(&o.clusterID, "cluster-id", "", "Name of this cluster in holder names and tokens. Default: the UID of the kube-system namespace.")
	flag.StringVar(&o.tokenKeyFile, "token-key-file", "", "File holding the HMAC key for lock tokens. Default: the Secret "+tokenSecretName+" in --namespace, created on first start.")
	flag.StringVar(&o.clusterScopeNamespaces, "cluster-scope-namespaces", "", "Comma-separated namespaces allowed to use spec.lock.scope Cluster; \"*\" allows all.")
	flag.DurationVar(&o.statusInterval, "status-interval", 0, "Deprecated and ignored: renewals are no longer written to status.")
	flag.DurationVar(&o.waitBackoffMax, "wait-backoff-max", 15*time.Second, "Longest pause between two lock attempts of the LockedJob at the head of a lock's queue (release wake-ups come sooner).")
	flag.DurationVar(&o.queueRecheck, "queue-recheck", 0, "How often a LockedJob behind the head of its queue asks Redis again; handoffs tell it its place in between. Default: 20 × --wait-backoff-max.")
	flag.DurationVar(&o.redlockNodeTimeout, "redlock-node-timeout", 50*time.Millisecond, "Per-node timeout of Redlock operations.")
	flag.IntVar(&o.waitReplicas, "redis-wait-replicas", 0, "After acquiring a lock, WAIT until this many replicas acknowledged it, or give it back (0 = off; not with --redis-cluster).")
	flag.DurationVar(&o.waitReplicasTimeout, "redis-wait-timeout", 500*time.Millisecond, "How long --redis-wait-replicas waits.")
	flag.IntVar(&o.maxConcurrentReconciles, "max-concurrent-reconciles", 4, "LockedJobs reconciled in parallel.")
	// controller-runtime's default: no client-side limit; the API server's priority and fairness
	// queues the operator's requests (and config/ gives its Lease requests their own level).
	flag.Float64Var(&o.kubeAPIQPS, "kube-api-qps", -1, "Queries per second the manager's API client may send; -1 (default) sets no client-side limit and leaves it to the API server's priority and fairness.")
	flag.IntVar(&o.kubeAPIBurst, "kube-api-burst", 30, "Burst of the manager's API client above a positive --kube-api-qps.")
	flag.BoolVar(&o.allowEviction, "allow-redis-eviction", false, "Start even when a Redis node's maxmemory-policy may evict keys (an evicted lock can have two holders). Off: refuse to start.")
	flag.BoolVar(&o.legacyLockKeys, "legacy-lock-keys", true, "Before acquiring a Namespace-scoped lock, wait while it is held under the key layout of versions before the cluster ID was part of it (docs/design.md, Migration). Turn off once no LockedJob acquired before the upgrade is left.")
	flag.DurationVar(&o.redisTimeout, "redis-timeout", 2*time.Second, "Deadline of each Redis call a reconcile makes (renewals have their own budget, from the lease).")
	zapOpts := zap.Options{Development: true}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	return o, zapOpts
}

func main() {
	o, zapOpts := parseFlags()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	if err := run(ctrl.SetupSignalHandler(), o); err != nil {
		setupLog.Error(err, "Manager stopped with an error")
		os.Exit(1)
	}
}

// run runs the operator until ctx ends. The lock book, the health and metrics endpoints live as
// long as the process; a manager lives as long as its leadership, and a lost one is replaced by a
// new manager that campaigns again (docs/design.md, "Leadership").
func run(ctx context.Context, o options) error {
	// o.namespace stays as told: only the lease may fall back to the kubeconfig's namespace.
	leaseNamespace := o.namespace
	if leaseNamespace == "" {
		ns, _, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(clientcmd.NewDefaultClientConfigLoadingRules(), nil).Namespace()
		if err != nil || ns == "" {
			ns = "default"
		}
		leaseNamespace = ns
	}

	lockClient, err := newLockClient(o)
	if err != nil {
		return err
	}
	if err := checkEviction(ctx, lockClient, o.allowEviction); err != nil {
		return err
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = float32(o.kubeAPIQPS), o.kubeAPIBurst

	// The manager's client reads from a cache that has not started yet; these one-off reads and the
	// Secret create go straight to the API server.
	direct, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	identity, err := newIdentity(ctx, direct, o)
	if err != nil {
		return err
	}
	book := controllers.NewLockBook(lockClient)
	defer book.Stop()

	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	if err := serveEndpoints(ctx, stop, o, cfg, lockClient); err != nil {
		return err
	}
	setupLog.Info("Starting manager", "namespace", leaseNamespace, "clusterID", identity.ClusterID, "redisNodes", lockClient.Nodes())
	if o.statusInterval != 0 {
		setupLog.Info("--status-interval is deprecated and ignored: renewals are no longer written to status")
	}
	build := func() (campaign.Manager, error) { return newManager(ctx, cfg, o, leaseNamespace, identity, book) }
	err = campaign.Run(ctx, build, o.retryPeriod, setupLog)
	if cause := context.Cause(ctx); err == nil && cause != nil && !errors.Is(cause, context.Canceled) {
		return cause // an endpoint failed
	}
	return err
}

// newManager builds one manager with its reconciler over the process's lock book. Everything it
// registers belongs to this manager, so the next one (after a lost leadership) registers it again.
func newManager(ctx context.Context, cfg *rest.Config, o options, leaseNamespace string, id controllers.Identity, book *controllers.LockBook) (ctrl.Manager, error) {
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme: scheme,
		// Served by serveEndpoints for the whole process, not per manager.
		Metrics:                       metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress:        "0",
		LeaderElection:                o.leaderElect,
		LeaderElectionID:              "lockedjob.batch.lockedjob.dev",
		LeaderElectionNamespace:       leaseNamespace,
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 &o.leaseDuration,
		RenewDeadline:                 &o.renewDeadline,
		RetryPeriod:                   &o.retryPeriod,
		// controller-runtime refuses a controller name used before in the process; the next
		// manager's controller is the same one, started again.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		return nil, fmt.Errorf("create manager: %w", err)
	}
	if err := setupReconcilers(ctx, mgr, o, id, book); err != nil {
		return nil, err
	}
	return mgr, nil
}

func metricsOptions(o options) metricsserver.Options {
	m := metricsserver.Options{BindAddress: o.metricsAddr, SecureServing: o.secureMetrics}
	if o.secureMetrics {
		m.FilterProvider = filters.WithAuthenticationAndAuthorization
	}
	return m
}

func setupReconcilers(ctx context.Context, mgr ctrl.Manager, o options, id controllers.Identity, book *controllers.LockBook) error {
	r := &controllers.LockedJobReconciler{
		Client:   mgr.GetClient(),
		Scheme:   mgr.GetScheme(),
		Recorder: mgr.GetEventRecorder("lockedjob"),
		Locks:    book,
		Config: controllers.Config{
			Identity:                id,
			ClusterScopeNamespaces:  splitList(o.clusterScopeNamespaces),
			WaitBackoffMax:          o.waitBackoffMax,
			QueueRecheck:            o.queueRecheck,
			MaxConcurrentReconciles: o.maxConcurrentReconciles,
			RedisTimeout:            o.redisTimeout,
			LegacyLockKeys:          o.legacyLockKeys,
			// A successor re-adopts only after the old leader's lease ran out.
			FailoverTime: o.leaseDuration,
		},
	}
	if err := r.SetupWithManager(ctx, mgr); err != nil {
		return fmt.Errorf("set up lockedjob controller: %w", err)
	}
	// +kubebuilder:scaffold:builder
	return nil
}

// serveEndpoints starts the health probe and metrics servers for the life of the process rather
// than of one manager: they must stay up while a process that lost its leadership builds the next
// manager, and a manager's own servers would bind their ports again before the last ones closed.
// A server that fails stops the process through stop.
//
// Alive while the process runs; ready only while Redis answers, since a replica that cannot reach
// Redis cannot acquire or renew locks.
func serveEndpoints(ctx context.Context, stop context.CancelCauseFunc, o options, cfg *rest.Config, c *redislock.Client) error {
	var servers []manager.Runnable
	if o.probeAddr != "" && o.probeAddr != "0" {
		ln, err := net.Listen("tcp", o.probeAddr)
		if err != nil {
			return fmt.Errorf("health probe address %s: %w", o.probeAddr, err)
		}
		mux := http.NewServeMux()
		handle := func(path string, checks map[string]healthz.Checker) {
			h := http.StripPrefix(path, &healthz.Handler{Checks: checks})
			mux.Handle(path, h)
			mux.Handle(path+"/", h) // one check by name: /readyz/redis
		}
		handle("/healthz", map[string]healthz.Checker{"healthz": healthz.Ping})
		handle("/readyz", map[string]healthz.Checker{"redis": controllers.RedisReadyCheck(c)})
		servers = append(servers, &manager.Server{Name: "health probe", Listener: ln,
			Server: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}})
	}
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return fmt.Errorf("metrics server client: %w", err)
	}
	metrics, err := metricsserver.NewServer(metricsOptions(o), cfg, httpClient)
	if err != nil {
		return fmt.Errorf("metrics server: %w", err)
	}
	if metrics != nil {
		servers = append(servers, metrics)
	}
	for _, srv := range servers {
		go func() {
			if err := srv.Start(ctx); err != nil {
				stop(fmt.Errorf("serve endpoints: %w", err))
			}
		}()
	}
	return nil
}

// checkEviction refuses a Redis that may evict lock keys under memory pressure: eviction deletes a
// held lock, and the next waiter acquires it beside a running Job. A policy that cannot be read (ACL)
// or a Redis that does not answer yet is logged loudly, not fatal: the operator must start while
// Redis is briefly away.
func checkEviction(ctx context.Context, c *redislock.Client, allow bool) error {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	err := c.CheckEvictionPolicy(cctx)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, redislock.ErrEvictionPolicy) && !allow:
		return fmt.Errorf("%w (set maxmemory-policy noeviction, or --allow-redis-eviction to run anyway)", err)
	default:
		setupLog.Error(err, "Could not confirm that Redis never evicts lock keys; an evicted lock can have two holders")
		return nil
	}
}

// newLockClient builds the lock client for the configured backend.
func newLockClient(o options) (*redislock.Client, error) {
	password, err := readSecretFile(o.redisPasswordFile)
	if err != nil {
		return nil, fmt.Errorf("redis password: %w", err)
	}
	var tlsConfig *tls.Config
	if o.redisTLS {
		tlsConfig = &tls.Config{MinVersion: tls.VersionTLS12}
		if o.redisTLSCAFile != "" {
			pem, err := os.ReadFile(o.redisTLSCAFile)
			if err != nil {
				return nil, fmt.Errorf("redis CA: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("redis CA %s: no certificate found", o.redisTLSCAFile)
			}
			tlsConfig.RootCAs = pool
		}
	}
	opts := []redislock.Option{
		redislock.WithKeyPrefix(o.keyPrefix),
		redislock.WithReleaseNotifications(o.releaseChannel),
		redislock.WithNodeTimeout(o.redlockNodeTimeout),
	}
	if o.waitReplicas > 0 {
		if o.redisCluster {
			return nil, errors.New("--redis-wait-replicas does not work with --redis-cluster")
		}
		opts = append(opts, redislock.WithWaitReplicas(o.waitReplicas, o.waitReplicasTimeout))
	}
	addrs := splitList(o.redisAddrs)
	universal := func(addrs []string) redis.UniversalClient {
		return redis.NewUniversalClient(&redis.UniversalOptions{
			Addrs: addrs, MasterName: o.redisSentinelMaster, IsClusterMode: o.redisCluster,
			Username: o.redisUsername, Password: password, DB: o.redisDB, TLSConfig: tlsConfig,
			// Deadlines come from contexts (the keeper budgets rounds by the lease); spare
			// connections are dialled ahead, so a connection lost to a fault is replaced before a
			// renewal needs it; no CLIENT SETINFO, one round trip less per new connection.
			ContextTimeoutEnabled: true, MinIdleConns: 2, DisableIdentity: true,
		})
	}
	switch {
	case o.redisSentinelMaster != "" || o.redisCluster:
		if len(addrs) == 0 {
			return nil, errors.New("--redis-sentinel-master and --redis-cluster need --redis-addrs")
		}
		return redislock.New(universal(addrs), opts...)
	case len(addrs) > 0:
		nodes := make([]redis.UniversalClient, len(addrs))
		for i, a := range addrs {
			nodes[i] = universal([]string{a})
		}
		return redislock.NewRedlock(nodes, opts...)
	default:
		return redislock.New(universal([]string{o.redisAddr}), opts...)
	}
}

// newIdentity derives the cluster ID and loads (or creates) the token key.
//
// The token-key Secret is read or created only in a namespace the operator was told (--namespace
// or POD_NAMESPACE), never in the kubeconfig's: that one is whatever the last context switch left,
// and a key made there would be a second key, unguarded, with which no held lock can be re-adopted.
func newIdentity(ctx context.Context, c client.Client, o options) (controllers.Identity, error) {
	id := controllers.Identity{ClusterID: o.clusterID}
	if o.tokenKeyFile == "" && o.namespace == "" {
		return id, fmt.Errorf("token key Secret %s: set --namespace (or POD_NAMESPACE) to the operator's namespace, or use --token-key-file; the kubeconfig's namespace is not used for it", tokenSecretName)
	}
	if id.ClusterID == "" {
		ns := &corev1.Namespace{}
		if err := c.Get(ctx, client.ObjectKey{Name: metav1.NamespaceSystem}, ns); err != nil {
			return id, fmt.Errorf("derive cluster ID from the kube-system namespace (or set --cluster-id): %w", err)
		}
		id.ClusterID = string(ns.UID)[:8]
	}
	if o.tokenKeyFile != "" {
		key, err := readSecretFile(o.tokenKeyFile)
		if err != nil || len(key) < 16 {
			return id, fmt.Errorf("token key file %s must hold at least 16 bytes: %v", o.tokenKeyFile, err)
		}
		id.TokenKey = []byte(key)
		return id, nil
	}
	key, err := ensureTokenSecret(ctx, c, o.namespace)
	if err != nil {
		return id, err
	}
	id.TokenKey = key
	return id, nil
}

// ensureTokenSecret reads the token key from its Secret, creating it with 32 random bytes on first
// start. Two replicas racing to create it agree on whichever write won.
func ensureTokenSecret(ctx context.Context, c client.Client, namespace string) ([]byte, error) {
	secret := &corev1.Secret{}
	key := client.ObjectKey{Namespace: namespace, Name: tokenSecretName}
	err := c.Get(ctx, key, secret)
	if apierrors.IsNotFound(err) {
		random := make([]byte, 32)
		if _, err := rand.Read(random); err != nil {
			return nil, fmt.Errorf("generate token key: %w", err)
		}
		secret = &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: tokenSecretName, Namespace: namespace},
			Data:       map[string][]byte{"key": random},
		}
		err = c.Create(ctx, secret)
		if apierrors.IsAlreadyExists(err) {
			err = c.Get(ctx, key, secret)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("token key Secret %s/%s: %w", namespace, tokenSecretName, err)
	}
	if len(secret.Data["key"]) < 16 {
		return nil, fmt.Errorf("token key Secret %s/%s: data.key must hold at least 16 bytes", namespace, tokenSecretName)
	}
	return secret.Data["key"], nil
}

func readSecretFile(path string) (string, error) {
	if path == "" {
		return "", nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	return strings.TrimRight(string(b), "\r\n"), nil
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
