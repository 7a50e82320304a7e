//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/redis/go-redis/v9"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/internal/redislock"
	"github.com/lockedjob/lockedjob/internal/testutil/ports"
	"github.com/lockedjob/lockedjob/internal/testutil/redisserver"
	"github.com/lockedjob/lockedjob/test/testkit"
	"github.com/lockedjob/lockedjob/test/utils"
)

// The release lane (issue 26, part 3): lockedjob installed from the files of a release, as a
// stranger installs it, upgraded to the next release while a LockedJob holds its lock, and
// uninstalled, twice: with install.yaml (`kubectl apply --server-side`, `kubectl delete`) and with
// the packaged chart (`helm install`, `helm upgrade`, `helm uninstall`). The releases are built by
// hack/release.sh, as `make release` builds them: the one installed first from releaseFrom's
// commit, the one upgraded to from this checkout.
//
// On the suite's own cluster the manager runs on the real node in the node's network (there is no
// Service network): a kustomization over install.yaml with config/local, and the chart with its
// hostNetwork value and the same settings. On kind (or another cluster) install.yaml and the chart
// go in unchanged, and the manager reaches Redis where install.yaml says it is,
// redis.lockedjob-system.svc:6379: a Service without selector whose endpoint is this machine's
// redis-server (E2E_POD_REDIS_HOST).

// releaseFrom is the commit whose release the lane installs first (E2E_RELEASE_FROM names
// another): the first whose release the lane can run on the suite's own cluster, since the chart's
// hostNetwork value and config/local over install.yaml came with it. Move it on to the last
// published release once there is one.
const releaseFrom = "a4a97c984d345669bad09cf19e301b60614b03f2"

const (
	fromVersion     = "v0.0.1-e2e"
	toVersion       = "v0.0.2-e2e"
	releaseRegistry = "ghcr.io/lockedjob" // hack/release.sh's default REGISTRY, as a release names its images
	helmRelease     = "lockedjob"         // the README's `helm install lockedjob ...`
	releaseLock     = "nightly"
)

// release is one release's folder, as hack/release.sh writes it.
type release struct {
	version, commit, dir string
}

func (r release) file(name string) string { return filepath.Join(r.dir, name) }
func (r release) managerImage() string    { return releaseRegistry + "/manager:" + r.version }
func (r release) workloadImage() string   { return releaseRegistry + "/fencedwriter:" + r.version }
func (r release) chart() string {
	return r.file("lockedjob-" + strings.TrimPrefix(r.version, "v") + ".tgz")
}

// releaseLane is what the lane's two walks share: the releases, where the workloads run and write
// (d), the manager's Redis, and how images reach the nodes.
type releaseLane struct {
	from, to release
	d        *deployment
	redis    *redisserver.Server
	redisFor string // LOCKEDJOB_REDIS_ADDR on the real node ("" elsewhere: the Service)
	work     string
	load     func(ctx context.Context, tarball string)
	// On the suite's own cluster: the apiserver's port and the ports the manager's probe and
	// metrics servers take in the node's network.
	apiserverPort, probePort int
	built                    map[string]string // manifests' file per release version, built once
}

// installPath is one way to install a release: first install, upgrade, uninstall.
type installPath struct {
	id        string // in the scenario's namespace
	name      string
	install   func(ctx context.Context, r release)
	upgrade   func(ctx context.Context, r release)
	uninstall func(ctx context.Context, r release)
}

