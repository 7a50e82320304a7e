//go:build e2e

package e2e

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/test/testkit"
	"github.com/lockedjob/lockedjob/test/utils"
)

// Guarded Jobs in the in-cluster lane: plain batch/v1 Jobs labelled batch.lockedjob.dev/lock, written
// by the tools that write Jobs (the kube-controller-manager's CronJob controller, a Helm hook), let
// in suspended by the admission gate (config/guard, installed by deploy) and run by the deployed
// manager under the lock they share with LockedJobs. Their containers are the lane's workload,
// which writes to the lock's fenced store with the fencing token the downward API hands it.

const (
	cronLock = "cron"
	hookLock = "hook"
	// hookChart is the chart of the Helm spec: a pre-install hook Job with the lock label, and a
	// ConfigMap that Helm creates only after the hook completed.
	hookChart = "test/e2e/testdata/hooked"
)

// guardedLane is what the guarded-Job specs share with the lane they run in.
type guardedLane struct {
	d    *deployment
	s    *scenario
	cron *cronScenario
}

// startGuardedLane registers the cleanup of the lane's guarded Jobs and starts the CronJob
// scenario (judged by the lane's last spec). Its cleanups run before the scenario's teardown,
// while the manager still runs: a held guarded Job carries the operator's finalizer.
func startGuardedLane(ctx context.Context, d *deployment, s *scenario) *guardedLane {
	GinkgoHelper()
	l := &guardedLane{d: d, s: s}
	if !d.guard {
		return l
	}
	DeferCleanup(l.deleteGuardedJobs, NodeTimeout(2*time.Minute))
	l.cron = startCronScenario(ctx, l)
	return l
}

// guardedSpecs registers the guarded-Job specs in the lane's Ordered container, the CronJob's last.
func guardedSpecs(lane func() *guardedLane) {
	It("holds a Helm pre-install hook Job until the LockedJob holding its lock ends; helm install waits for it", func(ctx SpecContext) {
		l := lane()
		l.skipWithoutGate()
		l.helmHook(ctx)
	}, SpecTimeout(4*time.Minute))

	It("guards the step Pods of an Argo-like controller beside a LockedJob of one lock: gated until each holds it, fences rising across both kinds", func(ctx SpecContext) {
		l := lane()
		l.skipWithoutGate()
		l.argoLike(ctx)
	}, SpecTimeout(4*time.Minute))

	// Last: the CronJob's runs come on the minute (the kube-controller-manager's cronjob controller
	// starts `* * * * *` at each minute boundary), so its scenario needs one to two and a half
	// minutes. It started with the lane (BeforeAll) and ran beside the lane's other specs; here it
	// waits only for what is left.
	It("runs a CronJob's guarded Jobs and a LockedJob of one lock one at a time, fences rising across both kinds", func(ctx SpecContext) {
		l := lane()
		l.skipWithoutGate()
		l.cron.judge(ctx)
	}, SpecTimeout(4*time.Minute))
}

func (l *guardedLane) skipWithoutGate() {
	if !l.d.guard {
		Skip("the cluster does not serve admissionregistration.k8s.io/v1 mutatingadmissionpolicies: no admission gate, no guarded Jobs")
	}
}

