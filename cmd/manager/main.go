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

// Command manager runs the lockedjob operator. It only wires things together: the flags
// (options.go), the lock client over the Redis mode they name (redis.go), the operator's identity
// (locks.LoadIdentity), the manager and its reconciler, and the health and metrics
// endpoints. Secrets (Redis password, token key) come from files or a Kubernetes Secret, never
// from flags.
package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"time"

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
	"github.com/lockedjob/lockedjob/controllers/guardedjob"
	"github.com/lockedjob/lockedjob/controllers/guardedpod"
	"github.com/lockedjob/lockedjob/controllers/kueuecheck"
	"github.com/lockedjob/lockedjob/controllers/lockedjob"
	"github.com/lockedjob/lockedjob/internal/campaign"
	"github.com/lockedjob/lockedjob/internal/lockbook"
	"github.com/lockedjob/lockedjob/internal/locks"
	"github.com/lockedjob/lockedjob/internal/redislock"
	"github.com/lockedjob/lockedjob/internal/version"
	"github.com/lockedjob/lockedjob/internal/webhook"
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

func main() {
	o, zapOpts := parseFlags()
	if o.showVersion {
		fmt.Println("lockedjob manager " + version.Get().String())
		return
	}
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
	lockClient, err := newLockClient(o)
	if err != nil {
		return err
	}
	if err := checkEviction(ctx, lockClient, o.allowEviction); err != nil {
		return err
	}
	if mode, _ := redisModeOf(o); mode == redisSentinel {
		warnUnreplicatedWrites(ctx, lockClient)
	}
	cfg, err := kubeConfig(o)
	if err != nil {
		return err
	}
	identity, err := loadIdentity(ctx, cfg, o)
	if err != nil {
		return err
	}
	book := lockbook.New(lockClient)
	defer book.Stop()

	gate, err := guardGate(cfg, o)
	if err != nil {
		return err
	}

	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	if err := serveEndpoints(ctx, stop, o, cfg, lockClient, gate); err != nil {
		return err
	}
	leaseNamespace := leaseNamespaceOf(o)
	info := version.Get()
	setupLog.Info("Starting manager", "version", info.Version, "commit", info.Commit, "built", info.Date, "namespace", leaseNamespace, "clusterID", identity.ClusterID, "redisNodes", lockClient.Nodes())
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

// guardGate is the guard webhook of --guard-admission webhook, or nil for policy (the API server
// runs config/guard's policies; the manager serves nothing).
func guardGate(cfg *rest.Config, o options) (*webhook.Gate, error) {
	switch o.guardAdmission {
	case guardAdmissionPolicy, "": // "": options built without the flags, as tests do
		return nil, nil
	case guardAdmissionWebhook:
		w := o.webhook
		w.Namespace = o.namespace
		return webhook.New(cfg, scheme, w)
	default:
		return nil, fmt.Errorf("--guard-admission %q: want %s or %s", o.guardAdmission, guardAdmissionPolicy, guardAdmissionWebhook)
	}
}

// kubeConfig is the kubeconfig's REST config with the manager's client-side rate limit (none by
// default: -1).
func kubeConfig(o options) (*rest.Config, error) {
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = float32(o.kubeAPIQPS), o.kubeAPIBurst
	return cfg, nil
}

// loadIdentity loads the cluster ID and token key through a client of its own: the manager's
// client reads from a cache that has not started yet, and these one-off reads and the Secret's
// create go straight to the API server.
func loadIdentity(ctx context.Context, cfg *rest.Config, o options) (locks.Identity, error) {
	direct, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return locks.Identity{}, fmt.Errorf("kubernetes client: %w", err)
	}
	return locks.LoadIdentity(ctx, direct, locks.IdentitySource{
		ClusterID: o.clusterID, TokenKeyFile: o.tokenKeyFile, Namespace: o.namespace,
	})
}

// leaseNamespaceOf is where the leader-election lease lives: --namespace, else the kubeconfig's
// namespace, else "default". Only the lease falls back so: the token key never does.
func leaseNamespaceOf(o options) string {
	if o.namespace != "" {
		return o.namespace
	}
	ns, _, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(clientcmd.NewDefaultClientConfigLoadingRules(), nil).Namespace()
	if err != nil || ns == "" {
		return "default"
	}
	return ns
}

