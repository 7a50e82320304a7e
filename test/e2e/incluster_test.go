//go:build e2e

package e2e

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/redis/go-redis/v9"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/internal/fencedstore"
	"github.com/lockedjob/lockedjob/internal/redislock"
	"github.com/lockedjob/lockedjob/internal/testutil/ports"
	"github.com/lockedjob/lockedjob/internal/testutil/redisserver"
	"github.com/lockedjob/lockedjob/test/testkit"
	"github.com/lockedjob/lockedjob/test/utils"
)

// The in-cluster lane: the manager runs as users run it, the Deployment of config/default built
// from its image, and the Jobs are real containers of the workload image (cmd/fencedwriter) that
// write to a fenced store with their fencing token. On the suite's own cluster this needs the
// real node (hack/cluster.sh adds it where the machine allows); on another cluster (E2E_KUBECONFIG)
// the images must be loaded there already and E2E_POD_REDIS_HOST must name the address at which
// the pods reach this machine's redis-servers.

const (
	realNodeLabel  = "lockedjob.dev/real-node"
	managerDeploy  = "lockedjob-controller-manager"
	managerLabel   = "control-plane"
	managerLabelV  = "controller-manager"
	defaultMgrImg  = "lockedjob.local/manager:dev"
	defaultWorkImg = "lockedjob.local/fencedwriter:dev"
)

// deployment is the manager deployed in the cluster, the node its pods run on, and the fenced
// store the workloads write to.
type deployment struct {
	dir        string // the generated kustomization
	local      bool   // on the suite's own cluster with its real node
	nodeIP     string // where pods on that node reach this machine ("" elsewhere: E2E_POD_REDIS_HOST)
	workImg    string
	lockRedis  *redisserver.Server // the manager's Redis
	store      *redisserver.Server
	storeAddr  string // the store as pods reach it
	prefix     string // the manager's --key-prefix
	pullPolicy corev1.PullPolicy
	// guard: the admission gate of guarded Jobs (config/guard) is installed beside the manager;
	// gate is what it installed, removed again by undeploy.
	guard bool
	gate  []*unstructured.Unstructured
}