// deleteGuardedJobs deletes the lane's CronJobs (no run starts while it cleans up) and guarded
// Jobs, and waits until the operator released them and they are gone.
func (l *guardedLane) deleteGuardedJobs(ctx SpecContext) {
	ns := client.InNamespace(l.s.ns)
	Expect(suite.k8s.DeleteAllOf(ctx, &batchv1.CronJob{}, ns, client.PropagationPolicy(metav1.DeletePropagationBackground))).To(Succeed())
	Expect(suite.k8s.DeleteAllOf(ctx, &batchv1.Job{}, ns, client.HasLabels{batchv1alpha1.LabelGuardLock},
		client.PropagationPolicy(metav1.DeletePropagationBackground))).To(Succeed())
	Eventually(func(g Gomega) {
		var jobs batchv1.JobList
		g.Expect(suite.k8s.List(ctx, &jobs, ns, client.HasLabels{batchv1alpha1.LabelGuardLock})).To(Succeed())
		g.Expect(jobs.Items).To(BeEmpty(), "guarded Jobs left after delete")
	}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
}

// guardedJobs are the Jobs of the lane's namespace labelled with lock, oldest first.
func (l *guardedLane) guardedJobs(ctx context.Context, lock string) []batchv1.Job {
	GinkgoHelper()
	var jobs batchv1.JobList
	Expect(suite.k8s.List(ctx, &jobs, client.InNamespace(l.s.ns), client.MatchingLabels{batchv1alpha1.LabelGuardLock: lock})).To(Succeed())
	slices.SortFunc(jobs.Items, func(a, b batchv1.Job) int {
		return cmp.Or(a.CreationTimestamp.Compare(b.CreationTimestamp.Time), cmp.Compare(a.Name, b.Name))
	})
	return jobs.Items
}

// expectRanGuarded checks what the gate and the operator left on a guarded Job that ran and ended:
// it is Complete and Released, without the operator's finalizer; its pods were given the fence
// by the pod template's annotations, which its containers read through the gate's env; and it
// has the Events of its acquisition and of its release. It returns the run, with its fence.
func (l *guardedLane) expectRanGuarded(j batchv1.Job, writes int) writerRun {
	GinkgoHelper()
	Expect(jobComplete(j)).To(BeTrue(), "guarded Job %s did not complete: %v", j.Name, jobConditions(j))
	Expect(j.Annotations).To(HaveKeyWithValue(batchv1alpha1.AnnotationGuard, string(batchv1alpha1.GuardReleased)), "guarded Job %s", j.Name)
	Expect(j.Finalizers).NotTo(ContainElement(batchv1alpha1.FinalizerReleaseLock), "guarded Job %s", j.Name)
	fence, err := strconv.ParseInt(j.Annotations[batchv1alpha1.AnnotationFencingToken], 10, 64)
	Expect(err).NotTo(HaveOccurred(), "fence of guarded Job %s", j.Name)
	Expect(fence).To(BeNumerically(">", 0))
	Expect(j.Spec.Template.Annotations).To(HaveKeyWithValue(batchv1alpha1.AnnotationFencingToken, strconv.FormatInt(fence, 10)))
	Expect(j.Spec.Template.Annotations).To(HaveKeyWithValue(batchv1alpha1.AnnotationLock, j.Labels[batchv1alpha1.LabelGuardLock]))
	Expect(j.Spec.Template.Spec.Containers[0].Env).To(ContainElement(corev1.EnvVar{Name: batchv1alpha1.EnvFencingToken,
		ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1",
			FieldPath: "metadata.annotations['" + batchv1alpha1.AnnotationFencingToken + "']"}}}))
	for _, p := range l.s.podsOfJob(j.Name) {
		Expect(p.Annotations).To(HaveKeyWithValue(batchv1alpha1.AnnotationFencingToken, strconv.FormatInt(fence, 10)), "pod %s", p.Name)
	}
	Eventually(func() []string { return l.s.eventReasons("Job", j.Name) }).WithTimeout(20*time.Second).
		Should(And(ContainElement(batchv1alpha1.ReasonAcquired),
			// Released when the lock went at the pod's success, JobComplete when the Job's condition came first.
			ContainElement(BeElementOf(batchv1alpha1.ReasonReleased, batchv1alpha1.ReasonJobComplete))), "Events of guarded Job %s", j.Name)
	return writerRun{Job: j.Name, Fence: fence, Writes: writes}
}

// ---------------------------------------------------------------- a CronJob beside a LockedJob

