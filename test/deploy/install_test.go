package deploy_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/lockedjob/lockedjob/internal/testutil/k8sassets"
	"github.com/lockedjob/lockedjob/test/utils"
)

// resources maps the kinds config/default installs to where the API serves them.
var resources = map[string]schema.GroupVersionResource{
	"Namespace":                {Version: "v1", Resource: "namespaces"},
	"ServiceAccount":           {Version: "v1", Resource: "serviceaccounts"},
	"Service":                  {Version: "v1", Resource: "services"},
	"Deployment":               {Group: "apps", Version: "v1", Resource: "deployments"},
	"Role":                     {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "roles"},
	"ClusterRole":              {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"},
	"RoleBinding":              {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "rolebindings"},
	"ClusterRoleBinding":       {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterrolebindings"},
	"CustomResourceDefinition": {Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"},
	"FlowSchema":               {Group: "flowcontrol.apiserver.k8s.io", Version: "v1", Resource: "flowschemas"},
	// The admission gate of guarded Jobs (config/guard).
	"MutatingAdmissionPolicy":          {Group: "admissionregistration.k8s.io", Version: "v1", Resource: "mutatingadmissionpolicies"},
	"MutatingAdmissionPolicyBinding":   {Group: "admissionregistration.k8s.io", Version: "v1", Resource: "mutatingadmissionpolicybindings"},
	"ValidatingAdmissionPolicy":        {Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingadmissionpolicies"},
	"ValidatingAdmissionPolicyBinding": {Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingadmissionpolicybindings"},
}

// clusterWide are the kinds above that live outside namespaces. kustomize's namespace
// transformer still stamps a namespace on a FlowSchema and on the admission policies and their
// bindings (the API server drops it).
var clusterWide = map[string]bool{"Namespace": true, "ClusterRole": true, "ClusterRoleBinding": true,
	"CustomResourceDefinition": true, "FlowSchema": true,
	"MutatingAdmissionPolicy": true, "MutatingAdmissionPolicyBinding": true,
	"ValidatingAdmissionPolicy": true, "ValidatingAdmissionPolicyBinding": true}

const managerDeployment = "lockedjob-controller-manager"

// localCluster is a kwok-only control plane from hack/cluster.sh in a folder and port block of
// the test's own; the chart and config/default need no real container to be installed.
type localCluster struct {
	utils.LocalCluster
	kubeconfig string
	cs         kubernetes.Interface
	dyn        dynamic.Interface
}

func startCluster(t *testing.T, root string) *localCluster {
	t.Helper()
	binDir, err := k8sassets.DefaultDir()
	if err != nil {
		t.Fatal(err)
	}
	// 32440 is this test's block.
	base, err := utils.FreeClusterPorts(32440)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("LOCKEDJOB_REAL_NODE", "0")
	c := &localCluster{LocalCluster: utils.LocalCluster{Root: root, Dir: t.TempDir(), PortBase: base, BinDir: binDir}}
	t.Cleanup(func() {
		if out, err := c.Down(2 * time.Minute); err != nil {
			t.Errorf("cluster down: %v\n%s", err, out)
		}
	})
	start := time.Now()
	if _, err := c.Script(3*time.Minute, "up"); err != nil {
		t.Fatal(err)
	}
	t.Logf("cluster up in %s (ports %d.., dir %s)", time.Since(start).Round(time.Millisecond), base, c.Dir)
	c.kubeconfig = filepath.Join(c.Dir, "kubeconfig")
	cfg, err := clientcmd.BuildConfigFromFlags("", c.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	// client-go's default of 5 requests a second made one round of waitGone over config/local's
	// objects take seconds, and its limiter failed the test near the deadline instead of saying
	// what was left.
	cfg.QPS, cfg.Burst = 100, 200
	if c.cs, err = kubernetes.NewForConfig(cfg); err != nil {
		t.Fatal(err)
	}
	if c.dyn, err = dynamic.NewForConfig(cfg); err != nil {
		t.Fatal(err)
	}
	return c
}

func (c *localCluster) kubectl() string { return filepath.Join(c.BinDir, "kubectl") }

// get reads the live counterpart of a rendered object; nil if it does not exist.
func (c *localCluster) get(ctx context.Context, t *testing.T, o *unstructured.Unstructured) *unstructured.Unstructured {
	t.Helper()
	gvr, ok := resources[o.GetKind()]
	if !ok {
		t.Fatalf("test does not know where the API serves %s", key(o))
	}
	var ri dynamic.ResourceInterface = c.dyn.Resource(gvr)
	if o.GetNamespace() != "" && !clusterWide[o.GetKind()] {
		ri = c.dyn.Resource(gvr).Namespace(o.GetNamespace())
	}
	live, err := ri.Get(ctx, o.GetName(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatalf("get %s: %v", key(o), err)
	}
	return live
}

// checkInstalled fails unless every object in want exists and the live RBAC grants exactly what
// the rendered RBAC grants.
func (c *localCluster) checkInstalled(ctx context.Context, t *testing.T, want []*unstructured.Unstructured) {
	t.Helper()
	var live []*unstructured.Unstructured
	for _, o := range want {
		l := c.get(ctx, t, o)
		if l == nil {
			t.Errorf("%s is not in the cluster", key(o))
			continue
		}
		live = append(live, l)
	}
	if d := diffRBAC(rbacOf(t, want), rbacOf(t, live)); len(d) > 0 {
		t.Errorf("RBAC in the cluster differs from kustomize build config/default:\n  %s", strings.Join(d, "\n  "))
	}
}

// readCustomResources lists every custom resource that objs define, once each, until the API
// server answers, as the manager's informers do when it starts. The manager here runs on a kwok
// node, so without this nothing ever reads them: the API server builds a resource's watch cache on
// its first read and refuses lists (429) until the cache is ready, and when that first read is the
// CRD finalizer's own list at uninstall, the finalizer backs off exponentially (its workqueue's
// default, 5 ms doubling to 1000 s), minutes on a loaded machine: "Terminating=True
// (InstanceDeletionFailed: could not list instances: storage is (re)initializing)".
func (c *localCluster) readCustomResources(ctx context.Context, t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	start := time.Now()
	for _, o := range objs {
		if o.GetKind() != "CustomResourceDefinition" {
			continue
		}
		group, _, _ := unstructured.NestedString(o.Object, "spec", "group")
		plural, _, _ := unstructured.NestedString(o.Object, "spec", "names", "plural")
		versions, _, _ := unstructured.NestedSlice(o.Object, "spec", "versions")
		if group == "" || plural == "" || len(versions) == 0 {
			t.Fatalf("%s names no group, plural or version", key(o))
		}
		version, _, _ := unstructured.NestedString(versions[0].(map[string]any), "name")
		gvr := schema.GroupVersionResource{Group: group, Version: version, Resource: plural}
		var err error
		for ctx.Err() == nil {
			if _, err = c.dyn.Resource(gvr).List(ctx, metav1.ListOptions{Limit: 1}); err == nil {
				break
			}
			pause(ctx)
		}
		if err != nil {
			t.Fatalf("list %s: %v", gvr, err)
		}
	}
	t.Logf("every custom resource answered a list in %s", time.Since(start).Round(time.Millisecond))
}

// waitGone polls until none of objs exists any more.
// Deleting a namespace can take a while on a loaded machine (the namespace controller waits for its
// pods), so the wait has a deadline of its own rather than what is left of the caller's.
func (c *localCluster) waitGone(_ context.Context, t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// The loop decides when time is up, not a read cut short at the deadline: then the failure
	// says what was left.
	read := context.WithoutCancel(ctx)
	var left []string
	for ctx.Err() == nil {
		left = left[:0]
		for _, o := range objs {
			if live := c.get(read, t, o); live != nil {
				left = append(left, key(o)+leftBecause(live))
			}
		}
		if len(left) == 0 {
			return
		}
		pause(ctx)
	}
	ns, err := c.cs.CoreV1().Namespaces().Get(context.Background(), operatorNS, metav1.GetOptions{})
	if err == nil {
		t.Fatalf("still in the cluster after 3m: %v; namespace %s: %s %+v", left, operatorNS, ns.Status.Phase, ns.Status.Conditions)
	}
	t.Fatalf("still in the cluster after 3m: %v", left)
}

// leftBecause says why an object is still there: its finalizers and the conditions its status
// gives (a CRD's Terminating condition says whether the API server is deleting its instances, or
// why it cannot).
func leftBecause(live *unstructured.Unstructured) string {
	var why []string
	if f := live.GetFinalizers(); len(f) > 0 {
		why = append(why, fmt.Sprintf("finalizers %v", f))
	}
	conds, _, _ := unstructured.NestedSlice(live.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok {
			why = append(why, fmt.Sprintf("%v=%v (%v: %v)", m["type"], m["status"], m["reason"], m["message"]))
		}
	}
	if live.GetDeletionTimestamp() == nil {
		why = append(why, "not being deleted")
	}
	if len(why) == 0 {
		return ""
	}
	return " [" + strings.Join(why, "; ") + "]"
}

// waitAvailable polls until the manager Deployment is Available and returns its pod's node.
func (c *localCluster) waitAvailable(ctx context.Context, t *testing.T, wantImage string) string {
	t.Helper()
	var last *appsv1.Deployment
	for ctx.Err() == nil {
		d, err := c.cs.AppsV1().Deployments(operatorNS).Get(ctx, managerDeployment, metav1.GetOptions{})
		if err == nil {
			last = d
			if available(d) {
				if got := d.Spec.Template.Spec.Containers[0].Image; got != wantImage {
					t.Errorf("Deployment runs image %q, want %q", got, wantImage)
				}
				return c.podNode(ctx, t, d)
			}
		}
		pause(ctx)
	}
	t.Fatalf("Deployment %s/%s not Available before the deadline; last status %+v", operatorNS, managerDeployment, statusOf(last))
	return ""
}

func available(d *appsv1.Deployment) bool {
	for _, c := range d.Status.Conditions {
		if c.Type == appsv1.DeploymentAvailable && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

func statusOf(d *appsv1.Deployment) any {
	if d == nil {
		return nil
	}
	return d.Status
}

func (c *localCluster) podNode(ctx context.Context, t *testing.T, d *appsv1.Deployment) string {
	t.Helper()
	sel := metav1.FormatLabelSelector(d.Spec.Selector)
	pods, err := c.cs.CoreV1().Pods(operatorNS).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil || len(pods.Items) == 0 {
		t.Fatalf("list the manager's pods (%s): %v, %d found", sel, err, len(pods.Items))
	}
	return pods.Items[0].Spec.NodeName
}

// pollEvery is how often the install checks read the cluster again.
const pollEvery = 200 * time.Millisecond

// pause waits for the next poll, or until ctx ends.
func pause(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-time.After(pollEvery):
	}
}

// The operator installed as users install it, into a real control plane: the Helm chart, then
// `make deploy` / `make undeploy` with config/default, then config/local on a node that carries
// the real node's label and taint (kwok plays its kubelet here; test/e2e runs the real one).
func TestInstallOnLocalCluster(t *testing.T) {
	tl := newTools(t)
	c := startCluster(t, tl.root)
	rendered := tl.kustomizeBuild(t, tl.overlay(t, "DEPLOY_OVERLAY=config/default"))
	// Namespaced objects first, so waitGone does not wait on a Namespace that waits on them.
	slices.SortStableFunc(rendered, func(a, b *unstructured.Unstructured) int {
		return strings.Compare(fmt.Sprint(a.GetKind() == "Namespace"), fmt.Sprint(b.GetKind() == "Namespace"))
	})

	t.Run("helm install and uninstall", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		// The chart leaves the Namespace to `helm install --create-namespace` and installs the
		// CRD admin/editor/viewer roles only when asked.
		var want []*unstructured.Unstructured
		for _, o := range rendered {
			if o.GetKind() != "Namespace" && !slices.Contains(helperRoles, o.GetName()) {
				want = append(want, o)
			}
		}
		env := utils.HelmEnv(t.TempDir())
		repo, tag, _ := strings.Cut(image, ":")
		start := time.Now()
		tl.run(t, env, tl.helm, "install", release, filepath.Join(tl.root, "dist", "chart"),
			"--kubeconfig", c.kubeconfig, "--namespace", operatorNS, "--create-namespace",
			"--set", "manager.image.repository="+repo, "--set", "manager.image.tag="+tag,
			// crd.keep (default true) keeps the CRD, and so every LockedJob, past an uninstall;
			// off here so the test can see the uninstall remove everything.
			"--set", "crd.keep=false",
			"--wait", "--timeout", "60s")
		t.Logf("helm install --wait took %s", time.Since(start).Round(time.Millisecond))
		c.checkInstalled(ctx, t, want)
		c.waitAvailable(ctx, t, image)
		c.readCustomResources(ctx, t, want)

		tl.run(t, env, tl.helm, "uninstall", release, "--kubeconfig", c.kubeconfig, "--namespace", operatorNS, "--wait")
		c.waitGone(ctx, t, want)
	})

	t.Run("make deploy and undeploy", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		// -o manifests: controller-gen would rewrite config/ under packages tested in parallel.
		env := []string{"KUBECONFIG=" + c.kubeconfig, "DEPLOY_OVERLAY=config/default", "DEPLOY_DIR=" + t.TempDir()}
		start := time.Now()
		tl.run(t, env, "make", "-s", "-o", "manifests", "deploy", "IMG="+image)
		c.checkInstalled(ctx, t, rendered)
		c.waitAvailable(ctx, t, image)
		t.Logf("make deploy → Deployment Available (kwok pod) in %s", time.Since(start).Round(time.Millisecond))
		c.checkLeaseRequestsPrioritised(ctx, t)
		c.readCustomResources(ctx, t, rendered)

		tl.run(t, env, "make", "-s", "-o", "manifests", "undeploy", "IMG="+image)
		c.waitGone(ctx, t, rendered)
	})

	t.Run("config/local lands on the real node", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		c.addFakeRealNode(ctx, t)
		dir := tl.overlay(t, "DEPLOY_OVERLAY=config/local", "KUBECONFIG="+c.kubeconfig, "KUBECTL="+c.kubectl())
		values, err := os.ReadFile(filepath.Join(dir, "local-cluster.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{
			`apiserverPort: "` + strconv.Itoa(c.PortBase+3) + `"`, // read from the kubeconfig
			"probeAddr: 127.0.0.1:18081",                          // the node's InternalIP, as kwok reports it
		} {
			if !strings.Contains(string(values), want) {
				t.Errorf("local-cluster.yaml lacks %q:\n%s", want, values)
			}
		}
		manifests := tl.run(t, nil, tl.kustomize, "build", dir)
		manifestsFile := filepath.Join(dir, "manifests.yaml")
		writeFile(t, manifestsFile, manifests)
		tl.run(t, nil, c.kubectl(), "--kubeconfig", c.kubeconfig, "apply", "-f", manifestsFile)
		if node := c.waitAvailable(ctx, t, image); node != fakeRealNode {
			t.Errorf("the manager's pod runs on %q, want the real node %q", node, fakeRealNode)
		}
		c.readCustomResources(ctx, t, decode(t, manifests))
		// Not kubectl's own wait: waitGone bounds it and says what is left.
		tl.run(t, nil, c.kubectl(), "--kubeconfig", c.kubeconfig, "delete", "--wait=false", "-f", manifestsFile)
		c.waitGone(ctx, t, decode(t, manifests))
	})
}

const fakeRealNode = "lockedjob-real-1"

// addFakeRealNode adds a kwok node with the real node's name, label and taint: config/local's
// nodeSelector and toleration must bring the manager there, and only there.
func (c *localCluster) addFakeRealNode(ctx context.Context, t *testing.T) {
	t.Helper()
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        fakeRealNode,
			Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"},
			Labels:      map[string]string{"lockedjob.dev/real-node": "true", "kubernetes.io/hostname": fakeRealNode},
		},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "lockedjob.dev/real-node", Value: "true", Effect: corev1.TaintEffectNoSchedule}}},
	}
	if _, err := c.cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create node %s: %v", fakeRealNode, err)
	}
	ip := regexp.MustCompile(`^\d+\.\d+\.\d+\.\d+$`)
	for ctx.Err() == nil {
		n, err := c.cs.CoreV1().Nodes().Get(ctx, fakeRealNode, metav1.GetOptions{})
		if err == nil {
			for _, a := range n.Status.Addresses {
				if a.Type == corev1.NodeInternalIP && ip.MatchString(a.Address) {
					return
				}
			}
		}
		pause(ctx)
	}
	t.Fatalf("kwok gave node %s no InternalIP before the deadline", fakeRealNode)
}