var _ = Describe("A release installed, upgraded with a lock held and uninstalled, as a stranger does it", Ordered, Label("release"), func() {
	var l *releaseLane

	BeforeAll(func(ctx SpecContext) {
		l = prepareReleaseLane(ctx)
	}, NodeTimeout(10*time.Minute))

	// The rest of the suite runs with the CRDs and the namespace BeforeSuite made.
	AfterAll(func(ctx SpecContext) {
		installCRD(ctx)
		Expect(client.IgnoreAlreadyExists(suite.k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: operatorNamespace}}))).To(Succeed())
	})

	It("with install.yaml: kubectl apply --server-side, the next release's install.yaml over it, kubectl delete", func(ctx SpecContext) {
		l.walk(ctx, l.installYAML())
	}, SpecTimeout(8*time.Minute))

	It("with the chart: helm install, helm upgrade to the next release's chart, helm uninstall", func(ctx SpecContext) {
		l.walk(ctx, l.helmChart())
	}, SpecTimeout(8*time.Minute))
})

func prepareReleaseLane(ctx context.Context) *releaseLane {
	GinkgoHelper()
	l := &releaseLane{work: filepath.Join(suite.work, "release"), built: map[string]string{}}
	Expect(os.MkdirAll(l.work, 0o755)).To(Succeed())
	l.d = placeWorkloads(ctx)
	switch {
	case l.d.local:
		l.load = func(_ context.Context, tar string) {
			GinkgoHelper()
			out, err := clusterScript(2*time.Minute, "load-image", tar)
			Expect(err).NotTo(HaveOccurred(), out)
		}
	case os.Getenv("E2E_LOAD_IMAGE") != "":
		loader := strings.Fields(os.Getenv("E2E_LOAD_IMAGE"))
		l.load = func(ctx context.Context, tar string) {
			GinkgoHelper()
			out, err := utils.Run(exec.CommandContext(ctx, loader[0], append(loader[1:], tar)...))
			Expect(err).NotTo(HaveOccurred(), out)
		}
	default:
		Skip("E2E_LOAD_IMAGE is not set: on another cluster the release lane needs the command that loads an image tarball into its nodes (make test-kind sets it)")
	}
	if !guardServed() {
		Skip("the cluster does not serve the admission policies install.yaml carries")
	}

	from := envOr("E2E_RELEASE_FROM", releaseFrom)
	t0 := time.Now()
	l.from = buildRelease(ctx, from, fromVersion)
	l.to = buildRelease(ctx, "HEAD", toVersion)
	measure("release lane: releases %s (%.12s) and %s (%.12s) built in %s", l.from.version, l.from.commit, l.to.version, l.to.commit, ms(time.Since(t0)))
	t0 = time.Now()
	for _, tar := range []string{l.from.file("lockedjob-manager_" + l.from.version + ".tar"),
		l.to.file("lockedjob-manager_" + l.to.version + ".tar"), l.to.file("lockedjob-fencedwriter_" + l.to.version + ".tar")} {
		l.load(ctx, tar)
	}
	measure("release lane: the images of both releases loaded in %s", ms(time.Since(t0)))
	// The workload is not what is upgraded: every run is the newer release's example workload.
	l.d.workImg = l.to.workloadImage()

	bind := "127.0.0.1"
	if !l.d.local {
		bind += " " + l.d.nodeIP
	}
	var err error
	l.redis, err = redisserver.StartProcess(redisserver.WithArgs("--bind", bind))
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() { _ = l.redis.Close() })
	if l.d.local {
		l.redisFor = l.redis.Addr()
		u, err := url.Parse(suite.cfg.Host)
		Expect(err).NotTo(HaveOccurred())
		l.apiserverPort, err = strconv.Atoi(u.Port())
		Expect(err).NotTo(HaveOccurred(), "the local cluster's apiserver %s", suite.cfg.Host)
		l.probePort, err = ports.FreeBlock(0, 2, suite.portBase)
		Expect(err).NotTo(HaveOccurred())
	}

	// A stranger's cluster holds nothing of lockedjob: the CRDs and the namespace BeforeSuite made
	// go, with whatever an earlier lane left (AfterAll puts BeforeSuite's back).
	for _, o := range lockedjobObjects(ctx) {
		Expect(client.IgnoreNotFound(suite.k8s.Delete(ctx, o))).To(Succeed(), "delete %s %s", kindOf(o), o.GetName())
	}
	expectNothingLeft(ctx)
	return l
}