var _ = Describe("The manager deployed in-cluster, Jobs as real containers", Ordered, Label("in-cluster"), func() {
	var d *deployment
	var s *scenario
	var guarded *guardedLane

	BeforeAll(func(ctx SpecContext) {
		d = deploy(ctx)
		s = newScenario("ic", false, d.lockRedis)
		s.prefix = d.prefix
		s.deployed = d
		// Guarded Jobs (guarded_test.go) share the deployment and the namespace. The CronJob's
		// runs come on the minute: its scenario starts here and is judged by the lane's last spec.
		guarded = startGuardedLane(ctx, d, s)
	})

	It("runs LockedJobs on one lock strictly one after another, each writing under its own fencing token", func(ctx SpecContext) {
		const n = 5
		created := time.Now()
		for i := 1; i <= n; i++ {
			s.create(d.writerJob(s, fmt.Sprintf("w%d", i), "one", testkit.LockedJobOptions{}, "--writes=3", "--interval=200ms"))
		}
		// The first holder's whole life, as a user sees it: create -> Succeeded (its container writes for 0.4 s).
		Eventually(func() bool {
			var list batchv1alpha1.LockedJobList
			Expect(suite.k8s.List(ctx, &list, client.InNamespace(s.ns))).To(Succeed())
			// The lane's namespace holds the guarded-Job specs' LockedJobs too (guarded_test.go).
			return slices.ContainsFunc(list.Items, func(lj batchv1alpha1.LockedJob) bool {
				return strings.HasPrefix(lj.Name, "w") && lj.Status.Phase == batchv1alpha1.PhaseSucceeded
			})
		}).WithTimeout(time.Minute).Should(BeTrue())
		measure("in-cluster: first LockedJob create -> Succeeded %s (a real container writing 3 times, 200 ms apart)", ms(time.Since(created)))
		var ljs []*batchv1alpha1.LockedJob
		for i := 1; i <= n; i++ {
			ljs = append(ljs, s.eventuallyPhase(fmt.Sprintf("w%d", i), batchv1alpha1.PhaseSucceeded, 3*time.Minute))
		}
		measure("in-cluster: %d LockedJobs on one lock, create -> all Succeeded %s", n, ms(time.Since(created)))
		slices.SortFunc(ljs, func(a, b *batchv1alpha1.LockedJob) int {
			return cmp.Compare(deref(a.Status.FencingToken), deref(b.Status.FencingToken))
		})

		// The containers' own logs, in fencing-token order: each starts after the one before ended;
		// and the store's history: one unbroken block of accepted writes per holder, tokens rising.
		runs := make([]writerRun, 0, n)
		for _, lj := range ljs {
			runs = append(runs, writerRun{Job: lj.Status.JobName, Fence: deref(lj.Status.FencingToken), Writes: 3})
		}
		gaps := d.expectOneAfterAnother(ctx, s.ns, "one", runs)
		measure("in-cluster: handoff gap between two real containers (last line of one -> first line of the next), %d handoffs: %s",
			len(gaps), durationStats(gaps))
		// Where it goes: the kubelet takes the container's exit to the pod Succeeded, the operator
		// takes that to the next Job (the lock goes at the pod's outcome, before the Job controller's
		// Complete), then a pod starts.
		var exitToSucceeded, operator, createToFirstLine []time.Duration
		for i := 1; i < len(ljs); i++ {
			h := s.rec.History()
			prev, next := h.Job(ljs[i-1].Status.JobName), h.Job(ljs[i].Status.JobName)
			prevDone := h.WorkEnded(prev.Name)
			_, prevEnd := logSpan(d.jobLog(ctx, s.ns, prev.Name))
			nextStart, _ := logSpan(d.jobLog(ctx, s.ns, next.Name))
			Expect(next.Added).To(BeTemporally(">=", prevDone), "Job %s created before %s's pod ended", next.Name, prev.Name)
			exitToSucceeded = append(exitToSucceeded, prevDone.Sub(prevEnd))
			operator = append(operator, next.Added.Sub(prevDone))
			createToFirstLine = append(createToFirstLine, nextStart.Sub(next.Added))
		}
		measure("in-cluster: of that gap, last line -> pod seen Succeeded %s; Succeeded -> next Job seen (the operator) %s; next Job seen -> its container's first line %s",
			durationStats(exitToSucceeded), durationStats(operator), durationStats(createToFirstLine))

		// `kubectl logs job/<name>`, as a user would read it.
		out, err := utils.Run(exec.Command(kubectlBin(), "--kubeconfig", suite.kubeconfig, "-n", s.ns, "logs", "job/"+ljs[0].Status.JobName))
		Expect(err).NotTo(HaveOccurred())
		Expect(out).To(ContainSubstring(fmt.Sprintf("fencing token=%d", deref(ljs[0].Status.FencingToken))))
		logf("kubectl logs job/%s:\n%s", ljs[0].Status.JobName, out)
	}, SpecTimeout(5*time.Minute))

	It("refuses every write of a holder whose operator was paused past the ttl, and stops it with SIGTERM on resume", func(ctx SpecContext) {
		// On the suite's own cluster and on kind the manager's container is a process of this
		// machine; a remote cluster's is not.
		mgr, ok := d.managerPID(ctx)
		if !ok {
			Skip("pausing the manager needs its process on this machine (the suite's own cluster, or kind)")
		}
		s.create(d.writerJob(s, "stale", "pause", testkit.LockedJobOptions{TTL: 3 * time.Second, Renew: time.Second, OnLockLost: batchv1alpha1.LockLostSuspend},
			"--writes=0", "--interval=200ms"))
		lj := s.eventuallyRunningPod("stale", time.Minute)
		staleFence := deref(lj.Status.FencingToken)
		store := d.storeOf("pause")
		Eventually(func() int { return countWrites(d.history(ctx, "pause"), staleFence, "accepted") }).
			WithTimeout(30*time.Second).Should(BeNumerically(">=", 2), "the holder's container writes")

		Expect(syscall.Kill(mgr, syscall.SIGSTOP)).To(Succeed())
		DeferCleanup(func() { _ = syscall.Kill(mgr, syscall.SIGCONT) })
		Eventually(func() bool { return utils.ProcessStopped(mgr) }).WithTimeout(10 * time.Second).Should(BeTrue())
		rdb := s.rdb[0]
		Eventually(func() (int64, error) { return rdb.Exists(ctx, lj.Status.LockKey).Result() }).
			WithTimeout(15*time.Second).Should(BeZero(), "lock key did not expire")

		// The test is the next holder: it acquires the lock and writes under its newer token.
		other := acquireAs(ctx, rdb, d.prefix, lj.Status.LockKey)
		DeferCleanup(func(ctx SpecContext) { _ = other.Release(ctx) })
		Expect(other.Fence()).To(BeNumerically(">", staleFence))
		Expect(store.Write(ctx, other.Fence(), "next-holder", "the newer holder's data")).To(Succeed())

		// The paused operator cannot stop its container, which keeps writing: the store refuses it all.
		Eventually(func() int { return refusedAfter(d.history(ctx, "pause"), other.Fence(), staleFence) }).
			WithTimeout(20*time.Second).Should(BeNumerically(">=", 5), "the stale container keeps trying")
		Expect(syscall.Kill(mgr, syscall.SIGCONT)).To(Succeed())

		s.eventuallyPhase("stale", batchv1alpha1.PhaseLockLost, time.Minute)
		var note string
		Eventually(func() string {
			for _, e := range d.history(ctx, "pause") {
				if e.Result == "note" && strings.Contains(e.Value, "SIGTERM") {
					note = e.Value
				}
			}
			return note
		}).WithTimeout(time.Minute).ShouldNot(BeEmpty(), "the workload saw SIGTERM when onLockLost Suspend stopped it")
		Eventually(func() []corev1.Pod { return s.podsOfJob(lj.Status.JobName) }).WithTimeout(time.Minute).Should(BeEmpty())

		h := d.history(ctx, "pause")
		accepted, refused := acceptedAfter(h, other.Fence(), staleFence), refusedAfter(h, other.Fence(), staleFence)
		Expect(accepted).To(BeZero(), "a write of the stale holder was accepted after the next holder's")
		measure("in-cluster: paused operator past ttl: stale holder's writes after the next holder's: %d accepted, %d refused; workload: %q",
			accepted, refused, note)
	}, SpecTimeout(4*time.Minute))

	It("ends a failing container's LockedJob Failed and hands the lock on", func(ctx SpecContext) {
		// The failing one writes for 2 s, so the waiter is created while it holds the lock.
		s.create(d.writerJob(s, "fails", "fail", testkit.LockedJobOptions{}, "--writes=3", "--interval=1s", "--exit-code=3"))
		s.eventuallyPhase("fails", batchv1alpha1.PhaseRunning, time.Minute)
		s.create(d.writerJob(s, "after", "fail", testkit.LockedJobOptions{}, "--writes=1", "--interval=100ms"))
		failed := s.eventuallyPhase("fails", batchv1alpha1.PhaseFailed, 2*time.Minute)
		after := s.eventuallyPhase("after", batchv1alpha1.PhaseSucceeded, 2*time.Minute)
		Expect(deref(after.Status.FencingToken)).To(BeNumerically(">", deref(failed.Status.FencingToken)))
		Expect(d.jobLog(ctx, s.ns, failed.Status.JobName)).To(ContainSubstring("exit 3"))
	}, SpecTimeout(3*time.Minute))

	It("shows the kubelet's error for a missing image in the LockedJob's status", func(ctx SpecContext) {
		lj := d.writerJob(s, "noimage", "noimage", testkit.LockedJobOptions{})
		lj.Spec.JobTemplate.Spec.Template.Spec.Containers[0].Image = "lockedjob.local/not-there:v0"
		lj.Spec.JobTemplate.Spec.Template.Spec.Containers[0].ImagePullPolicy = corev1.PullNever
		s.create(lj)
		Eventually(func(g Gomega) {
			got := s.get("noimage")
			g.Expect(got.Status.Message).To(ContainSubstring("ErrImageNeverPull"))
			g.Expect(got.Status.Message).To(ContainSubstring("lockedjob.local/not-there:v0"))
		}).WithTimeout(time.Minute).Should(Succeed())
	}, SpecTimeout(2*time.Minute))

	guardedSpecs(func() *guardedLane { return guarded })
})