// checkLeaseRequestsPrioritised asks the API server, as the manager's ServiceAccount, for a Lease in
// its namespace, and checks from API Priority and Fairness's response header that the request was
// classified into the built-in leader-election priority level (config/manager/flowschema.yaml), so
// the manager's own load cannot starve its leader-election renewals.
func (c *localCluster) checkLeaseRequestsPrioritised(ctx context.Context, t *testing.T) {
	t.Helper()
	plc, err := c.cs.FlowcontrolV1().PriorityLevelConfigurations().Get(ctx, "leader-election", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get the leader-election priority level: %v", err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", c.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Impersonate.UserName = "system:serviceaccount:" + operatorNS + ":" + managerDeployment
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet,
		cfg.Host+"/apis/coordination.k8s.io/v1/namespaces/"+operatorNS+"/leases/apf-probe", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("get a Lease as the manager: %v", err)
	}
	_ = resp.Body.Close()
	if got := resp.Header.Get("X-Kubernetes-PF-PriorityLevel-UID"); got != string(plc.UID) {
		t.Errorf("the manager's Lease request went to priority level %q (FlowSchema %q), want leader-election (%s); HTTP %d",
			got, resp.Header.Get("X-Kubernetes-PF-FlowSchema-UID"), plc.UID, resp.StatusCode)
	}
}