// buildRelease writes release version of rev with hack/release.sh, in a worktree of rev unless
// rev is this checkout's HEAD. Two builds of one commit are byte-identical (make test-release), so
// a release of a clean commit is kept in bin/e2e-release and reused while its SHA256SUMS verifies:
// the suite on kind after the suite on the local cluster builds nothing again.
func buildRelease(ctx context.Context, rev, version string) release {
	GinkgoHelper()
	git := func(args ...string) string {
		GinkgoHelper()
		out, err := utils.Run(exec.CommandContext(ctx, "git", append([]string{"-C", suite.root}, args...)...))
		Expect(err).NotTo(HaveOccurred(), "git %v: %s (E2E_RELEASE_FROM must name a commit of this clone)", args, out)
		return strings.TrimSpace(out)
	}
	commit, head := git("rev-parse", rev+"^{commit}"), git("rev-parse", "HEAD")
	dirty := commit == head && git("status", "--porcelain", "--untracked-files=no") != ""
	r := release{version: version, commit: commit, dir: filepath.Join(suite.root, "bin", "e2e-release", commit+"-"+version)}
	if dirty {
		r.dir = filepath.Join(suite.work, "release-"+version)
	} else if verified(ctx, r.dir) {
		logf("release %s of %.12s: reusing %s", version, commit, r.dir)
		return r
	}

	src := suite.root
	if commit != head {
		src = filepath.Join(suite.work, "src-"+commit[:12])
		git("worktree", "add", "--detach", src, commit)
		defer git("worktree", "remove", "--force", src)
	}
	cmd := exec.CommandContext(ctx, "bash", "hack/release.sh", r.dir)
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "VERSION="+version, "REGISTRY="+releaseRegistry,
		"KUSTOMIZE="+filepath.Join(suite.root, "bin", "kustomize"), "HELM="+helmBin())
	if dirty {
		// A developer's run: this checkout's files, named after HEAD.
		cmd.Env = append(cmd.Env, "RELEASE_ALLOW_DIRTY=1")
	}
	t0 := time.Now()
	out, err := utils.Run(cmd)
	Expect(err).NotTo(HaveOccurred(), "hack/release.sh for %s of %.12s:\n%s", version, commit, out)
	logf("release %s of %.12s built in %s into %s", version, commit, since(t0), r.dir)
	return r
}

// verified tells whether dir holds a release whose SHA256SUMS verifies.
func verified(ctx context.Context, dir string) bool {
	cmd := exec.CommandContext(ctx, "sha256sum", "--quiet", "-c", "SHA256SUMS")
	cmd.Dir = dir
	_, err := utils.Run(cmd)
	return err == nil
}

