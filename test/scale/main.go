//go:build scale

// Command scale is the scale benchmark of issue 13 (`make bench-scale`): it brings up its own
// local cluster (4 kwok nodes, no real node), a real redis-server and the operator built from a
// checkout as a local process, runs the scenarios one after another (LockedJobs, and guarded Jobs
// under the admission gate of config/guard), each side by side with the plain-Job baseline, and
// prints one table: wall times, API writes by verb and resource, Redis calls, CPU and memory,
// handoff gaps, and an exclusion check from the watches. Then it tears everything down.
// docs/benchmarks.md ("Scale") shows the numbers.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/internal/testutil/faultproxy"
	"github.com/lockedjob/lockedjob/internal/testutil/k8sassets"
	"github.com/lockedjob/lockedjob/internal/testutil/redisserver"
	"github.com/lockedjob/lockedjob/test/scale/measure"
	"github.com/lockedjob/lockedjob/test/testkit"
	"github.com/lockedjob/lockedjob/test/utils"
)

const (
	crdDir            = "config/crd/bases"
	operatorNamespace = "lockedjob-system"
	clusterID         = "scale" // the operator's --cluster-id, part of every lock's Redis key
)

type options struct {
	objects      int
	deep         int
	waiters      int
	window       time.Duration
	scenarios    string
	podRun       time.Duration
	steadyRun    time.Duration
	operatorBin  string
	operatorSrc  string
	operatorArgs string
	kcmQPS       int
	kcmBurst     int
	kueueQPS     int
	kueueBurst   int
	portBase     int
	work         string
	timeout      time.Duration
	pauseWhile   string
	profile      time.Duration
	requestCosts int
	killEvery    time.Duration
	redisDelay   time.Duration
	soak         soakOptions
}