// newManager builds one manager with its reconciler over the process's lock book. Everything it
// registers belongs to this manager, so the next one (after a lost leadership) registers it again.
func newManager(ctx context.Context, cfg *rest.Config, o options, leaseNamespace string, id locks.Identity, book *lockbook.Book) (ctrl.Manager, error) {
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme: scheme,
		Cache:  controllers.CacheOptions(),
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

func setupReconcilers(ctx context.Context, mgr ctrl.Manager, o options, id locks.Identity, book *lockbook.Book) error {
	return controllers.Setup(ctx, mgr, book, controllers.Options{
		Identity: id,
		// One gate for every reconciler that touches a lock for a namespace.
		ClusterScopeNamespaces: locks.ScopeGate(splitList(o.clusterScopeNamespaces)),
		RedisTimeout:           o.redisTimeout,
		LockedJob: lockedjob.Config{
			WaitBackoffMax:          o.waitBackoffMax,
			QueueRecheck:            o.queueRecheck,
			MaxConcurrentReconciles: o.maxConcurrentReconciles,
			LegacyLockKeys:          o.legacyLockKeys,
			// A successor re-adopts only after the old leader's lease ran out.
			FailoverTime: o.leaseDuration,
		},
		GuardedJob: guardedjob.Config{
			WaitBackoffMax:          o.waitBackoffMax,
			QueueRecheck:            o.queueRecheck,
			MaxConcurrentReconciles: o.maxConcurrentReconciles,
		},
		GuardedPod: guardedpod.Config{
			WaitBackoffMax:          o.waitBackoffMax,
			QueueRecheck:            o.queueRecheck,
			MaxConcurrentReconciles: o.maxConcurrentReconciles,
		},
		KueueCheck: kueuecheck.Config{
			WaitBackoffMax:          o.waitBackoffMax,
			QueueRecheck:            o.queueRecheck,
			MaxConcurrentReconciles: o.maxConcurrentReconciles,
		},
	})
}

// serveEndpoints starts the health probe and metrics servers, and the guard webhook if there is
// one, for the life of the process rather than of one manager: they must stay up while a process
// that lost its leadership builds the next manager, and a manager's own servers would bind their
// ports again before the last ones closed. A server that fails stops the process through stop.
func serveEndpoints(ctx context.Context, stop context.CancelCauseFunc, o options, cfg *rest.Config, c *redislock.Client, gate *webhook.Gate) error {
	probes, err := healthProbeServer(o.probeAddr, c, gate)
	if err != nil {
		return err
	}
	metrics, err := metricsServer(o, cfg)
	if err != nil {
		return err
	}
	profiles, err := pprofServer(o.pprofAddr)
	if err != nil {
		return err
	}
	servers := []manager.Runnable{probes, metrics, profiles}
	if gate != nil {
		servers = append(servers, gate)
	}
	for _, srv := range servers {
		if srv == nil {
			continue // turned off
		}
		go func() {
			if err := srv.Start(ctx); err != nil {
				stop(fmt.Errorf("serve endpoints: %w", err))
			}
		}()
	}
	return nil
}

// healthProbeServer serves /healthz and /readyz at addr, or nothing for "" and "0". Alive while the
// process runs; ready only while Redis answers, since a replica that cannot reach Redis cannot
// acquire or renew locks, and, with the guard webhook, once it serves with its certificate.
func healthProbeServer(addr string, c *redislock.Client, gate *webhook.Gate) (manager.Runnable, error) {
	if addr == "" || addr == "0" {
		return nil, nil
	}
	mux := http.NewServeMux()
	handle := func(path string, checks map[string]healthz.Checker) {
		h := http.StripPrefix(path, &healthz.Handler{Checks: checks})
		mux.Handle(path, h)
		mux.Handle(path+"/", h) // one check by name: /readyz/redis
	}
	handle("/healthz", map[string]healthz.Checker{"healthz": healthz.Ping})
	ready := map[string]healthz.Checker{"redis": lockbook.RedisReadyCheck(c)}
	if gate != nil {
		ready["guard-webhook"] = gate.ReadyCheck()
	}
	handle("/readyz", ready)
	return serverAt("health probe", addr, mux)
}

// serverAt is a server of the process's own endpoints named name, listening at addr now, so a
// taken address fails the start rather than a later goroutine. WriteTimeout stays unset: a CPU
// profile or trace streams for as long as ?seconds= asks.
func serverAt(name, addr string, h http.Handler) (manager.Runnable, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s address %s: %w", name, addr, err)
	}
	return &manager.Server{Name: name, Listener: ln,
		Server: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}}, nil
}

// pprofServer serves Go's profiles under /debug/pprof/ at addr, or nothing for "" and "0" (the
// default). It is for finding what the operator spends memory and time on, e.g. in the soak of
// test/scale; it has no authentication, so it belongs on loopback.
func pprofServer(addr string) (manager.Runnable, error) {
	if addr == "" || addr == "0" {
		return nil, nil
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index) // also heap, goroutine, allocs, … by name
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return serverAt("pprof", addr, mux)
}

// metricsServer serves the Prometheus metrics as --metrics-bind-address and --metrics-secure say,
// or nothing for "0".
func metricsServer(o options, cfg *rest.Config) (manager.Runnable, error) {
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("metrics server client: %w", err)
	}
	opts := metricsserver.Options{BindAddress: o.metricsAddr, SecureServing: o.secureMetrics}
	if o.secureMetrics {
		opts.FilterProvider = filters.WithAuthenticationAndAuthorization
	}
	srv, err := metricsserver.NewServer(opts, cfg, httpClient)
	if err != nil {
		return nil, fmt.Errorf("metrics server: %w", err)
	}
	return srv, nil
}