// walk installs l.from the path's way, runs a LockedJob to Succeeded, starts one that holds the lock
// until told to stop, upgrades to l.to while it holds it, and checks that the new manager re-adopted
// it (the same fence, the same Job, its writes still accepted) and handed the lock on when it ended;
// then deletes the LockedJobs and uninstalls, and finds nothing of lockedjob left.
func (l *releaseLane) walk(ctx SpecContext, p installPath) {
	By("installing " + l.from.version + " " + p.name)
	t0 := time.Now()
	l.redisService(ctx)
	p.install(ctx, l.from)
	l.expectRunning(ctx, l.from)
	measure("release lane, %s: install %s -> manager Available %s", p.name, l.from.version, ms(time.Since(t0)))

	s := newScenario("rel-"+p.id, false, l.redis)
	lock := releaseLock + "-" + p.id // a fenced store of its own: the fences go on rising across installs
	s.prefix = "lockedjob:"          // the manager's default --key-prefix
	By("a LockedJob runs to Succeeded")
	s.create(l.d.writerJob(s, "first", lock, testkit.LockedJobOptions{}, "--writes=2", "--interval=200ms"))
	first := s.eventuallyPhase("first", batchv1alpha1.PhaseSucceeded, 2*time.Minute)

	By("a LockedJob that holds the lock until told to stop")
	stop := "e2e:release:" + s.ns + ":stop"
	s.create(l.d.writerJob(s, "held", lock, testkit.LockedJobOptions{}, "--writes=0", "--interval=200ms", "--until-key="+stop))
	held := s.eventuallyRunningPod("held", 2*time.Minute)
	fence := deref(held.Status.FencingToken)
	Expect(fence).To(BeNumerically(">", deref(first.Status.FencingToken)))
	jobs := s.jobsOf("held")
	Expect(jobs).To(HaveLen(1))
	job := jobs[0].UID
	Eventually(func() int { return countWrites(l.d.history(ctx, lock), fence, "accepted") }).
		WithContext(ctx).WithTimeout(time.Minute).Should(BeNumerically(">", 0), "no write of the held LockedJob's container")
	// A successor waits in the lock's queue across the upgrade.
	s.create(l.d.writerJob(s, "next", lock, testkit.LockedJobOptions{}, "--writes=2", "--interval=200ms"))

	By("upgrading to " + l.to.version + " while it holds the lock")
	t0 = time.Now()
	p.upgrade(ctx, l.to)
	l.expectRunning(ctx, l.to)
	measure("release lane, %s: upgrade %s -> %s, the new manager Available %s", p.name, l.from.version, l.to.version, ms(time.Since(t0)))
	Eventually(func() []string { return s.eventMessages("held", batchv1alpha1.ReasonReadopted) }).WithContext(ctx).WithTimeout(time.Minute).
		Should(ContainElement(ContainSubstring(fmt.Sprintf("fencing token %d", fence))), "the new manager re-adopts the held lock under its fence")
	measure("release lane, %s: upgrade applied -> held lock re-adopted %s", p.name, ms(time.Since(t0)))
	jobs = s.jobsOf("held")
	Expect(jobs).To(HaveLen(1), "a second Job for the held LockedJob")
	Expect(jobs[0].UID).To(Equal(job), "the held LockedJob's Job was replaced")
	Expect(s.get("held").Status.FencingToken).To(HaveValue(Equal(fence)))
	Expect(s.get("next").Status.Phase).NotTo(Equal(batchv1alpha1.PhaseRunning), "the successor runs beside the holder")
	before := countWrites(l.d.history(ctx, lock), fence, "accepted")
	Eventually(func() int { return countWrites(l.d.history(ctx, lock), fence, "accepted") }).
		WithContext(ctx).WithTimeout(time.Minute).Should(BeNumerically(">", before), "the held container's writes after the upgrade")

	By("telling the held run to stop: it ends Succeeded, and its successor runs under the new release")
	store := redis.NewClient(&redis.Options{Addr: l.d.store.Addr()})
	defer func() { _ = store.Close() }()
	Expect(store.Set(ctx, stop, "1", 0).Err()).To(Succeed())
	held = s.eventuallyPhase("held", batchv1alpha1.PhaseSucceeded, 2*time.Minute)
	next := s.eventuallyPhase("next", batchv1alpha1.PhaseSucceeded, 2*time.Minute)
	Expect(s.jobsOf("held")).To(HaveLen(1))
	heldRun := writerRun{Job: held.Status.JobName, Fence: fence}
	m := doneLine.FindStringSubmatch(l.d.jobLog(ctx, s.ns, heldRun.Job))
	Expect(m).NotTo(BeNil(), "the held container's log has no done line")
	heldRun.Writes, _ = strconv.Atoi(m[1])
	l.d.expectOneAfterAnother(ctx, s.ns, lock, []writerRun{
		{Job: first.Status.JobName, Fence: deref(first.Status.FencingToken), Writes: 2},
		heldRun,
		{Job: next.Status.JobName, Fence: deref(next.Status.FencingToken), Writes: 2},
	})

	By("deleting the LockedJobs, then uninstalling " + p.name)
	Expect(suite.k8s.DeleteAllOf(ctx, &batchv1alpha1.LockedJob{}, client.InNamespace(s.ns))).To(Succeed())
	Eventually(func(g Gomega) {
		var list batchv1alpha1.LockedJobList
		g.Expect(suite.k8s.List(ctx, &list, client.InNamespace(s.ns))).To(Succeed())
		g.Expect(names(list.Items)).To(BeEmpty(), "LockedJobs left after delete")
	}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
	t0 = time.Now()
	p.uninstall(ctx, l.to)
	expectNothingLeft(ctx)
	measure("release lane, %s: uninstall -> nothing of lockedjob left %s", p.name, ms(time.Since(t0)))
	l.expectLocksGone(ctx)
}

// expectRunning waits until the manager Deployment runs release r alone: rolled out, Available,
// its one pod of r's image, which names r's version and commit when it starts.
func (l *releaseLane) expectRunning(ctx context.Context, r release) {
	GinkgoHelper()
	var pod corev1.Pod
	Eventually(func(g Gomega) {
		dep := &appsv1.Deployment{}
		g.Expect(suite.k8s.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: managerDeploy}, dep)).To(Succeed())
		g.Expect(dep.Spec.Template.Spec.Containers[0].Image).To(Equal(r.managerImage()))
		st := dep.Status
		g.Expect(st.ObservedGeneration).To(Equal(dep.Generation), "rollout not observed")
		g.Expect([]int32{st.UpdatedReplicas, st.AvailableReplicas, st.Replicas}).To(Equal([]int32{1, 1, 1}), "rollout: %+v", st)
		var pods corev1.PodList
		g.Expect(suite.k8s.List(ctx, &pods, client.InNamespace(operatorNamespace), client.MatchingLabels{managerLabel: managerLabelV})).To(Succeed())
		g.Expect(pods.Items).To(HaveLen(1), "the manager's pods")
		pod = pods.Items[0]
		g.Expect(pod.Spec.Containers[0].Image).To(Equal(r.managerImage()))
	}).WithContext(ctx).WithTimeout(3*time.Minute).Should(Succeed(), func() string { return whyPodsWait(ctx, operatorNamespace) })
	Eventually(func(g Gomega) {
		b, err := suite.cs.CoreV1().Pods(operatorNamespace).GetLogs(pod.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		lines := strings.Split(string(b), "\n")
		i := slices.IndexFunc(lines, func(l string) bool { return strings.Contains(l, "Starting manager") })
		g.Expect(i).To(BeNumerically(">=", 0), "no start-up line in the manager's log")
		g.Expect(lines[i]).To(And(ContainSubstring(r.version), ContainSubstring(r.commit)), "the manager's start-up line")
	}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
}

// expectLocksGone checks that Redis holds nothing of the finished locks: what is left is the fence
// counters, kept by design (a lock's fencing tokens keep rising across installs), keys that expire
// by themselves (release marks), and the protocol announcements of the managers that ran.
func (l *releaseLane) expectLocksGone(ctx context.Context) {
	GinkgoHelper()
	rdb := redis.NewClient(&redis.Options{Addr: l.redis.Addr()})
	defer func() { _ = rdb.Close() }()
	keys, err := rdb.Keys(ctx, "*").Result()
	Expect(err).NotTo(HaveOccurred())
	var left []string
	for _, k := range keys {
		ttl, err := rdb.PTTL(ctx, k).Result()
		Expect(err).NotTo(HaveOccurred())
		if strings.HasSuffix(k, ":fence") || k == "lockedjob:clients" || (ttl > 0 && redislock.IsReleaseMark(k)) {
			continue
		}
		left = append(left, k)
	}
	Expect(left).To(BeEmpty(), "keys of finished locks left in Redis")
}

// eventMessages returns the messages of the LockedJob's Events with reason.
func (s *scenario) eventMessages(name, reason string) []string {
	GinkgoHelper()
	var list corev1.EventList
	Expect(suite.k8s.List(s.ctx, &list, client.InNamespace(s.ns))).To(Succeed())
	var out []string
	for _, e := range list.Items {
		if e.InvolvedObject.Kind == "LockedJob" && e.InvolvedObject.Name == name && e.Reason == reason {
			out = append(out, e.Message)
		}
	}
	return out
}

// ---------------------------------------------------------------- install.yaml

func (l *releaseLane) installYAML() installPath {
	apply := func(ctx context.Context, r release) {
		GinkgoHelper()
		kubectl(ctx, "apply", "--server-side", "-f", l.manifests(r))
	}
	return installPath{
		id:      "yaml",
		name:    "install.yaml",
		install: apply,
		upgrade: apply,
		uninstall: func(ctx context.Context, r release) {
			GinkgoHelper()
			// Not kubectl's own wait: expectNothingLeft bounds it and says what is left.
			kubectl(ctx, "delete", "--wait=false", "-f", l.manifests(r))
		},
	}
}

// manifests is what the lane applies of release r: its install.yaml, or on the suite's own cluster
// a kustomization over it with config/local, as a stranger on such a cluster would write it. It is
// built once per release: the upgrade applies it and the uninstall deletes what it names.
func (l *releaseLane) manifests(r release) string {
	GinkgoHelper()
	if !l.d.local {
		return r.file("install.yaml")
	}
	if path, ok := l.built[r.version]; ok {
		return path
	}
	dir := filepath.Join(l.work, "install-"+r.version)
	Expect(os.MkdirAll(dir, 0o755)).To(Succeed())
	b, err := os.ReadFile(r.file("install.yaml"))
	Expect(err).NotTo(HaveOccurred())
	Expect(os.WriteFile(filepath.Join(dir, "install.yaml"), b, 0o644)).To(Succeed())
	component, err := filepath.Rel(dir, filepath.Join(suite.root, "config", "local"))
	Expect(err).NotTo(HaveOccurred())
	// The values make deploy writes for config/local (hack/deploy-overlay.sh: local-cluster.yaml),
	// under a kustomization of the lane's own over the release's install.yaml.
	overlay := exec.Command("bash", filepath.Join(suite.root, "hack", "deploy-overlay.sh"), filepath.Join(dir, "values"))
	overlay.Env = append(os.Environ(), "IMG="+r.managerImage(), "DEPLOY_OVERLAY=config/local",
		"KUSTOMIZE="+filepath.Join(suite.root, "bin", "kustomize"), "KUBECTL="+kubectlBin(), "KUBECONFIG="+suite.kubeconfig,
		"DEPLOY_REDIS_ADDR="+l.redisFor, "DEPLOY_NODE_IP="+l.d.nodeIP,
		fmt.Sprintf("DEPLOY_PROBE_PORT=%d", l.probePort), fmt.Sprintf("DEPLOY_METRICS_PORT=%d", l.probePort+1))
	res, err := utils.Run(overlay)
	Expect(err).NotTo(HaveOccurred(), res)
	k := "resources:\n- install.yaml\n- values/local-cluster.yaml\ncomponents:\n- " + component + "\n"
	Expect(os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644)).To(Succeed())
	out := filepath.Join(dir, "manifests.yaml")
	res, err = utils.Run(exec.Command(filepath.Join(suite.root, "bin", "kustomize"), "build", "-o", out, dir))
	Expect(err).NotTo(HaveOccurred(), res)
	l.built[r.version] = out
	return out
}

