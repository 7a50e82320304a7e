//go:build fault

package fault

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/klog/v2"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/internal/testutil/faultproxy"
	"github.com/lockedjob/lockedjob/internal/testutil/k8sassets"
	"github.com/lockedjob/lockedjob/internal/testutil/redisserver"
	"github.com/lockedjob/lockedjob/test/testkit"
	"github.com/lockedjob/lockedjob/test/utils"
	"github.com/redis/go-redis/v9"
)

const (
	// keyPrefix is shared by both operators: locks of scope Cluster of both
	// clusters meet in one Redis key.
	keyPrefix = "fault:"
	// namespacePrefix marks the scenarios' namespaces (the recorders ignore the rest).
	namespacePrefix = "fault-"
)

var scheme = runtime.NewScheme()

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(batchv1alpha1.AddToScheme(scheme))
	utilruntime.Must(apiextensionsv1.AddToScheme(scheme))
}

// env is what TestFault set up; t.Cleanup tears it down in reverse order,
// also when a step fails half-way.
var env struct {
	root, work, binDir, managerBin string
	clusters                       map[string]*cluster // "a", "b"
	redis                          *redisserver.Server
	redisClient                    *redis.Client // the suite's reads of redis, bypassing the proxies
	proxies                        map[string]*faultproxy.Proxy
	operators                      map[string]*operator
	start                          time.Time
}

// TestFault runs every scenario one after the other on one environment and
// prints the table. A scenario that breaks a rule fails its subtest; the
// others still run, so one run shows every failing scenario.
func TestFault(t *testing.T) {
	env.start = time.Now()
	// client-go reports every failed watch while an API server is down; the
	// scenario that takes it down says so once.
	klog.LogToStderr(false)
	klog.SetOutput(io.Discard)
	setUp(t)
	logf("environment ready after %s", since(env.start))

	var verdicts []verdict
	for _, sc := range scenarios() {
		v, ok := runScenario(t, sc)
		if ok {
			verdicts = append(verdicts, v)
		}
	}
	tbl := table(verdicts)
	fmt.Printf("\n===== fault suite (%s) =====\n%s\n", since(env.start), tbl)
	if path := os.Getenv("FAULT_TABLE"); path != "" {
		if err := os.WriteFile(path, []byte(tbl), 0o644); err != nil {
			t.Errorf("write FAULT_TABLE: %v", err)
		}
	}
}

// setUp builds the manager, starts both clusters (with the CRDs and the admission gate of
// guarded Jobs), the shared redis-server, the two fault proxies and the two operators. The slow parts (build, two
// control planes) run side by side.
func setUp(t *testing.T) {
	var err error
	if env.root, err = utils.ProjectDir(); err != nil {
		t.Fatal(err)
	}
	if env.binDir, err = k8sassets.DefaultDir(); err != nil {
		t.Fatal(err)
	}
	if env.work, err = os.MkdirTemp("", "lockedjob-fault-"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Every scenario prints its timeline, which is usually enough; the
		// operators' and clusters' logs are kept only on request.
		if t.Failed() && os.Getenv("FAULT_KEEP_LOGS") != "" {
			_ = os.Remove(env.managerBin)
			for _, c := range env.clusters {
				_ = os.RemoveAll(filepath.Join(c.dir, "etcd"))
			}
			logf("kept operator and cluster logs in %s (FAULT_KEEP_LOGS)", env.work)
			return
		}
		_ = os.RemoveAll(env.work)
	})
	env.managerBin = filepath.Join(env.work, "manager")
	env.clusters = map[string]*cluster{}

	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	wg.Go(func() {
		cmd := exec.Command("go", "build", "-trimpath", "-o", env.managerBin, "./cmd/manager")
		cmd.Dir = env.root
		if _, err := utils.Run(cmd); err != nil {
			fail(err)
			return
		}
		// The upgrade scenarios' previous release, from the build cache this build just filled.
		if _, err := previousManager(); err != nil {
			fail(err)
		}
	})
	for _, name := range []string{"a", "b"} {
		wg.Go(func() {
			c, err := startCluster(name, env.work)
			mu.Lock()
			if c != nil {
				env.clusters[name] = c
			}
			mu.Unlock()
			if err != nil {
				fail(err)
			}
		})
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, c := range env.clusters {
			if err := c.stop(); err != nil {
				t.Error(err)
			}
		}
	})
	if len(errs) > 0 {
		t.Fatal(errors.Join(errs...))
	}

	guard, err := testkit.GuardPolicies(env.root)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel) // ends the recorders' watches before the clusters go
	for _, c := range env.clusters {
		if err := c.connect(); err != nil {
			t.Fatal(err)
		}
		err := c.proxyAPI()
		if c.apiProxy != nil {
			t.Cleanup(func() { _ = c.apiProxy.Close() })
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := c.installCRD(ctx); err != nil {
			t.Fatal(err)
		}
		if err := c.installGuard(ctx, guard); err != nil {
			t.Fatal(err)
		}
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: operatorNamespace}}
		if err := c.k8s.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		if c.rec, err = testkit.NewRecorder(ctx, c.cs, testkit.RecorderOptions{NamespacePrefix: namespacePrefix}); err != nil {
			t.Fatalf("cluster %s: %v", c.name, err)
		}
	}

	// Its wall clock can step (redis-clock-step); until a scenario steps it, it is the host's.
	env.redis = redisserver.Start(t, redisserver.WithClockShift())
	env.redisClient = redis.NewClient(&redis.Options{Addr: env.redis.Addr(), DialTimeout: 500 * time.Millisecond,
		ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond})
	t.Cleanup(func() { _ = env.redisClient.Close() })
	env.proxies = map[string]*faultproxy.Proxy{}
	env.operators = map[string]*operator{}
	for _, name := range []string{"a", "b"} {
		p, err := faultproxy.Start(env.redis.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Close() })
		env.proxies[name] = p
		o := newOperator(env.clusters[name], []string{"--redis-addr", p.Addr()})
		env.operators[name] = o
		// Registered after the proxies' and clusters' cleanups, so it runs first.
		t.Cleanup(o.stop)
	}
	for _, name := range []string{"a", "b"} {
		if err := env.operators[name].start(); err != nil {
			t.Fatal(err)
		}
	}
}

// ---------------------------------------------------------------- small helpers

// poll calls cond every 50 ms until it returns true, or fails after timeout
// with cond's last explanation.
func poll(timeout time.Duration, cond func() (bool, string)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, why := cond()
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %s: %s", timeout, why)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func logf(format string, args ...any) {
	fmt.Printf("%s  "+format+"\n", append([]any{time.Now().Format("15:04:05.000")}, args...)...)
}

func since(t time.Time) time.Duration { return time.Since(t).Round(time.Millisecond) }

func rel(t, origin time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return fmt.Sprintf("%+.3fs", t.Sub(origin).Seconds())
}

func joinNonEmpty(parts ...string) string {
	var out []string
	for _, p := range parts {
		if p != "" {
			out = append(out, p)
		}
	}
	return strings.Join(out, " ")
}