// deploy loads the images, starts the fenced store and deploys the manager from config/default
// (with config/local on the suite's own cluster) through a generated kustomization.
func deploy(ctx context.Context) *deployment {
	GinkgoHelper()
	d := placeWorkloads(ctx)
	d.prefix, d.workImg = "e2e-ic:", envOr("E2E_WORKLOAD_IMG", defaultWorkImg)
	mgrImg := envOr("E2E_IMG", defaultMgrImg)

	if d.local {
		t0 := time.Now()
		for _, img := range []string{"manager", "fencedwriter"} {
			tar := filepath.Join(envOr("E2E_IMAGES_DIR", filepath.Join(suite.root, "bin", "images")), img+".tar")
			Expect(tar).To(BeAnExistingFile(), "image tarball missing: run `make images` (make test-e2e does)")
			out, err := clusterScript(2*time.Minute, "load-image", tar)
			Expect(err).NotTo(HaveOccurred(), out)
		}
		logf("loaded the manager and workload images into the real node in %s", since(t0))
	}

	// The manager reaches its Redis on loopback on the local cluster (it runs in the node's network
	// namespace), else at the node's address.
	bind := "127.0.0.1 " + d.nodeIP
	if d.local {
		bind = "127.0.0.1"
	}
	var err error
	d.lockRedis, err = redisserver.StartProcess(redisserver.WithArgs("--bind", bind))
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() { _ = d.lockRedis.Close() })

	d.dir = filepath.Join(suite.work, "deploy")
	Expect(os.MkdirAll(d.dir, 0o755)).To(Succeed())
	d.guard = guardServed()
	Expect(writeKustomization(d, mgrImg)).To(Succeed())
	t0 := time.Now()
	// Built by the project's kustomize, as make deploy builds it, and kept beside the kustomization.
	manifests := filepath.Join(d.dir, "manifests.yaml")
	out, err := utils.Run(exec.Command(filepath.Join(suite.root, "bin", "kustomize"), "build", "-o", manifests, d.dir))
	Expect(err).NotTo(HaveOccurred(), out)
	out, err = utils.Run(exec.Command(kubectlBin(), "--kubeconfig", suite.kubeconfig, "apply", "--server-side", "--force-conflicts", "-f", manifests))
	Expect(err).NotTo(HaveOccurred(), out)
	DeferCleanup(d.undeploy)
	Eventually(func(g Gomega) {
		dep := &appsv1.Deployment{}
		g.Expect(suite.k8s.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: managerDeploy}, dep)).To(Succeed())
		available := false
		for _, c := range dep.Status.Conditions {
			available = available || (c.Type == appsv1.DeploymentAvailable && c.Status == corev1.ConditionTrue)
		}
		g.Expect(available).To(BeTrue(), "Deployment %s not Available: %+v", managerDeploy, dep.Status.Conditions)
	}).WithTimeout(2*time.Minute).Should(Succeed(), func() string { return whyPodsWait(ctx, operatorNamespace) })
	measure("in-cluster: manager Deployment applied -> Available %s (image %s)", ms(time.Since(t0)), mgrImg)
	if d.guard {
		d.gate = gateOf(manifests)
		awaitGate(ctx, d)
	}
	return d
}