// ---------------------------------------------------------------- the chart

func (l *releaseLane) helmChart() installPath {
	helm := func(ctx context.Context, args ...string) {
		GinkgoHelper()
		cmd := exec.CommandContext(ctx, helmBin(), append(args, "--kubeconfig", suite.kubeconfig, "--namespace", operatorNamespace)...)
		cmd.Env = append(os.Environ(), utils.HelmEnv(filepath.Join(l.work, "helm"))...)
		out, err := utils.Run(cmd)
		Expect(err).NotTo(HaveOccurred(), "helm %v:\n%s", args, out)
	}
	return installPath{
		id:   "chart",
		name: "the chart",
		install: func(ctx context.Context, r release) {
			GinkgoHelper()
			helm(ctx, "install", helmRelease, r.chart(), "--create-namespace", "-f", l.chartValues(), "--wait", "--timeout", "3m")
		},
		upgrade: func(ctx context.Context, r release) {
			GinkgoHelper()
			helm(ctx, "upgrade", helmRelease, r.chart(), "-f", l.chartValues(), "--wait", "--timeout", "3m")
		},
		uninstall: func(ctx context.Context, _ release) {
			GinkgoHelper()
			helm(ctx, "uninstall", helmRelease, "--wait", "--timeout", "3m")
			// Helm never deletes a namespace, the one --create-namespace made included.
			Expect(client.IgnoreNotFound(suite.k8s.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: operatorNamespace}}))).To(Succeed())
		},
	}
}

