//go:build e2e

// Package e2e is the end-to-end suite of lockedjob: a real control plane
// (hack/cluster.sh, with kwok playing the kubelet and one real node of kubelet
// and containerd) or any cluster named by E2E_KUBECONFIG, and real
// redis-server processes. Most scenarios run the manager binary as a local
// process that the suite starts, stops, kills and pauses; the in-cluster lane
// deploys it from its image (E2E_IMG) with config/default and runs the Jobs
// as real containers.
// See docs/e2e.md.
package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/internal/testutil/k8sassets"
	"github.com/lockedjob/lockedjob/internal/testutil/redisserver"
	"github.com/lockedjob/lockedjob/test/utils"
)

const (
	// operatorNamespace holds the manager's leader-election Lease and token-key Secret.
	operatorNamespace = "lockedjob-system"
	// leaseName is the manager's LeaderElectionID.
	leaseName = "lockedjob.batch.lockedjob.dev"
	// defaultPortBase is the suite's own cluster's port block, away from the
	// developer's/demo cluster at 26440.
	defaultPortBase = 27440
)

// suite is what BeforeSuite set up and AfterSuite tears down.
var suite struct {
	root       string // repository root
	work       string // temp folder: manager binary and logs, cluster state
	managerBin string

	ownCluster bool // started by the suite (else E2E_KUBECONFIG)
	binDir     string
	clusterDir string
	portBase   int
	kubeconfig string

	cfg *rest.Config
	k8s client.Client
	cs  kubernetes.Interface

	redis *redisserver.Server // the single-node Redis shared by most scenarios

	start time.Time
}

var scheme = runtime.NewScheme()

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(batchv1alpha1.AddToScheme(scheme))
	utilruntime.Must(apiextensionsv1.AddToScheme(scheme))
}

// TestE2E runs the suite. Ginkgo's own timeout is kept a minute under `go
// test -timeout`, so on a hang Ginkgo interrupts the specs and AfterSuite still
// stops the cluster, the managers and the redis-servers.
func TestE2E(t *testing.T) {
	RegisterFailHandler(Fail)
	suiteCfg, reporterCfg := GinkgoConfiguration()
	if deadline, ok := t.Deadline(); ok {
		if left := time.Until(deadline) - time.Minute; left > 0 && left < suiteCfg.Timeout {
			suiteCfg.Timeout = left
		}
	}
	RunSpecs(t, "lockedjob e2e suite", suiteCfg, reporterCfg)
}

var _ = BeforeSuite(func(ctx SpecContext) {
	suite.start = time.Now()
	SetDefaultEventuallyPollingInterval(100 * time.Millisecond)
	SetDefaultConsistentlyPollingInterval(200 * time.Millisecond)
	SetDefaultEventuallyTimeout(30 * time.Second)

	var err error
	suite.root, err = utils.ProjectDir()
	Expect(err).NotTo(HaveOccurred())
	suite.work, err = os.MkdirTemp("", "lockedjob-e2e-")
	Expect(err).NotTo(HaveOccurred())
	suite.managerBin = filepath.Join(suite.work, "manager")
	suite.kubeconfig = os.Getenv("E2E_KUBECONFIG")
	suite.ownCluster = suite.kubeconfig == ""

	// The three slow start-ups run side by side: manager build, cluster, Redis.
	var wg sync.WaitGroup
	var buildErr, clusterErr, redisErr error
	wg.Go(func() {
		t0 := time.Now()
		cmd := exec.Command("go", "build", "-o", suite.managerBin, "./cmd/manager")
		cmd.Dir = suite.root
		_, buildErr = utils.Run(cmd)
		logf("built the manager in %s", since(t0))
	})
	if suite.ownCluster {
		wg.Go(func() { clusterErr = startCluster() })
	}
	wg.Go(func() {
		suite.redis, redisErr = redisserver.StartProcess()
	})
	wg.Wait()
	Expect(buildErr).NotTo(HaveOccurred(), "building the manager")
	Expect(clusterErr).NotTo(HaveOccurred(), "starting the local control plane")
	Expect(redisErr).NotTo(HaveOccurred(), "starting redis-server")
	logf("shared redis-server on %s", suite.redis.Addr())
	managers.Bin, managers.Dir = suite.managerBin, suite.work
	managers.Env = []string{"KUBECONFIG=" + suite.kubeconfig}

	suite.cfg, err = clientcmd.BuildConfigFromFlags("", suite.kubeconfig)
	Expect(err).NotTo(HaveOccurred())
	suite.cfg.QPS, suite.cfg.Burst = 100, 200
	suite.k8s, err = client.New(suite.cfg, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())
	suite.cs, err = kubernetes.NewForConfig(suite.cfg)
	Expect(err).NotTo(HaveOccurred())

	installCRD(ctx)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: operatorNamespace}}
	if err := suite.k8s.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		Fail(fmt.Sprintf("create namespace %s: %v", operatorNamespace, err))
	}
	if !suite.ownCluster {
		refuseForeignOperator(ctx)
	}
	logf("suite ready after %s (kubeconfig %s)", since(suite.start), suite.kubeconfig)
}, NodeTimeout(20*time.Minute)) // a cold k8s-bin build alone takes ~10 min