func parseFlags() options {
	var o options
	flag.IntVar(&o.objects, "n", 1000, "Objects per scenario (plain, distinct, shared, steady and their guarded-Job twins).")
	flag.IntVar(&o.deep, "deep", 200, "Waiters queued on the one lock of the deep and guarded-deep scenarios.")
	flag.IntVar(&o.waiters, "waiters", 10, "LockedJobs (guarded Jobs) per lock in the shared (guarded-shared) scenario (n/waiters locks).")
	flag.DurationVar(&o.window, "window", 60*time.Second, "Steady-state window measured after all steady LockedJobs run.")
	flag.StringVar(&o.scenarios, "scenarios", strings.Join(defaultScenarios, ","), "Comma-separated scenarios to run, in this order.")
	flag.DurationVar(&o.podRun, "pod-run", time.Second, "Pod lifetime (kwok pod-complete delay) of plain Jobs, LockedJobs and guarded Jobs.")
	flag.DurationVar(&o.steadyRun, "steady-run", 10*time.Minute, "Pod lifetime in the steady scenario: longer than reaching Running plus the window.")
	flag.StringVar(&o.operatorBin, "operator-bin", "", "Operator binary to run (default: built from -operator-src).")
	flag.StringVar(&o.operatorSrc, "operator-src", "", "Checkout to build the operator from (default: this one), e.g. another worktree.")
	flag.StringVar(&o.operatorArgs, "operator-args", "", "More operator flags, space-separated, appended to the benchmark's (later ones win).")
	flag.IntVar(&o.kcmQPS, "kcm-qps", 0, "kube-controller-manager --kube-api-qps (0: its default, 20).")
	flag.IntVar(&o.kcmBurst, "kcm-burst", 0, "kube-controller-manager --kube-api-burst (0: its default, 30; with -kcm-qps: twice it).")
	flag.IntVar(&o.kueueQPS, "kueue-qps", 0, "Kueue's API client QPS (its Configuration's clientConnection.qps; 0: its default, 20). Its own performance tests run it at 50.")
	flag.IntVar(&o.kueueBurst, "kueue-burst", 0, "Kueue's API client burst (0: its default, 30; with -kueue-qps: twice it).")
	flag.IntVar(&o.portBase, "port-base", 35440, "Preferred first port of the cluster's block (another free block is taken if it is busy).")
	flag.StringVar(&o.work, "work", "/tmp/sc-work", "Folder for the cluster, the operator binary and logs (emptied first).")
	flag.DurationVar(&o.timeout, "timeout", 30*time.Minute, "Longest wait for one scenario's goal or deletion.")
	flag.StringVar(&o.pauseWhile, "pause-while", "", "Before the cluster starts and before each scenario, wait while a process whose command line matches this regular expression runs (another heavy job on a shared machine). Write it so it does not match itself, e.g. '\\.ci/ru[n]', or pgrep -f .ci/run finds this benchmark too.")
	flag.IntVar(&o.requestCosts, "request-costs", 0, "If set, first measure the control plane's CPU per request of each kind a guarded Job adds to a plain Job's, this many of each, with the gate installed and no operator (costs.go); -scenarios '' runs nothing else.")
	flag.DurationVar(&o.profile, "profile", 0, "If set, profile the CPU of kube-apiserver and of what runs the scenario (the operator or Kueue) for this long from each scenario's first create, into WORK/apiserver-SCENARIO.pprof and WORK/controller-SCENARIO.pprof (go tool pprof).")
	flag.DurationVar(&o.killEvery, "kill-every", 0, "Chaos (issue 28): SIGKILL the operator this often and start a new one at once (0: never).")
	flag.DurationVar(&o.redisDelay, "redis-delay", 0, "Chaos (issue 28): delay everything between the operator and Redis by this much each way, through a proxy (0: none).")
	flag.IntVar(&o.soak.lives, "soak-lives", 10000, "LockedJobs the soak scenario runs through the operator, one after another per worker (issue 28).")
	flag.IntVar(&o.soak.inflight, "soak-inflight", 200, "LockedJobs of the soak alive at once: each worker creates one, waits for its end, deletes it, creates the next.")
	flag.IntVar(&o.soak.locks, "soak-locks", 100, "Locks the soak's workers share (worker w uses lock w mod this), so lives queue and hand off.")
	flag.DurationVar(&o.soak.sample, "soak-sample", 10*time.Second, "How often the soak samples the operator's RSS, goroutines and connections and Redis' keys.")
	flag.Parse()
	if _, err := regexp.Compile(o.pauseWhile); err != nil {
		log.Fatalf("-pause-while: %v", err)
	}
	if o.kcmQPS > 0 && o.kcmBurst == 0 {
		o.kcmBurst = 2 * o.kcmQPS
	}
	if o.kueueQPS > 0 && o.kueueBurst == 0 {
		o.kueueBurst = 2 * o.kueueQPS
	}
	return o
}

// bench is the environment every scenario runs in.
type bench struct {
	opts        options
	root        string
	work        string
	cluster     utils.LocalCluster
	kubeconfig  string
	k8s         client.WithWatch
	probes      probes
	redisAddr   string
	operatorBin string
	timeout     time.Duration
	kueue       *kueueRig // Kueue installed, if a scenario runs it
}