// chartValues writes the values the lane installs the chart with, for install and upgrade alike:
// the CRDs go with the uninstall (crd.keep is true by default, which keeps every LockedJob past
// it); on the suite's own cluster, what config/local sets for the real node.
func (l *releaseLane) chartValues() string {
	GinkgoHelper()
	values := map[string]any{"crd": map[string]any{"keep": false}}
	if l.d.local {
		values["hostNetwork"] = true
		values["metrics"] = map[string]any{"port": l.probePort + 1}
		values["manager"] = map[string]any{
			// In the node's network a second pod cannot start beside the first (their ports are
			// the node's): an upgrade replaces the pod, as config/local's strategy does.
			"strategy":     map[string]any{"type": "Recreate"},
			"nodeSelector": map[string]string{realNodeLabel: "true"},
			"tolerations":  []corev1.Toleration{{Key: realNodeLabel, Operator: corev1.TolerationOpEqual, Value: "true", Effect: corev1.TaintEffectNoSchedule}},
			"healthProbe":  map[string]any{"port": l.probePort},
			"env": []corev1.EnvVar{
				{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
				{Name: "LOCKEDJOB_REDIS_ADDR", Value: l.redisFor},
				{Name: "KUBERNETES_SERVICE_HOST", Value: "127.0.0.1"},
				{Name: "KUBERNETES_SERVICE_PORT", Value: strconv.Itoa(l.apiserverPort)},
			},
		}
	}
	b, err := yaml.Marshal(values)
	Expect(err).NotTo(HaveOccurred())
	path := filepath.Join(l.work, "values.yaml")
	Expect(os.WriteFile(path, b, 0o644)).To(Succeed())
	return path
}

// ---------------------------------------------------------------- the cluster

// redisService makes install.yaml's Redis address, redis.lockedjob-system.svc:6379, lead to the
// lane's redis-server on this machine: a Service without selector and its EndpointSlice, in the
// namespace, which the install adopts and the uninstall deletes. Not on the suite's own cluster,
// which has no Service network: there the manager is given the address itself.
func (l *releaseLane) redisService(ctx context.Context) {
	GinkgoHelper()
	if l.d.local {
		return
	}
	port, err := strconv.Atoi(portOf(l.redis.Addr()))
	Expect(err).NotTo(HaveOccurred())
	objs := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: operatorNamespace}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: operatorNamespace, Name: "redis"},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "redis", Port: 6379, TargetPort: intstr.FromInt32(int32(port))}}}},
		&discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Namespace: operatorNamespace, Name: "redis-e2e",
				Labels: map[string]string{discoveryv1.LabelServiceName: "redis"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{l.d.nodeIP}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("redis"), Port: ptr.To(int32(port)), Protocol: ptr.To(corev1.ProtocolTCP)}},
		},
	}
	for _, o := range objs {
		Expect(client.IgnoreAlreadyExists(suite.k8s.Create(ctx, o))).To(Succeed(), "create %T", o)
	}
}