// placeWorkloads finds where the lane's workloads run and starts the fenced store they write to:
// on the suite's own cluster its real node (images loaded from tarballs, never pulled), elsewhere
// the nodes that reach this machine at E2E_POD_REDIS_HOST.
func placeWorkloads(ctx context.Context) *deployment {
	GinkgoHelper()
	d := &deployment{pullPolicy: corev1.PullIfNotPresent}
	var nodes corev1.NodeList
	Expect(suite.k8s.List(ctx, &nodes, client.MatchingLabels{realNodeLabel: "true"})).To(Succeed())
	switch {
	case len(nodes.Items) > 0:
		d.local = suite.ownCluster
		d.nodeIP = internalIP(nodes.Items[0])
		Expect(d.nodeIP).NotTo(BeEmpty(), "real node %s has no InternalIP", nodes.Items[0].Name)
		d.pullPolicy = corev1.PullNever
	case suite.ownCluster:
		Fail("the suite's cluster has no real node (hack/cluster.sh says why in its log): the lanes of real containers need one; run as root with the packages of hack/ensure-node-packages.sh")
	default:
		d.nodeIP = os.Getenv("E2E_POD_REDIS_HOST")
		if d.nodeIP == "" {
			Skip("E2E_POD_REDIS_HOST is not set: on another cluster the lanes of real containers need the address at which its pods reach this machine")
		}
	}
	// The pods reach the store at the node's address.
	var err error
	d.store, err = redisserver.StartProcess(redisserver.WithArgs("--bind", "127.0.0.1 "+d.nodeIP))
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() { _ = d.store.Close() })
	d.storeAddr = d.nodeIP + ":" + portOf(d.store.Addr())
	return d
}

// whyPodsWait describes, for a failure message, where the pods of namespace ns stand and what the
// cluster said of them (Warning Events: a node tainted by disk pressure, an image not found, a
// failed probe) and the taints of the nodes: what a Deployment that never became Available waited for.
func whyPodsWait(ctx context.Context, ns string) string {
	var b strings.Builder
	var pods corev1.PodList
	if err := suite.k8s.List(ctx, &pods, client.InNamespace(ns)); err != nil {
		return "list pods: " + err.Error()
	}
	for _, p := range pods.Items {
		fmt.Fprintf(&b, "\npod %s: %s on node %q", p.Name, p.Status.Phase, p.Spec.NodeName)
		for _, c := range p.Status.Conditions {
			if c.Status != corev1.ConditionTrue {
				fmt.Fprintf(&b, "; %s=%s %s %s", c.Type, c.Status, c.Reason, c.Message)
			}
		}
		for _, cs := range p.Status.ContainerStatuses {
			if w := cs.State.Waiting; w != nil {
				fmt.Fprintf(&b, "; container %s waiting: %s %s", cs.Name, w.Reason, w.Message)
			}
			fmt.Fprintf(&b, "; container %s restarts %d", cs.Name, cs.RestartCount)
		}
	}
	var events corev1.EventList
	if err := suite.k8s.List(ctx, &events, client.InNamespace(ns)); err == nil {
		for _, e := range events.Items {
			if e.Type == corev1.EventTypeWarning {
				fmt.Fprintf(&b, "\nevent %s %s/%s: %s", e.Reason, e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Message)
			}
		}
	}
	var nodes corev1.NodeList
	if err := suite.k8s.List(ctx, &nodes); err == nil {
		for _, n := range nodes.Items {
			if len(n.Spec.Taints) > 0 {
				fmt.Fprintf(&b, "\nnode %s taints: %v", n.Name, n.Spec.Taints)
			}
		}
	}
	return b.String()
}