// cronScenario: a LockedJob holds the lock across the next minute boundary, so the CronJob's first
// run waits behind it; its second run comes a minute later.
type cronScenario struct {
	l       *guardedLane
	cron    *batchv1.CronJob
	holder  string // the LockedJob
	writes  int    // its container's writes, one a second
	created time.Time
}

const cronWrites = 3 // each run's writes, 500 ms apart

func startCronScenario(ctx context.Context, l *guardedLane) *cronScenario {
	GinkgoHelper()
	c := &cronScenario{l: l, holder: "cron-holder"}
	// The holder's container must hold the lock (be running) before the CronJob is created, and
	// keep it 15 s past the first minute boundary after that, so that the first run, whenever
	// the kube-controller-manager makes it, waits. Its container runs within 10 s (asserted), so it
	// writes until 15 s past the first boundary after now+10s; started less than 10 s before a
	// boundary, it holds across the next one too.
	start := time.Now()
	boundary := start.Add(10 * time.Second).Truncate(time.Minute).Add(time.Minute)
	c.writes = int(boundary.Add(15*time.Second).Sub(start)/time.Second) + 1
	l.s.create(l.d.writerJob(l.s, c.holder, cronLock, testkit.LockedJobOptions{}, "--writes="+strconv.Itoa(c.writes), "--interval=1s"))
	l.s.eventuallyRunningPod(c.holder, time.Until(start.Add(10*time.Second)))

	limit := int32(10)
	c.cron = &batchv1.CronJob{
		ObjectMeta: metav1.ObjectMeta{Namespace: l.s.ns, Name: "every-minute"},
		Spec: batchv1.CronJobSpec{
			Schedule: "* * * * *",
			// Allow: the CronJob controller starts a run every minute whatever the last one does;
			// the lock alone keeps two runs, or a run and the LockedJob, from writing at once.
			ConcurrencyPolicy:          batchv1.AllowConcurrent,
			SuccessfulJobsHistoryLimit: &limit,
			FailedJobsHistoryLimit:     &limit,
			JobTemplate: batchv1.JobTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{batchv1alpha1.LabelGuardLock: cronLock}},
				Spec: batchv1.JobSpec{
					BackoffLimit: new(int32),
					Template: l.d.writerPod(map[string]string{"app": "e2e"}, cronLock,
						"--writes="+strconv.Itoa(cronWrites), "--interval=500ms"),
				},
			},
		},
	}
	Expect(suite.k8s.Create(ctx, c.cron)).To(Succeed())
	c.created = time.Now()
	logf("CronJob %s created; its first run is due at %s, while %s holds lock %s (until about %s)",
		c.cron.Name, c.created.Truncate(time.Minute).Add(time.Minute).Format(time.TimeOnly), c.holder, cronLock,
		boundary.Add(15*time.Second).Format(time.TimeOnly))
	return c
}

