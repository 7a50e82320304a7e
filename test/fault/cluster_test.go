//go:build fault

package fault

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/internal/testutil/faultproxy"
	"github.com/lockedjob/lockedjob/test/testkit"
	"github.com/lockedjob/lockedjob/test/utils"
)

// defaultPortBase is cluster a's preferred port block; b's is 20 above. They are away from the
// developer's cluster (26440) and the e2e suite's (27440).
const defaultPortBase = 28440

// portBaseEnv moves both clusters' port blocks (b = base+20), so a second run of the suite on the
// same machine (a helper's, beside CI's) does not take the first one's ports.
const portBaseEnv = "LOCKEDJOB_FAULT_PORT_BASE"

// portBase is the preferred port block of the cluster named name.
func portBase(name string) (int, error) {
	base := defaultPortBase
	if v := os.Getenv(portBaseEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1024 || n > 65000 {
			return 0, fmt.Errorf("%s=%q: want a port number between 1024 and 65000", portBaseEnv, v)
		}
		base = n
	}
	return base + 20*strings.Index("ab", name), nil
}

// cluster is one local control plane started with hack/cluster.sh in its own
// folder and port block.
type cluster struct {
	name       string // a or b: also the operator's --cluster-id
	dir        string
	portBase   int
	kubeconfig string
	// operatorKubeconfig is kubeconfig with the API server behind apiProxy: the operator's own
	// path to its API server, which a scenario can slow down or cut (operator.slowable). TLS passes
	// through the byte proxy untouched (the serving certificate names 127.0.0.1, whatever the port).
	operatorKubeconfig string
	apiProxy           *faultproxy.Proxy
	k8s                client.Client
	cs                 kubernetes.Interface
	rec                *testkit.Recorder
}

// startCluster runs `hack/cluster.sh up` for a cluster named name under work.
func startCluster(name, work string) (*cluster, error) {
	preferred, err := portBase(name)
	if err != nil {
		return nil, err
	}
	base, err := utils.FreeClusterPorts(preferred)
	if err != nil {
		return nil, err
	}
	c := &cluster{name: name, dir: filepath.Join(work, "cluster-"+name), portBase: base}
	c.kubeconfig = filepath.Join(c.dir, "kubeconfig")
	t0 := time.Now()
	if out, err := c.script(5*time.Minute, "up"); err != nil {
		return c, fmt.Errorf("cluster %s up: %w\n%s", name, err, out)
	}
	logf("cluster %s up in %s (ports %d..%d)", name, since(t0), base, base+5)
	return c, nil
}

// connect builds the clients; separate from startCluster so both clusters
// start in parallel and any failure still leaves a cluster to stop.
func (c *cluster) connect() error {
	cfg, err := clientcmd.BuildConfigFromFlags("", c.kubeconfig)
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = 100, 200
	if c.k8s, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		return err
	}
	c.cs, err = kubernetes.NewForConfig(cfg)
	return err
}

// proxyAPI puts a fault proxy between the operator and the API server and writes
// operatorKubeconfig. The suite's own clients keep the direct path.
func (c *cluster) proxyAPI() error {
	kc, err := clientcmd.LoadFromFile(c.kubeconfig)
	if err != nil {
		return fmt.Errorf("cluster %s kubeconfig: %w", c.name, err)
	}
	if len(kc.Clusters) != 1 {
		return fmt.Errorf("cluster %s kubeconfig names %d clusters, want 1", c.name, len(kc.Clusters))
	}
	for _, kcCluster := range kc.Clusters {
		server, err := url.Parse(kcCluster.Server)
		if err != nil {
			return fmt.Errorf("cluster %s server %q: %w", c.name, kcCluster.Server, err)
		}
		if c.apiProxy, err = faultproxy.Start(server.Host); err != nil {
			return err
		}
		server.Host = c.apiProxy.Addr()
		kcCluster.Server = server.String()
	}
	c.operatorKubeconfig = filepath.Join(c.dir, "kubeconfig-operator")
	return clientcmd.WriteToFile(*kc, c.operatorKubeconfig)
}