// writeKustomization writes, in d.dir, what `make deploy` writes (hack/deploy-overlay.sh: the
// image, config/default, and on the local cluster config/local with its values) under base/, and on
// top of it the flags the suite runs every manager with.
func writeKustomization(d *deployment, img string) error {
	base := filepath.Join(d.dir, "base")
	env := []string{"IMG=" + img, "KUSTOMIZE=" + filepath.Join(suite.root, "bin", "kustomize"),
		"KUBECTL=" + kubectlBin(), "KUBECONFIG=" + suite.kubeconfig}
	if !d.local {
		env = append(env, "DEPLOY_OVERLAY=config/default")
	} else {
		probe, err := ports.FreeBlock(0, 2, suite.portBase)
		if err != nil {
			return err
		}
		env = append(env, "DEPLOY_OVERLAY=config/local", "DEPLOY_REDIS_ADDR="+d.lockRedis.Addr(),
			"DEPLOY_NODE_IP="+d.nodeIP, fmt.Sprintf("DEPLOY_PROBE_PORT=%d", probe), fmt.Sprintf("DEPLOY_METRICS_PORT=%d", probe+1))
	}
	cmd := exec.Command("bash", filepath.Join(suite.root, "hack", "deploy-overlay.sh"), base)
	cmd.Env = append(os.Environ(), env...)
	if _, err := utils.Run(cmd); err != nil {
		return err
	}

	// config/default carries the admission gate; an API server that does not serve it would refuse
	// the whole apply, so there the gate is left out of the build.
	var leaveOut strings.Builder
	if !d.guard {
		for _, kind := range []string{"MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding",
			"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"} {
			fmt.Fprintf(&leaveOut, "- target: {group: %s, kind: %s}\n  patch: |-\n    $patch: delete\n    apiVersion: %s\n    kind: %s\n    metadata: {name: any}\n",
				admissionregistrationv1.GroupName, kind, admissionregistrationv1.SchemeGroupVersion, kind)
		}
	}

	var patch strings.Builder
	for _, a := range []string{"--cluster-id=e2e", "--key-prefix=" + d.prefix, "--release-channel=" + d.prefix + "released",
		"--wait-backoff-max=2s", "--zap-log-level=debug"} {
		fmt.Fprintf(&patch, "    - {op: add, path: /spec/template/spec/containers/0/args/-, value: %q}\n", a)
	}
	k := fmt.Sprintf(`# Written by the e2e suite (test/e2e/incluster_test.go): make deploy's kustomization, plus the
# suite's flags.
resources:
- base
patches:
- target: {kind: Deployment, name: %s}
  patch: |-
%s%s`, managerDeploy, patch.String(), leaveOut.String())
	if !d.local {
		// config/manager points at an in-cluster Redis Service; the suite's runs on this machine.
		k += fmt.Sprintf(`- target: {kind: Deployment, name: %s}
  patch: |-
    {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": %q},
     "spec": {"template": {"spec": {"containers": [{"name": "manager",
       "env": [{"name": "LOCKEDJOB_REDIS_ADDR", "value": "%s:%s"}]}]}}}}
`, managerDeploy, managerDeploy, d.nodeIP, portOf(d.lockRedis.Addr()))
	}
	return os.WriteFile(filepath.Join(d.dir, "kustomization.yaml"), []byte(k), 0o644)
}

// guardServed tells whether the cluster serves the admission policies of config/guard. The suite's
// own cluster must; on another cluster (E2E_KUBECONFIG) an API server too old for
// MutatingAdmissionPolicy leaves the gate out, and the guarded-Job specs skip with that reason.
func guardServed() bool {
	GinkgoHelper()
	res, err := suite.cs.Discovery().ServerResourcesForGroupVersion(admissionregistrationv1.SchemeGroupVersion.String())
	served := err == nil && slices.ContainsFunc(res.APIResources, func(r metav1.APIResource) bool { return r.Name == "mutatingadmissionpolicies" })
	if !served && suite.ownCluster {
		Fail(fmt.Sprintf("the suite's own cluster does not serve %s mutatingadmissionpolicies (%v): config/guard needs it",
			admissionregistrationv1.SchemeGroupVersion, err))
	}
	if !served {
		logf("the cluster does not serve %s mutatingadmissionpolicies (%v): the admission gate is not installed", admissionregistrationv1.SchemeGroupVersion, err)
	}
	return served
}

// gateOf is the admission gate's objects in the built manifests.
func gateOf(manifests string) []*unstructured.Unstructured {
	GinkgoHelper()
	b, err := os.ReadFile(manifests)
	Expect(err).NotTo(HaveOccurred())
	var gate []*unstructured.Unstructured
	for doc := range strings.SplitSeq(string(b), "\n---\n") {
		o := &unstructured.Unstructured{}
		Expect(yaml.Unmarshal([]byte(doc), &o.Object)).To(Succeed())
		if o.GroupVersionKind().Group == admissionregistrationv1.GroupName {
			gate = append(gate, o)
		}
	}
	Expect(gate).To(HaveLen(10), "config/guard: two policies for Jobs, two for Pods and one for misplaced labels, and their bindings")
	return gate
}