// lockedjobKinds are the cluster-wide kinds a release installs, where a leftover would show.
var lockedjobKinds = []schema.GroupVersionKind{
	{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRole"},
	{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRoleBinding"},
	{Group: "flowcontrol.apiserver.k8s.io", Version: "v1", Kind: "FlowSchema"},
	{Group: "admissionregistration.k8s.io", Version: "v1", Kind: "MutatingAdmissionPolicy"},
	{Group: "admissionregistration.k8s.io", Version: "v1", Kind: "MutatingAdmissionPolicyBinding"},
	{Group: "admissionregistration.k8s.io", Version: "v1", Kind: "ValidatingAdmissionPolicy"},
	{Group: "admissionregistration.k8s.io", Version: "v1", Kind: "ValidatingAdmissionPolicyBinding"},
	{Group: "admissionregistration.k8s.io", Version: "v1", Kind: "MutatingWebhookConfiguration"},
}

// lockedjobObjects lists what of lockedjob the cluster holds: its CRDs, the operator's namespace,
// and every object of lockedjobKinds whose name the release gives it (lockedjob-...).
func lockedjobObjects(ctx context.Context) []client.Object {
	GinkgoHelper()
	var out []client.Object
	var crds apiextensionsv1.CustomResourceDefinitionList
	Expect(suite.k8s.List(ctx, &crds)).To(Succeed())
	for i := range crds.Items {
		if crds.Items[i].Spec.Group == batchv1alpha1.GroupVersion.Group {
			out = append(out, &crds.Items[i])
		}
	}
	ns := &corev1.Namespace{}
	if err := suite.k8s.Get(ctx, client.ObjectKey{Name: operatorNamespace}, ns); err == nil {
		out = append(out, ns)
	} else {
		Expect(isNotFound(err)).To(BeTrue(), "get namespace %s: %v", operatorNamespace, err)
	}
	for _, gvk := range lockedjobKinds {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		if err := suite.k8s.List(ctx, list); err != nil {
			Expect(meta.IsNoMatchError(err)).To(BeTrue(), "list %s: %v", gvk.Kind, err)
			continue
		}
		for i := range list.Items {
			if strings.HasPrefix(list.Items[i].GetName(), "lockedjob-") {
				out = append(out, &list.Items[i])
			}
		}
	}
	return out
}

// expectNothingLeft waits until the cluster holds nothing of lockedjob, and says what is left.
func expectNothingLeft(ctx context.Context) {
	GinkgoHelper()
	Eventually(func() []string {
		var left []string
		for _, o := range lockedjobObjects(ctx) {
			left = append(left, kindOf(o)+" "+o.GetName())
		}
		slices.Sort(left)
		return left
	}).WithContext(ctx).WithTimeout(3*time.Minute).Should(BeEmpty(), "lockedjob's objects still in the cluster")
}

// kindOf names o's kind: a typed object from a list carries none in its TypeMeta.
func kindOf(o client.Object) string {
	if k := o.GetObjectKind().GroupVersionKind().Kind; k != "" {
		return k
	}
	return strings.TrimPrefix(fmt.Sprintf("%T", o), "*v1.")
}

func kubectl(ctx context.Context, args ...string) {
	GinkgoHelper()
	out, err := utils.Run(exec.CommandContext(ctx, kubectlBin(), append([]string{"--kubeconfig", suite.kubeconfig}, args...)...))
	Expect(err).NotTo(HaveOccurred(), "kubectl %v:\n%s", args, out)
}