// local is how the shared runner (test/utils.LocalCluster) names this cluster.
func (c *cluster) local() utils.LocalCluster {
	// The fault scenarios judge the operator, not the kubelet: kwok's pods are enough, and two real
	// nodes would only cost the shared cores time.
	return utils.LocalCluster{Root: env.root, Dir: c.dir, PortBase: c.portBase, BinDir: env.binDir,
		Env: []string{"LOCKEDJOB_REAL_NODE=0"}}
}

func (c *cluster) script(timeout time.Duration, args ...string) (string, error) {
	return c.local().Script(timeout, args...)
}

// stop runs `hack/cluster.sh down` and checks that every process it recorded
// is gone.
func (c *cluster) stop() error {
	if out, err := c.local().Down(2 * time.Minute); err != nil {
		return fmt.Errorf("cluster %s down: %w\n%s", c.name, err, out)
	}
	return nil
}

// signal sends sig to one of the cluster's components (its PID from the cluster dir's pids/) and
// returns the PID.
func (c *cluster) signal(component string, sig syscall.Signal) (int, error) {
	pid, err := c.local().PID(component)
	if err != nil {
		return 0, fmt.Errorf("cluster %s: %w", c.name, err)
	}
	if err := syscall.Kill(pid, sig); err != nil {
		return 0, fmt.Errorf("cluster %s: %v to %s %d: %w", c.name, sig, component, pid, err)
	}
	return pid, nil
}

// killAPIServer SIGKILLs the cluster's kube-apiserver, like a crashed control
// plane node, and waits until it is gone.
func (c *cluster) killAPIServer() error {
	pid, err := c.signal("kube-apiserver", syscall.SIGKILL)
	if err != nil {
		return err
	}
	return poll(30*time.Second, func() (bool, string) {
		return !utils.ProcessAlive(pid), fmt.Sprintf("kube-apiserver %d still alive", pid)
	})
}

// pauseControllerManager SIGSTOPs the cluster's kube-controller-manager, so no Job controller acts,
// and returns once every thread of it is stopped; resumeControllerManager lets it go on.
func (c *cluster) pauseControllerManager() error {
	pid, err := c.signal("kube-controller-manager", syscall.SIGSTOP)
	if err != nil {
		return err
	}
	return poll(10*time.Second, func() (bool, string) {
		return utils.ProcessStopped(pid), fmt.Sprintf("kube-controller-manager %d not stopped", pid)
	})
}

func (c *cluster) resumeControllerManager() error {
	_, err := c.signal("kube-controller-manager", syscall.SIGCONT)
	return err
}

// restartAPIServer starts the cluster's kube-apiserver again and waits until
// it is ready.
func (c *cluster) restartAPIServer() error {
	if out, err := c.script(2*time.Minute, "restart-apiserver"); err != nil {
		return fmt.Errorf("cluster %s restart-apiserver: %w\n%s", c.name, err, out)
	}
	return nil
}

// installCRD creates every CRD of the project and waits until LockedJobs are served.
func (c *cluster) installCRD(ctx context.Context) error {
	files, err := utils.CRDFiles(env.root)
	if err != nil {
		return err
	}
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			return err
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(b, crd); err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		if err := c.k8s.Create(ctx, crd); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create CRD %s in cluster %s: %w", crd.Name, c.name, err)
		}
	}
	return poll(60*time.Second, func() (bool, string) {
		err := c.k8s.List(ctx, &batchv1alpha1.LockedJobList{})
		return err == nil, fmt.Sprintf("LockedJobs not served in cluster %s: %v", c.name, err)
	})
}

// installGuard installs the admission gate of guarded Jobs (config/guard, as kustomize builds it)
// and waits until it is in force, so a labelled Job is created suspended. The clusters' API servers
// serve admissionregistration.k8s.io/v1 and run the MutatingAdmissionPolicy and
// ValidatingAdmissionPolicy plugins by default (Kubernetes 1.37); a server that did not would
// refuse the policies here.
func (c *cluster) installGuard(ctx context.Context, policies []*unstructured.Unstructured) error {
	if err := testkit.InstallGuard(ctx, c.k8s, policies, "default", 60*time.Second); err != nil {
		return fmt.Errorf("cluster %s: %w", c.name, err)
	}
	return nil
}