func (c *cronScenario) judge(ctx SpecContext) {
	l, s := c.l, c.l.s
	By("waiting for two runs of the CronJob and the LockedJob to end")
	Eventually(func(g Gomega) {
		done := 0
		for _, j := range l.guardedJobs(ctx, cronLock) {
			if jobComplete(j) && j.Annotations[batchv1alpha1.AnnotationGuard] == string(batchv1alpha1.GuardReleased) {
				done++
			}
		}
		g.Expect(done).To(BeNumerically(">=", 2), "runs Complete and Released")
		g.Expect(s.get(c.holder).Status.Phase).To(Equal(batchv1alpha1.PhaseSucceeded))
	}).WithContext(ctx).WithTimeout(3 * time.Minute).WithPolling(time.Second).Should(Succeed())
	measure("in-cluster: CronJob created -> two guarded runs and the LockedJob ended %s", ms(time.Since(c.created)))

	By("suspending the CronJob, then waiting until every run it started ended")
	Expect(suite.k8s.Patch(ctx, c.cron, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"suspend":true}}`)))).To(Succeed())
	var jobs []batchv1.Job
	Eventually(func(g Gomega) {
		jobs = l.guardedJobs(ctx, cronLock)
		for _, j := range jobs {
			g.Expect(j.Annotations).To(HaveKeyWithValue(batchv1alpha1.AnnotationGuard, string(batchv1alpha1.GuardReleased)), "guarded Job %s", j.Name)
		}
	}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())

	By("each run: created by the CronJob, suspended by the gate, run under its fence and Released")
	holder := s.get(c.holder)
	runs := []writerRun{{Job: holder.Status.JobName, Fence: deref(holder.Status.FencingToken), Writes: c.writes}}
	for _, j := range jobs {
		Expect(metav1.GetControllerOf(&j)).To(HaveField("Name", c.cron.Name), "guarded Job %s", j.Name)
		rec := s.rec.History().Job(j.Name)
		Expect(rec.Unsuspended).To(BeTemporally(">", rec.Added), "guarded Job %s was never seen suspended: the gate let it in running", j.Name)
		runs = append(runs, l.expectRanGuarded(j, cronWrites))
	}

	By("the first run waiting behind the LockedJob, its pod started only after the LockedJob's ended")
	h := s.rec.History()
	first, held := h.Job(jobs[0].Name), h.Job(holder.Status.JobName)
	heldPods, firstPods := h.PodsOf(held.Name), h.PodsOf(first.Name)
	Expect(heldPods).NotTo(BeEmpty())
	Expect(firstPods).NotTo(BeEmpty())
	Expect(first.Added).To(BeTemporally("<", held.Complete), "the CronJob's first run %s was created after the LockedJob's Job completed: it did not contend", first.Name)
	Expect(firstPods[0].Added).To(BeTemporally(">", heldPods[0].Succeeded), "the first run's pod started beside the LockedJob's")
	Expect(runs[1].Fence).To(BeNumerically(">", runs[0].Fence), "the first run's fence is above the LockedJob's")
	measure("in-cluster: a CronJob's guarded run behind a LockedJob: waited %s; LockedJob's pod Succeeded -> run's pod created %s",
		ms(firstPods[0].Added.Sub(first.Added)), ms(firstPods[0].Added.Sub(heldPods[0].Succeeded)))

	By("the containers' logs and the fenced store: one writer at a time, fences rising across both kinds")
	gaps := l.d.expectOneAfterAnother(ctx, s.ns, cronLock, runs)
	measure("in-cluster: CronJob runs and a LockedJob on one lock, %d holders; gaps between their containers %s", len(runs), durationStats(gaps))
}

// ---------------------------------------------------------------- a Helm hook

func (l *guardedLane) helmHook(ctx SpecContext) {
	s := l.s
	const holderWrites, hookWrites = 16, 3
	s.create(l.d.writerJob(s, "hook-holder", hookLock, testkit.LockedJobOptions{}, "--writes="+strconv.Itoa(holderWrites), "--interval=500ms"))
	s.eventuallyRunningPod("hook-holder", time.Minute)

	By("running helm install while the LockedJob holds the lock")
	values := filepath.Join(suite.work, "hooked-values.json")
	b, err := json.Marshal(map[string]any{"lock": hookLock,
		"podTemplate": l.d.writerPod(map[string]string{"app": "e2e"}, hookLock, "--writes="+strconv.Itoa(hookWrites), "--interval=200ms")})
	Expect(err).NotTo(HaveOccurred())
	Expect(os.WriteFile(values, b, 0o644)).To(Succeed())
	helm := exec.Command(helmBin(), "install", "hooked", filepath.Join(suite.root, hookChart), "--namespace", s.ns,
		"--kubeconfig", suite.kubeconfig, "--values", values, "--timeout", "3m")
	helm.Env = append(os.Environ(), utils.HelmEnv(filepath.Join(suite.work, "helm"))...)
	var out bytes.Buffer
	helm.Stdout, helm.Stderr = &out, &out
	Expect(helm.Start()).To(Succeed(), "%s", helm)
	exited := make(chan time.Time, 1)
	var helmErr error
	go func() {
		helmErr = helm.Wait()
		exited <- time.Now()
	}()
	DeferCleanup(func() {
		_ = helm.Process.Kill() // a no-op once it exited
	})

	By("the hook Job created while the LockedJob holds the lock, and helm install waiting for it")
	hook := &batchv1.Job{}
	Eventually(func() error {
		return suite.k8s.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: "hooked-migrate"}, hook)
	}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())

	var helmDone time.Time
	Eventually(exited).WithContext(ctx).WithTimeout(3*time.Minute).Should(Receive(&helmDone), "helm install did not return")
	Expect(helmErr).NotTo(HaveOccurred(), "helm install:\n%s", out.String())
	Expect(out.String()).To(ContainSubstring("STATUS: deployed"))
	logf("helm install:\n%s", out.String())

	By("the hook Job after the LockedJob, under a higher fence, and the release's resources after the hook")
	holder := s.eventuallyPhase("hook-holder", batchv1alpha1.PhaseSucceeded, time.Minute)
	held, hooked := s.seenFinished(holder.Status.JobName), s.seenFinished(hook.Name)
	// Seen first suspended (Added), unsuspended later by the operator; a Job let in running has both
	// at its first sighting.
	Expect(hooked.Unsuspended).To(BeTemporally(">", hooked.Added), "the hook Job was never seen suspended: the gate let it in running")
	Expect(hooked.Added).To(BeTemporally("<", held.Complete), "the hook Job was created after the LockedJob's Job completed: it did not contend")
	heldDone := s.rec.History().WorkEnded(held.Name)
	Expect(helmDone).To(BeTemporally(">", heldDone), "helm install returned before the LockedJob's pod ended")
	Expect(s.rec.History().PodsOf(hook.Name)).NotTo(BeEmpty())
	Expect(s.rec.History().PodsOf(hook.Name)[0].Added).To(BeTemporally(">", s.rec.History().PodsOf(held.Name)[0].Succeeded),
		"the hook Job's pod started beside the LockedJob's")
	Eventually(func(g Gomega) {
		g.Expect(suite.k8s.Get(ctx, client.ObjectKeyFromObject(hook), hook)).To(Succeed())
		g.Expect(hook.Annotations).To(HaveKeyWithValue(batchv1alpha1.AnnotationGuard, string(batchv1alpha1.GuardReleased)))
	}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
	run := l.expectRanGuarded(*hook, hookWrites)
	Expect(run.Fence).To(BeNumerically(">", deref(holder.Status.FencingToken)), "the hook Job's fence is above the LockedJob's")
	cm := &corev1.ConfigMap{}
	Expect(suite.k8s.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: "hooked-config"}, cm)).To(Succeed())
	Expect(hook.Status.CompletionTime).NotTo(BeNil())
	Expect(cm.CreationTimestamp.Time).To(BeTemporally(">=", hook.Status.CompletionTime.Time), "Helm created the release's ConfigMap before its hook completed")

	runs := []writerRun{{Job: holder.Status.JobName, Fence: deref(holder.Status.FencingToken), Writes: holderWrites}, run}
	l.d.expectOneAfterAnother(ctx, s.ns, hookLock, runs)
	measure("in-cluster: Helm pre-install hook behind a LockedJob: LockedJob's pod ended -> helm install returned %s; hook Job waited %s",
		ms(helmDone.Sub(heldDone)), ms(heldDone.Sub(hooked.Added)))
}

// ---------------------------------------------------------------- small helpers

func jobComplete(j batchv1.Job) bool {
	return slices.ContainsFunc(j.Status.Conditions, func(c batchv1.JobCondition) bool {
		return c.Type == batchv1.JobComplete && c.Status == corev1.ConditionTrue
	})
}

// helmBin is the project's pinned helm (`make helm`), or HELM.
func helmBin() string { return envOr("HELM", filepath.Join(suite.root, "bin", "helm")) }