// awaitGate waits until the gate acts in the cluster: each binding names a policy that exists, and
// a labelled Job (a dry run, which leaves nothing behind) comes back suspended with the lock's
// environment, while one the operator could not guard, and one labelled only on its pod template,
// are refused.
func awaitGate(ctx context.Context, d *deployment) {
	GinkgoHelper()
	t0 := time.Now()
	policies := map[string]string{} // binding kind -> its policy's kind
	for _, o := range d.gate {
		if kind, ok := strings.CutSuffix(o.GetKind(), "Binding"); ok {
			policies[o.GetKind()] = kind
		}
	}
	for _, b := range d.gate {
		kind, ok := policies[b.GetKind()]
		if !ok {
			continue
		}
		name, _, _ := unstructured.NestedString(b.Object, "spec", "policyName")
		p := &unstructured.Unstructured{}
		p.SetGroupVersionKind(admissionregistrationv1.SchemeGroupVersion.WithKind(kind))
		Expect(suite.k8s.Get(ctx, client.ObjectKey{Name: name}, p)).To(Succeed(), "%s %s binds %s %q", b.GetKind(), b.GetName(), kind, name)
	}
	probe := func(annotations map[string]string) *batchv1.Job {
		return &batchv1.Job{
			ObjectMeta: metav1.ObjectMeta{Namespace: operatorNamespace, Name: "gate-probe",
				Labels: map[string]string{batchv1alpha1.LabelGuardLock: "probe"}, Annotations: annotations},
			Spec: batchv1.JobSpec{Template: d.writerPod(nil, "probe")},
		}
	}
	Eventually(func(g Gomega) {
		j := probe(nil)
		g.Expect(suite.k8s.Create(ctx, j, client.DryRunAll)).To(Succeed())
		g.Expect(j.Spec.Suspend).To(HaveValue(BeTrue()), "the mutating policy is not in force")
		g.Expect(j.Spec.Template.Spec.Containers[0].Env).To(ContainElement(HaveField("ValueFrom.FieldRef.FieldPath",
			"metadata.annotations['"+batchv1alpha1.AnnotationFencingToken+"']")))
		bad := probe(map[string]string{batchv1alpha1.AnnotationGuardScope: "Everywhere"})
		g.Expect(suite.k8s.Create(ctx, bad, client.DryRunAll)).To(MatchError(ContainSubstring(batchv1alpha1.AnnotationGuardScope)),
			"the validating policy is not in force")
		misplaced := probe(nil)
		misplaced.Labels = map[string]string{"app": "e2e"} // a Job with no labels takes its pod template's
		misplaced.Spec.Template.Labels = map[string]string{batchv1alpha1.LabelGuardLock: "probe"}
		g.Expect(suite.k8s.Create(ctx, misplaced, client.DryRunAll)).To(MatchError(ContainSubstring("spec.template.metadata.labels")),
			"the policy of misplaced labels is not in force")
	}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
	objs := make([]string, 0, len(d.gate))
	for _, o := range d.gate {
		objs = append(objs, o.GetKind()+"/"+o.GetName())
	}
	measure("in-cluster: admission gate in force %s after the Deployment was Available (%s)", ms(time.Since(t0)), strings.Join(objs, ", "))
}

// undeploy removes the manager's Deployment (not the CRD the rest of the suite uses) and waits
// until its pod is gone, so the next scenario's manager leads alone; then the admission gate, so no
// Job of a later scenario waits for an operator that is not there.
func (d *deployment) undeploy(ctx SpecContext) {
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: operatorNamespace, Name: managerDeploy}}
	Expect(client.IgnoreNotFound(suite.k8s.Delete(ctx, dep, client.PropagationPolicy(metav1.DeletePropagationForeground)))).To(Succeed())
	Eventually(func(g Gomega) {
		var pods corev1.PodList
		g.Expect(suite.k8s.List(ctx, &pods, client.InNamespace(operatorNamespace), client.MatchingLabels{managerLabel: managerLabelV})).To(Succeed())
		g.Expect(pods.Items).To(BeEmpty())
	}).WithTimeout(time.Minute).Should(Succeed())
	for _, o := range d.gate {
		Expect(client.IgnoreNotFound(suite.k8s.Delete(ctx, o.DeepCopy()))).To(Succeed(), "delete %s %s", o.GetKind(), o.GetName())
	}
}

// writerJob is a LockedJob whose container is the workload image, on the real node.
func (d *deployment) writerJob(s *scenario, name, lock string, o testkit.LockedJobOptions, args ...string) *batchv1alpha1.LockedJob {
	o.Lock = lock
	lj := s.newLockedJob(name, o)
	lj.Spec.JobTemplate.Spec.Template = d.writerPod(lj.Spec.JobTemplate.Spec.Template.Labels, lock, args...)
	return lj
}

// writerPod is the pod template of every Job of the lane, a LockedJob's or a guarded one: one
// container of the workload image, on the real node, writing to the lock's fenced store with the
// fencing token it finds in LOCKEDJOB_FENCING_TOKEN.
func (d *deployment) writerPod(labels map[string]string, lock string, args ...string) corev1.PodTemplateSpec {
	grace := int64(5)
	pod := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: labels},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{
				Name: "work", Image: d.workImg, ImagePullPolicy: d.pullPolicy,
				Command: []string{"/fencedwriter"},
				Args:    append([]string{"--store=" + storeName(lock)}, args...),
				Env:     []corev1.EnvVar{{Name: "FENCED_STORE_ADDR", Value: d.storeAddr}},
			}},
		},
	}
	if d.local {
		pod.Spec.NodeSelector = map[string]string{realNodeLabel: "true"}
		pod.Spec.Tolerations = []corev1.Toleration{{Key: realNodeLabel, Operator: corev1.TolerationOpEqual, Value: "true", Effect: corev1.TaintEffectNoSchedule}}
	}
	return pod
}