func main() {
	log.SetFlags(log.Ltime)
	// The benchmark's clients log nothing worth reading; controller-runtime complains without one.
	ctrllog.SetLogger(zap.New(zap.WriteTo(io.Discard)))
	log.SetOutput(os.Stderr)
	o := parseFlags()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, o)
	stop()
	if err != nil {
		log.Printf("FAILED: %v", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) (err error) {
	scenarios, err := buildScenarios(o)
	if err != nil {
		return err
	}
	b := &bench{opts: o, work: o.work, timeout: o.timeout}
	if b.root, err = utils.ProjectDir(); err != nil {
		return err
	}
	if err := os.RemoveAll(b.work); err != nil {
		return fmt.Errorf("empty %s: %w", b.work, err)
	}
	if err := os.MkdirAll(b.work, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", b.work, err)
	}
	src := o.operatorSrc
	if src == "" {
		src = b.root
	}
	if b.operatorBin = o.operatorBin; b.operatorBin == "" {
		if b.operatorBin, err = buildOperator(src, b.work); err != nil {
			return err
		}
	}

	if err := waitQuiet(ctx, o.pauseWhile); err != nil {
		return err
	}
	stopCluster, err := b.startCluster(o)
	if err != nil {
		return err
	}
	defer stopCluster()
	rs, err := redisserver.StartProcess()
	if err != nil {
		return err
	}
	defer func() { _ = rs.Close() }()
	b.redisAddr = rs.Addr()
	if o.redisDelay > 0 {
		p, err := faultproxy.Start(rs.Addr())
		if err != nil {
			return fmt.Errorf("redis proxy: %w", err)
		}
		defer func() { _ = p.Close() }()
		p.Delay(o.redisDelay)
		b.redisAddr = p.Addr()
	}
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	defer func() { _ = rdb.Close() }()
	if err := b.connect(rdb); err != nil {
		return err
	}
	if err := b.install(ctx); err != nil {
		return err
	}
	if slices.ContainsFunc(scenarios, func(s scenario) bool { return s.kueue }) {
		if err := b.installKueue(ctx); err != nil {
			return err
		}
	}
	if anyGuarded(scenarios) || o.requestCosts > 0 {
		// Before the first scenario, so every scenario of the run, plain Jobs and LockedJobs
		// included, runs on a cluster with the gate in force.
		if err := b.installGuard(ctx); err != nil {
			return err
		}
	}

	header := describeRun(o, src, b.operatorBin, anyGuarded(scenarios) || o.requestCosts > 0, b.kueue != nil)
	fmt.Print(header)
	if o.requestCosts > 0 {
		if err := b.requestCosts(ctx, o.requestCosts); err != nil {
			return fmt.Errorf("request costs: %w", err)
		}
	}
	var results []measure.Result
	for _, s := range scenarios {
		if err := waitQuiet(ctx, o.pauseWhile); err != nil {
			return err
		}
		log.Printf("scenario %s: %d objects, %d locks", s.name, s.objects, s.locks)
		runOne := b.runScenario
		if s.name == "soak" {
			runOne = b.runSoak
		}
		res, err := runOne(ctx, s)
		if err != nil {
			if len(results) > 0 {
				fmt.Print("\n(partial: a later scenario failed)\n\n" + measure.Table(results))
			}
			return fmt.Errorf("scenario %s: %w", s.name, err)
		}
		printDetails(res)
		results = append(results, res)
	}
	if len(results) > 0 {
		fmt.Print("\n## Table\n\n" + measure.Table(results))
	}
	return nil
}

// defaultScenarios is every scenario, each guarded-Job one after its LockedJob twin (the same
// objects, locks and pods, asked for by a label on a plain Job instead of a LockedJob) and its
// Kueue twin (the same Jobs in Kueue's queues, one ClusterQueue per lock admitting one at a time).
var defaultScenarios = []string{"plain", "distinct", "guarded-distinct", "kueue-distinct", "shared", "guarded-shared",
	"kueue-shared", "deep", "guarded-deep", "kueue-deep", "steady"}

// deepLock is the one lock of the deep scenarios.
const deepLock = "deep"

func buildScenarios(o options) ([]scenario, error) {
	n := o.objects
	if n < 1 || o.deep < 1 || o.waiters < 1 || n%o.waiters != 0 {
		return nil, fmt.Errorf("-n (%d), -deep (%d) and -waiters (%d) must be positive, -n a multiple of -waiters", n, o.deep, o.waiters)
	}
	if o.soak.lives < 1 || o.soak.inflight < 1 || o.soak.locks < 1 || o.soak.sample <= 0 {
		return nil, fmt.Errorf("-soak-lives, -soak-inflight, -soak-locks and -soak-sample must be positive")
	}
	distinct := func(i int) string { return fmt.Sprintf("lock-%05d", i) }
	// Waiters of one lock are spread over the burst, as independent submitters would make them.
	locks := n / o.waiters
	shared := func(i int) string { return fmt.Sprintf("lock-%05d", i%locks) }
	// Keyed by the scenario's own name, so -scenarios and the table cannot disagree on one.
	all := map[string]scenario{}
	deep := func(int) string { return deepLock }
	for _, s := range []scenario{
		{name: "plain", objects: n, run: o.podRun, goal: batchv1alpha1.PhaseSucceeded},
		{name: "distinct", objects: n, locks: n, lockOf: distinct, run: o.podRun, goal: batchv1alpha1.PhaseSucceeded},
		{name: "shared", objects: n, locks: locks, lockOf: shared, run: o.podRun, goal: batchv1alpha1.PhaseSucceeded},
		{name: "deep", objects: o.deep, locks: 1, lockOf: deep, run: o.podRun, goal: batchv1alpha1.PhaseSucceeded},
		{name: "steady", objects: n, locks: n, lockOf: distinct, run: o.steadyRun,
			goal: batchv1alpha1.PhaseRunning, window: o.window},
		// Succeeded, for a guarded Job: Complete (or Failed) and its lock released (guard Released).
		{name: "guarded-distinct", objects: n, locks: n, lockOf: distinct, guarded: true, run: o.podRun,
			goal: batchv1alpha1.PhaseSucceeded},
		{name: "guarded-shared", objects: n, locks: locks, lockOf: shared, guarded: true, run: o.podRun,
			goal: batchv1alpha1.PhaseSucceeded},
		{name: "guarded-deep", objects: o.deep, locks: 1, lockOf: deep, guarded: true, run: o.podRun,
			goal: batchv1alpha1.PhaseSucceeded},
		// Succeeded, for a Job in Kueue's queue: Complete (or Failed).
		{name: "kueue-distinct", objects: n, locks: n, lockOf: distinct, kueue: true, run: o.podRun,
			goal: batchv1alpha1.PhaseSucceeded},
		{name: "kueue-shared", objects: n, locks: locks, lockOf: shared, kueue: true, run: o.podRun,
			goal: batchv1alpha1.PhaseSucceeded},
		{name: "kueue-deep", objects: o.deep, locks: 1, lockOf: deep, kueue: true, run: o.podRun,
			goal: batchv1alpha1.PhaseSucceeded},
		// Not among the defaults: it takes long and measures leaks, not costs (soak.go).
		{name: "soak", objects: o.soak.lives, locks: min(o.soak.locks, o.soak.inflight),
			lockOf: func(worker int) string { return fmt.Sprintf("lock-%05d", worker%o.soak.locks) },
			run:    o.podRun, goal: batchv1alpha1.PhaseSucceeded},
	} {
		all[s.name] = s
	}
	var out []scenario
	if strings.TrimSpace(o.scenarios) == "" {
		return nil, nil
	}
	for name := range strings.SplitSeq(o.scenarios, ",") {
		s, ok := all[strings.TrimSpace(name)]
		if !ok {
			return nil, fmt.Errorf("unknown scenario %q (%s, soak)", name, strings.Join(defaultScenarios, ", "))
		}
		out = append(out, s)
	}
	return out, nil
}

// anyGuarded reports whether a scenario of ss runs guarded Jobs, which need the admission gate.
func anyGuarded(ss []scenario) bool {
	return slices.ContainsFunc(ss, func(s scenario) bool { return s.guarded })
}

func buildOperator(src, work string) (string, error) {
	bin := filepath.Join(work, "manager")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/manager")
	cmd.Dir = src
	log.Printf("building the operator from %s", src)
	if _, err := utils.Run(cmd); err != nil {
		return "", fmt.Errorf("build operator: %w", err)
	}
	return bin, nil
}

// startCluster brings up the benchmark's own local cluster and returns how to stop it.
func (b *bench) startCluster(o options) (func(), error) {
	binDir, err := utils.Run(exec.Command("bash", filepath.Join(b.root, "hack", "k8s-bin.sh"), "--print-dir"))
	if err != nil {
		return nil, err
	}
	// Avoid the developer's cluster when the preferred block is busy.
	port, err := utils.FreeClusterPorts(o.portBase)
	if err != nil {
		return nil, err
	}
	env := []string{"LOCKEDJOB_REAL_NODE=0", "LOCKEDJOB_CLUSTER_NODES=4"}
	if o.profile > 0 {
		env = append(env, "LOCKEDJOB_APISERVER_PROFILING=1")
	}
	if o.kcmQPS > 0 {
		env = append(env, "LOCKEDJOB_KCM_API_QPS="+strconv.Itoa(o.kcmQPS), "LOCKEDJOB_KCM_API_BURST="+strconv.Itoa(o.kcmBurst))
	}
	b.cluster = utils.LocalCluster{Root: b.root, Dir: filepath.Join(b.work, "cluster"), PortBase: port,
		BinDir: strings.TrimSpace(lastLine(binDir)), Env: env}
	b.kubeconfig = filepath.Join(b.cluster.Dir, "kubeconfig")
	log.Printf("starting the local cluster in %s (ports %d+)", b.cluster.Dir, port)
	stop := func() {
		if out, err := b.cluster.Down(3 * time.Minute); err != nil {
			log.Printf("cluster down: %v\n%s", err, out)
		}
	}
	if out, err := b.cluster.Script(15*time.Minute, "up"); err != nil {
		stop()
		return nil, fmt.Errorf("cluster up: %w\n%s", err, out)
	}
	return stop, nil
}

// connect makes the benchmark's clients. Its own client limits are far above what it sends, so
// the burst of creates is paced by the server, not by the client.
func (b *bench) connect(rdb *redis.Client) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", b.kubeconfig)
	if err != nil {
		return fmt.Errorf("kubeconfig %s: %w", b.kubeconfig, err)
	}
	cfg.QPS, cfg.Burst = 5000, 10000
	scheme := k8sruntime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(batchv1alpha1.AddToScheme(scheme))
	utilruntime.Must(apiextensionsv1.AddToScheme(scheme)) // Kueue's CRDs (kueue.go)
	if b.k8s, err = client.NewWithWatch(cfg, client.Options{Scheme: scheme}); err != nil {
		return fmt.Errorf("client: %w", err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("clientset: %w", err)
	}
	b.probes = probes{cluster: b.cluster, cs: cs, rdb: rdb}
	return nil
}

// install applies the CRD and the operator's namespace.
func (b *bench) install(ctx context.Context) error {
	kubectl := filepath.Join(b.cluster.BinDir, "kubectl")
	if _, err := utils.Run(exec.CommandContext(ctx, kubectl, "--kubeconfig", b.kubeconfig, "apply", "--server-side",
		"-f", filepath.Join(b.root, crdDir))); err != nil {
		return fmt.Errorf("install CRD: %w", err)
	}
	// Served, not merely stored: a list of the kind succeeds only once the CRD is established.
	err := poll(ctx, time.Minute, 200*time.Millisecond, func() (bool, error) {
		return b.k8s.List(ctx, &batchv1alpha1.LockedJobList{}, client.Limit(1)) == nil, nil
	})
	if err != nil {
		return fmt.Errorf("CRD not served: %w", err)
	}
	err = b.k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: operatorNamespace}})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", operatorNamespace, err)
	}
	return b.waitGarbageCollectorKnowsLockedJobs(ctx)
}