var _ = AfterSuite(func() {
	stopAllManagers()
	if suite.redis != nil {
		Expect(suite.redis.Close()).To(Succeed())
	}
	if suite.ownCluster && suite.clusterDir != "" {
		stopCluster()
	}
	failed := CurrentSpecReport().Failed() || suiteFailed.Load()
	if suite.work != "" {
		if failed {
			// Keep the logs; drop the bulk (manager binary, etcd data: ~150 MB).
			_ = os.Remove(suite.managerBin)
			if suite.clusterDir != "" {
				_ = os.RemoveAll(filepath.Join(suite.clusterDir, "etcd"))
			}
			logf("keeping the manager and cluster logs in %s for inspection", suite.work)
		} else {
			_ = os.RemoveAll(suite.work)
		}
	}
	logf("suite total %s", since(suite.start))
	printMeasurements()
})

// startCluster brings up the suite's own control plane with hack/cluster.sh,
// in its own folder and on its own ports.
func startCluster() error {
	var err error
	suite.binDir, err = k8sassets.DefaultDir()
	if err != nil {
		return err
	}
	preferred := defaultPortBase
	if v := os.Getenv("E2E_CLUSTER_PORT_BASE"); v != "" {
		if preferred, err = strconv.Atoi(v); err != nil {
			return fmt.Errorf("E2E_CLUSTER_PORT_BASE: %w", err)
		}
	}
	if suite.portBase, err = utils.FreeClusterPorts(preferred); err != nil {
		return err
	}
	suite.clusterDir = filepath.Join(suite.work, "cluster")
	suite.kubeconfig = filepath.Join(suite.clusterDir, "kubeconfig")
	t0 := time.Now()
	if _, err := clusterScript(5*time.Minute, "up"); err != nil {
		return err
	}
	logf("control plane up in %s (ports %d..%d, dir %s)", since(t0), suite.portBase, suite.portBase+5, suite.clusterDir)
	return nil
}

// stopCluster runs `hack/cluster.sh down` and checks that every process `up`
// recorded is gone.
func stopCluster() {
	out, err := localCluster().Down(2 * time.Minute)
	Expect(err).NotTo(HaveOccurred(), out)
}

// localCluster is how the shared runner (test/utils.LocalCluster) names the suite's cluster.
func localCluster() utils.LocalCluster {
	return utils.LocalCluster{Root: suite.root, Dir: suite.clusterDir, PortBase: suite.portBase, BinDir: suite.binDir}
}

func clusterScript(timeout time.Duration, args ...string) (string, error) {
	return localCluster().Script(timeout, args...)
}

// installCRD creates or updates every CRD in config/crd/bases (LockedJob, Lock, ClusterLock) and
// waits until each is established.
func installCRD(ctx context.Context) {
	paths, err := utils.CRDFiles(suite.root)
	Expect(err).NotTo(HaveOccurred())
	for _, path := range paths {
		installOneCRD(ctx, path)
	}
	Eventually(func(g Gomega) {
		g.Expect(suite.k8s.List(ctx, &batchv1alpha1.LockedJobList{})).To(Succeed())
	}).WithContext(ctx).Should(Succeed())
}

func installOneCRD(ctx context.Context, path string) {
	b, err := os.ReadFile(path)
	Expect(err).NotTo(HaveOccurred())
	want := &apiextensionsv1.CustomResourceDefinition{}
	Expect(yaml.UnmarshalStrict(b, want)).To(Succeed())
	got := &apiextensionsv1.CustomResourceDefinition{}
	err = suite.k8s.Get(ctx, client.ObjectKeyFromObject(want), got)
	switch {
	case apierrors.IsNotFound(err):
		Expect(suite.k8s.Create(ctx, want)).To(Succeed())
	case err == nil:
		want.ResourceVersion = got.ResourceVersion
		Expect(suite.k8s.Update(ctx, want)).To(Succeed())
	default:
		Fail(fmt.Sprintf("get CRD %s: %v", want.Name, err))
	}
	Eventually(func(g Gomega) {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		g.Expect(suite.k8s.Get(ctx, client.ObjectKeyFromObject(want), crd)).To(Succeed())
		established := false
		for _, c := range crd.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				established = true
			}
		}
		g.Expect(established).To(BeTrue(), "CRD %s not established", crd.Name)
	}).WithContext(ctx).Should(Succeed())
}

// refuseForeignOperator fails when another lockedjob manager holds the leader
// lease of the target cluster: it would fight the suite's manager.
func refuseForeignOperator(ctx context.Context) {
	lease := &coordinationv1.Lease{}
	err := suite.k8s.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: leaseName}, lease)
	if apierrors.IsNotFound(err) {
		return
	}
	Expect(err).NotTo(HaveOccurred())
	if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" || lease.Spec.RenewTime == nil {
		return
	}
	d := 15 * time.Second
	if lease.Spec.LeaseDurationSeconds != nil {
		d = time.Duration(*lease.Spec.LeaseDurationSeconds) * time.Second
	}
	Expect(time.Since(lease.Spec.RenewTime.Time)).To(BeNumerically(">", d),
		"another lockedjob operator (%s) leads in this cluster; stop it before running the e2e suite against it", *lease.Spec.HolderIdentity)
}