// jobLog is the log of the Job's (first) pod, through the API server and the kubelet.
func (d *deployment) jobLog(ctx context.Context, ns, job string) string {
	GinkgoHelper()
	var pods corev1.PodList
	Expect(suite.k8s.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{batchv1.JobNameLabel: job})).To(Succeed())
	Expect(pods.Items).NotTo(BeEmpty(), "no pod of Job %s", job)
	b, err := suite.cs.CoreV1().Pods(ns).GetLogs(pods.Items[0].Name, &corev1.PodLogOptions{}).DoRaw(ctx)
	Expect(err).NotTo(HaveOccurred())
	return string(b)
}

// runLog is the log of the run's container: its Pod's, or its Job's first pod's.
func (d *deployment) runLog(ctx context.Context, ns string, r writerRun) string {
	GinkgoHelper()
	if r.Pod == "" {
		return d.jobLog(ctx, ns, r.Job)
	}
	b, err := suite.cs.CoreV1().Pods(ns).GetLogs(r.Pod, &corev1.PodLogOptions{}).DoRaw(ctx)
	Expect(err).NotTo(HaveOccurred(), "log of Pod %s", r.Pod)
	return string(b)
}

// managerPID finds the manager's process on this machine from its container's ID: the container's
// cgroup path names it (a kind node's containers are nested in the node's cgroup, their paths too).
// False if the container runs elsewhere, which on the suite's own cluster fails the spec.
func (d *deployment) managerPID(ctx context.Context) (int, bool) {
	GinkgoHelper()
	var pods corev1.PodList
	Expect(suite.k8s.List(ctx, &pods, client.InNamespace(operatorNamespace), client.MatchingLabels{managerLabel: managerLabelV})).To(Succeed())
	Expect(pods.Items).To(HaveLen(1))
	Expect(pods.Items[0].Status.ContainerStatuses).NotTo(BeEmpty())
	_, id, _ := strings.Cut(pods.Items[0].Status.ContainerStatuses[0].ContainerID, "://")
	Expect(id).NotTo(BeEmpty())
	procs, err := filepath.Glob("/proc/[0-9]*/cgroup")
	Expect(err).NotTo(HaveOccurred())
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil || !strings.Contains(string(b), id) {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		if exe, _ := os.Readlink(filepath.Join(filepath.Dir(p), "exe")); strings.HasSuffix(exe, "/manager") {
			return pid, true
		}
	}
	Expect(d.local).To(BeFalse(), "no process of the manager's container %s on this machine", id)
	return 0, false
}

// ---------------------------------------------------------------- the fenced store

func storeName(lock string) string { return "fencedstore:e2e:" + lock }

func (d *deployment) storeOf(lock string) *fencedstore.Store {
	return fencedstore.New(redis.NewClient(&redis.Options{Addr: d.store.Addr()}), storeName(lock))
}

func (d *deployment) history(ctx context.Context, lock string) []fencedstore.Entry {
	GinkgoHelper()
	st := d.storeOf(lock)
	h, err := st.History(ctx)
	Expect(err).NotTo(HaveOccurred())
	return h
}

func countWrites(h []fencedstore.Entry, token int64, result string) int {
	n := 0
	for _, e := range h {
		if e.Token == token && e.Result == result {
			n++
		}
	}
	return n
}

// writerRun is one holder's Job in the lane: the fence it ran under and how many writes its
// container makes.
type writerRun struct {
	Job    string
	Pod    string // a guarded Pod's run: its log is that Pod's, not a Job's
	Fence  int64
	Writes int
}

var doneLine = regexp.MustCompile(`done: (\d+) accepted, (\d+) refused`)

// expectWrites checks the run's log: every one of its writes accepted by the store, none refused,
// none without an answer (the log of one that failed shows why).
func (r writerRun) expectWrites(log string) {
	GinkgoHelper()
	m := doneLine.FindStringSubmatch(log)
	Expect(m).NotTo(BeNil(), "log of Job %s has no done line:\n%s", r.Job, log)
	Expect(m[1:]).To(Equal([]string{strconv.Itoa(r.Writes), "0"}), "log of Job %s: writes accepted and refused, of %d:\n%s", r.Job, r.Writes, log)
}