// installGuard installs the admission gate of guarded Jobs (config/guard, as the pinned kustomize
// builds it) and waits until it is in force.
func (b *bench) installGuard(ctx context.Context) error {
	policies, err := testkit.GuardPolicies(b.root)
	if err != nil {
		return err
	}
	log.Printf("installing the admission gate of guarded Jobs (config/guard)")
	if err := testkit.InstallGuard(ctx, b.k8s, policies, operatorNamespace, time.Minute); err != nil {
		return fmt.Errorf("install the admission gate: %w", err)
	}
	return nil
}

// waitGarbageCollectorKnowsLockedJobs waits until kube-controller-manager's garbage collector
// watches LockedJobs. It discovers a new CRD only on its next resync (every 30s), and until then
// the Jobs of deleted LockedJobs stand: the first scenario's deletion took 40s longer than the
// others in a trial run. An object owned by a LockedJob that does not exist is collected only
// once the collector knows the kind.
func (b *bench) waitGarbageCollectorKnowsLockedJobs(ctx context.Context) error {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Name: "gc-probe", Namespace: operatorNamespace,
		OwnerReferences: []metav1.OwnerReference{{
			APIVersion: batchv1alpha1.GroupVersion.String(), Kind: "LockedJob",
			Name: "gc-probe-owner", UID: types.UID("00000000-0000-0000-0000-000000000013"),
		}},
	}}
	if err := b.k8s.Create(ctx, cm); err != nil {
		return fmt.Errorf("create garbage collector probe: %w", err)
	}
	log.Printf("waiting for the garbage collector to know LockedJobs (it resyncs every 30s)")
	err := poll(ctx, 2*time.Minute, 500*time.Millisecond, func() (bool, error) {
		err := b.k8s.Get(ctx, client.ObjectKeyFromObject(cm), &corev1.ConfigMap{})
		if err != nil && !apierrors.IsNotFound(err) {
			return false, fmt.Errorf("get garbage collector probe: %w", err)
		}
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		return fmt.Errorf("the garbage collector did not collect an object owned by a missing LockedJob: %w", err)
	}
	return nil
}