// expectOneAfterAnother checks, from the containers' own logs, that each run's container wrote
// under its fence, made its writes, all accepted, and, in fencing-token order, started after the
// container before it ended; then that the lock's fenced store has exactly those writes, in one
// unbroken block per run, in fencing-token order (no two writers
// overlapped, and each wrote under a higher fence than the one before). It returns the gaps
// between the containers.
func (d *deployment) expectOneAfterAnother(ctx context.Context, ns, lock string, runs []writerRun) []time.Duration {
	GinkgoHelper()
	runs = slices.Clone(runs)
	slices.SortFunc(runs, func(a, b writerRun) int { return cmp.Compare(a.Fence, b.Fence) })
	var prevEnd time.Time
	var gaps []time.Duration
	accepted := map[int64]int{}
	for i, r := range runs {
		log := d.runLog(ctx, ns, r)
		Expect(log).To(ContainSubstring(fmt.Sprintf("fencing token=%d", r.Fence)), "log of Job %s", r.Job)
		r.expectWrites(log)
		accepted[r.Fence] = r.Writes
		start, end := logSpan(log)
		if i > 0 {
			Expect(start).To(BeTemporally(">", prevEnd), "Job %s started before the holder before it (%s) ended", r.Job, runs[i-1].Job)
			gaps = append(gaps, start.Sub(prevEnd))
		}
		prevEnd = end
	}

	h := d.history(ctx, lock)
	var blocks []int64
	inStore := map[int64]int{}
	for _, e := range h {
		Expect(e.Result).To(Equal(fencedstore.ResultAccepted), "%+v", e)
		inStore[e.Token]++
		if len(blocks) == 0 || blocks[len(blocks)-1] != e.Token {
			blocks = append(blocks, e.Token)
		}
	}
	want := make([]int64, 0, len(runs))
	for _, r := range runs {
		want = append(want, r.Fence)
	}
	Expect(inStore).To(Equal(accepted), "the store has every run's writes and no one else's (fence -> writes)")
	Expect(blocks).To(Equal(want), "writes of one holder are never interleaved with another's, in fencing-token order")
	return gaps
}

// afterToken returns the entries after the first write under token.
func afterToken(h []fencedstore.Entry, token int64) []fencedstore.Entry {
	for i, e := range h {
		if e.Token == token && e.Result == fencedstore.ResultAccepted {
			return h[i+1:]
		}
	}
	return nil
}

func refusedAfter(h []fencedstore.Entry, next, stale int64) int {
	return countWrites(afterToken(h, next), stale, fencedstore.ResultRefused)
}

func acceptedAfter(h []fencedstore.Entry, next, stale int64) int {
	return countWrites(afterToken(h, next), stale, fencedstore.ResultAccepted)
}

// ---------------------------------------------------------------- small helpers

// logSpan is the time of a fencedwriter log's first and last line (its own clock: UTC, µs).
func logSpan(log string) (first, last time.Time) {
	GinkgoHelper()
	sc := bufio.NewScanner(strings.NewReader(log))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		t, err := time.Parse("2006/01/02 15:04:05.000000", f[0]+" "+f[1])
		if err != nil {
			continue
		}
		if first.IsZero() {
			first = t
		}
		last = t
	}
	Expect(first.IsZero()).To(BeFalse(), "no timestamped line in\n%s", log)
	return first, last
}

func durationStats(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	pct := func(p float64) time.Duration { return s[min(len(s)-1, int(p*float64(len(s))))] }
	return fmt.Sprintf("p50 %s, p95 %s, min %s, max %s", ms(pct(0.5)), ms(pct(0.95)), ms(s[0]), ms(s[len(s)-1]))
}

func internalIP(n corev1.Node) string {
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return a.Address
		}
	}
	return ""
}

func portOf(addr string) string {
	_, port, _ := strings.Cut(addr, ":")
	return port
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func kubectlBin() string {
	if suite.binDir != "" {
		return filepath.Join(suite.binDir, "kubectl")
	}
	return "kubectl"
}

// acquireAs acquires the lock stored under redisKey in the lock library, as another holder would.
func acquireAs(ctx context.Context, rdb *redis.Client, prefix, redisKey string) *redislock.Lock {
	GinkgoHelper()
	name := strings.TrimSuffix(strings.TrimPrefix(redisKey, prefix+"{"), "}")
	locks, err := redislock.New(rdb, redislock.WithKeyPrefix(prefix))
	Expect(err).NotTo(HaveOccurred())
	l, err := locks.Acquire(ctx, name, 30*time.Second, redislock.WithMetadata("e2e-test"))
	Expect(err).NotTo(HaveOccurred())
	return l
}

// managerLogTail is the last lines of the in-cluster manager's log, for the failure dump.
func (d *deployment) managerLogTail(ctx context.Context, lines int64) string {
	var pods corev1.PodList
	if err := suite.k8s.List(ctx, &pods, client.InNamespace(operatorNamespace), client.MatchingLabels{managerLabel: managerLabelV}); err != nil {
		return err.Error()
	}
	var out strings.Builder
	for _, p := range pods.Items {
		b, err := suite.cs.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{TailLines: &lines}).DoRaw(ctx)
		fmt.Fprintf(&out, "pod %s (err %v):\n%s\n", p.Name, err, b)
	}
	return out.String()
}