// operatorArgs are production settings (default status interval, workers, backoff, leader
// election) with what a host process on this cluster needs; -operator-args come last and win.
func (b *bench) operatorArgs() []string {
	return slices.Concat([]string{
		"--kubeconfig", b.kubeconfig,
		"--namespace", operatorNamespace,
		"--cluster-id", clusterID,
		"--redis-addr", b.redisAddr,
		// No listeners: nothing here scrapes them, and fixed ports would collide with
		// other clusters on this machine.
		"--metrics-bind-address", "0",
		"--health-probe-bind-address", "0",
	}, strings.Fields(b.opts.operatorArgs))
}

// describeRun is the header of the output: what ran, where, with what.
func describeRun(o options, src, bin string, gate, kueue bool) string {
	rev, _ := utils.Run(exec.Command("git", "-C", src, "log", "-1", "--format=%h %s"))
	dirty, _ := utils.Run(exec.Command("git", "-C", src, "status", "--porcelain", "--untracked-files=no"))
	if strings.TrimSpace(dirty) != "" {
		rev = strings.TrimSpace(rev) + " (with uncommitted changes)"
	}
	kcm := "default client limits (20 QPS, 30 burst)"
	if o.kcmQPS > 0 {
		kcm = fmt.Sprintf("--kube-api-qps %d --kube-api-burst %d", o.kcmQPS, o.kcmBurst)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# lockedjob scale benchmark, %s\n", time.Now().UTC().Format(time.RFC3339))
	fmt.Fprintf(&b, "command:   %s\n", strings.Join(os.Args, " "))
	fmt.Fprintf(&b, "operator:  %s from %s: %s\n", bin, src, strings.TrimSpace(rev))
	fmt.Fprintf(&b, "operator flags beyond the defaults: %s\n", o.operatorArgs)
	fmt.Fprintf(&b, "cluster:   4 kwok nodes, kube-controller-manager %s\n", kcm)
	if gate {
		fmt.Fprintf(&b, "admission: the gate of guarded Jobs (config/guard) in force for every scenario\n")
	}
	if kueue {
		limits := "its default client limits (20 QPS, 30 burst)"
		if o.kueueQPS > 0 {
			limits = fmt.Sprintf("clientConnection qps %d burst %d", o.kueueQPS, o.kueueBurst)
		}
		fmt.Fprintf(&b, "kueue:     %s (make kueue-bin), %s, the controller concurrency of its shipped Configuration, "+
			"its webhooks in the kueue-* scenarios' namespaces only; per lock a StrictFIFO ClusterQueue with quota for one Job (%s cpu)\n", k8sassets.KueueVersion, limits, kueueJobCPU.String())
	}
	if o.killEvery > 0 || o.redisDelay > 0 {
		fmt.Fprintf(&b, "chaos:     operator SIGKILLed every %s (0: never), Redis delayed %s each way\n", o.killEvery, o.redisDelay)
	}
	fmt.Fprintf(&b, "machine:   %d cores, load average %s at start\n", runtime.NumCPU(), loadAvg())
	fmt.Fprintf(&b, "pods:      %s (steady: %s), n=%d, deep=%d, %d waiters per shared lock, window %s\n",
		o.podRun, o.steadyRun, o.objects, o.deep, o.waiters, o.window)
	return b.String()
}

// printDetails prints what the table leaves out: every write series and Redis command.
func printDetails(r measure.Result) {
	fmt.Printf("\n## %s: %d objects, %d locks, %d done, %d failed, wall %s\n", r.Scenario, r.Objects, r.Locks, r.Done, r.Failed,
		r.Wall.Round(time.Millisecond))
	if r.Noise != "" {
		fmt.Println("NOISE: " + r.Noise)
	}
	fmt.Println("API writes (first create to goal):")
	for _, l := range r.API.WriteLines() {
		fmt.Println("  " + l)
	}
	fmt.Println("API reads (first create to goal):")
	for _, l := range r.API.ReadLines() {
		fmt.Println("  " + l)
	}
	fmt.Printf("Redis calls: %v\n", r.Redis)
	if r.Window != nil {
		fmt.Printf("steady window %s, API writes:\n", r.Window.Length.Round(time.Millisecond))
		for _, l := range r.Window.API.WriteLines() {
			fmt.Println("  " + l)
		}
		fmt.Printf("  Redis calls: %v\n", r.Window.Redis)
	}
	if r.Delete != nil {
		fmt.Printf("deletion %s, API writes:\n", r.Delete.Wall.Round(time.Millisecond))
		for _, l := range r.Delete.API.WriteLines() {
			fmt.Println("  " + l)
		}
	}
	if r.Kills > 0 {
		fmt.Printf("operator SIGKILLed %d times\n", r.Kills)
	}
	for _, k := range r.LeftKeys {
		fmt.Println("LEFT IN REDIS: " + k)
	}
	for i, v := range r.Violations {
		if i == 20 {
			fmt.Printf("... and %d more violations\n", len(r.Violations)-20)
			break
		}
		fmt.Println("VIOLATION: " + v)
	}
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

func tail(path string) string { return utils.TailFile(path, 30) }

// waitQuiet waits while another process whose command line matches the expression text runs, so
// a scenario does not share the cores with it. Processes that carry -pause-while themselves (this
// one, go run, make) do not count.
func waitQuiet(ctx context.Context, text string) error {
	if text == "" {
		return nil
	}
	logged := false
	return poll(ctx, 24*time.Hour, 5*time.Second, func() (bool, error) {
		pid, found := findProcess(text, os.Getpid())
		if found && !logged {
			log.Printf("pausing while pid %d (%q) runs", pid, text)
			logged = true
		}
		return !found, nil
	})
}

// findProcess returns a process other than self whose command line matches the expression text.
func findProcess(text string, self int) (int, bool) {
	if text == "" {
		return 0, false
	}
	re := regexp.MustCompile(text) // checked in parseFlags
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		cmdline := strings.ReplaceAll(string(b), "\x00", " ")
		if re.MatchString(cmdline) && !strings.Contains(cmdline, "-pause-while") {
			return pid, true
		}
	}
	return 0, false
}
