package controllers

import (
	"fmt"
	"maps"
	"strconv"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/test/testkit"
)

// installGuard loads the admission gate of guarded Jobs (config/guard, as the project's pinned
// kustomize builds it; test/admission and the fault suite install the same build) into the
// suite's API server, and waits until both policies are in force.
func installGuard() {
	GinkgoHelper()
	policies, err := testkit.GuardPolicies("..")
	Expect(err).NotTo(HaveOccurred())
	Expect(testkit.InstallGuard(ctx, k8sClient, policies, "default", timeout)).To(Succeed())
}

// newGuardedJob is a plain Job labelled for lock: the gate creates it suspended.
func newGuardedJob(ns, name, lock string, mutate ...func(*batchv1.Job)) *batchv1.Job {
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{batchv1alpha1.LabelGuardLock: lock}},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers:    []corev1.Container{{Name: "work", Image: "busybox", Command: []string{"true"}}},
		}}},
	}
	for _, m := range mutate {
		m(job)
	}
	return job
}

func guardAnnotation(k, v string) func(*batchv1.Job) {
	return func(j *batchv1.Job) {
		if j.Annotations == nil {
			j.Annotations = map[string]string{}
		}
		j.Annotations[k] = v
	}
}

func createJob(job *batchv1.Job) *batchv1.Job {
	GinkgoHelper()
	Expect(k8sClient.Create(ctx, job)).To(Succeed())
	return job
}

func getJob(job *batchv1.Job) *batchv1.Job {
	GinkgoHelper()
	out := &batchv1.Job{}
	Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(job), out)).To(Succeed())
	return out
}

// waitHeld waits until the guarded Job runs under its lock and returns it with its fence.
func waitHeld(job *batchv1.Job) (*batchv1.Job, int64) {
	GinkgoHelper()
	var got *batchv1.Job
	Eventually(func(g Gomega) {
		got = &batchv1.Job{}
		g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(job), got)).To(Succeed())
		g.Expect(got.Annotations).To(HaveKeyWithValue(batchv1alpha1.AnnotationGuard, string(batchv1alpha1.GuardHeld)))
		g.Expect(got.Spec.Suspend).To(HaveValue(BeFalse()))
	}).Should(Succeed())
	fence, err := strconv.ParseInt(got.Annotations[batchv1alpha1.AnnotationFencingToken], 10, 64)
	Expect(err).NotTo(HaveOccurred())
	return got, fence
}

// createPodOf creates a pod as the Job controller would for job (its labels, its controller
// reference), with no node: nothing runs it, and a deletion removes it at once.
func createPodOf(job *batchv1.Job) *corev1.Pod {
	GinkgoHelper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: job.Namespace, Name: job.Name + "-pod",
			Labels:          map[string]string{batchv1.ControllerUidLabel: string(job.UID), batchv1.JobNameLabel: job.Name},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(job, batchv1.SchemeGroupVersion.WithKind("Job"))}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "work", Image: "busybox"}}},
	}
	Expect(k8sClient.Create(ctx, pod)).To(Succeed())
	return pod
}

// podOfGuardedJob creates a pod of the held Job as the Job controller makes it from the template:
// controlled by the Job, with the template's labels, which bring it into the reconciler's pod
// cache; then gives it the phase the kubelet would write.
func podOfGuardedJob(job *batchv1.Job, name string, phase corev1.PodPhase, finalizers ...string) *corev1.Pod {
	GinkgoHelper()
	labels := map[string]string{batchv1.ControllerUidLabel: string(job.UID), batchv1.JobNameLabel: job.Name}
	maps.Copy(labels, job.Spec.Template.Labels)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: job.Namespace, Name: name, Labels: labels, Finalizers: finalizers,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(job, batchv1.SchemeGroupVersion.WithKind("Job"))}},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "work", Image: "busybox"}}},
	}
	Expect(k8sClient.Create(ctx, pod)).To(Succeed())
	setPhase(pod, phase)
	return pod
}

// waitReleased waits for the record and the Event of a guarded Job's end: the release lets the
// successor in first, the record's write and the Event (through the recorder's buffer) follow.
func waitReleased(job *batchv1.Job, event string) *batchv1.Job {
	GinkgoHelper()
	var done *batchv1.Job
	Eventually(func(g Gomega) {
		done = getJob(job)
		g.Expect(done.Annotations).To(HaveKeyWithValue(batchv1alpha1.AnnotationGuard, string(batchv1alpha1.GuardReleased)))
		g.Expect(done.Finalizers).NotTo(ContainElement(batchv1alpha1.FinalizerReleaseLock))
		g.Expect(jobEvents(job)).To(ContainElement(MatchRegexp(event)))
	}).Should(Succeed())
	return done
}

// completeJob writes the status the Job controller writes when a Job succeeds.
func completeJob(job *batchv1.Job) {
	GinkgoHelper()
	Eventually(func() error {
		j := getJob(job)
		now := metav1.Now()
		j.Status.StartTime, j.Status.CompletionTime, j.Status.Succeeded = &now, &now, 1
		j.Status.Conditions = []batchv1.JobCondition{
			{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: now},
		}
		return k8sClient.Status().Update(ctx, j)
	}).Should(Succeed())
}

// jobEvents are the Events regarding the Job, as "Reason: note".
func jobEvents(job *batchv1.Job) []string {
	GinkgoHelper()
	var list eventsv1.EventList
	Expect(k8sClient.List(ctx, &list, client.InNamespace(job.Namespace))).To(Succeed())
	var out []string
	for _, e := range list.Items {
		if e.Regarding.Kind == "Job" && e.Regarding.Name == job.Name {
			out = append(out, e.Reason+": "+e.Note)
		}
	}
	return out
}

// stillSuspended checks for a while that the Job waits, suspended and with no fence.
func stillSuspended(job *batchv1.Job) {
	GinkgoHelper()
	Consistently(func(g Gomega) {
		got := getJob(job)
		g.Expect(got.Spec.Suspend).To(HaveValue(BeTrue()))
		g.Expect(got.Annotations).NotTo(HaveKey(batchv1alpha1.AnnotationFencingToken))
	}).WithTimeout(2 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
}

var _ = Describe("Guarded Jobs", func() {
	It("unsuspends a labelled Job under its lock, with the fence in its pod template", func() {
		ns := newNamespace()
		job := createJob(newGuardedJob(ns, "migrate", "db"))
		// The Job as the API server stored it (Create's answer): the operator may have unsuspended
		// it by the time a read comes back.
		Expect(job.Spec.Suspend).To(HaveValue(BeTrue()), "the gate creates it suspended")

		got, fence := waitHeld(job)
		Expect(fence).To(BeNumerically(">", 0))
		Expect(got.Finalizers).To(ContainElement(batchv1alpha1.FinalizerReleaseLock))
		Expect(got.Annotations).To(HaveKeyWithValue(batchv1alpha1.AnnotationGuardLockKey, "lockedjob:{ns/envtest/"+ns+"/db}"))
		Expect(got.Annotations).To(HaveKeyWithValue(batchv1alpha1.AnnotationHolder, "envtest/"+ns+"/job:migrate/"+string(got.UID)[:8]))
		Expect(got.Annotations).NotTo(HaveKey(batchv1alpha1.AnnotationSlot), "a plain lock has no slot")
		tmpl := got.Spec.Template.Annotations
		Expect(tmpl).To(HaveKeyWithValue(batchv1alpha1.AnnotationFencingToken, strconv.FormatInt(fence, 10)))
		Expect(tmpl).To(HaveKeyWithValue(batchv1alpha1.AnnotationLock, "db"))
		Expect(tmpl).To(HaveKeyWithValue(batchv1alpha1.AnnotationHolder, got.Annotations[batchv1alpha1.AnnotationHolder]))
		Expect(tmpl).To(HaveKeyWithValue(batchv1alpha1.AnnotationSlot, "0"))
		Eventually(func() []string { return jobEvents(job) }).Should(ContainElement(
			MatchRegexp(`^Acquired: Acquired lock db with fencing token %d; unsuspended$`, fence)))
	})

	It("runs two guarded Jobs of one lock one after the other, the second under a higher fence", func() {
		ns := newNamespace()
		first := createJob(newGuardedJob(ns, "first", "db"))
		_, fence1 := waitHeld(first)
		second := createJob(newGuardedJob(ns, "second", "db"))
		stillSuspended(second)

		completeJob(first)
		_, fence2 := waitHeld(second)
		Expect(fence2).To(BeNumerically(">", fence1))
		waitReleased(first, fmt.Sprintf(`^JobComplete: Job first completed; released lock db \(fencing token %d\)$`, fence1))
	})

	It("hands the lock on when the held Job's pod succeeds, before the Job's condition (issue 27, part 6)", func() {
		ns := newNamespace()
		first := createJob(newGuardedJob(ns, "first", "db"))
		held, fence1 := waitHeld(first)
		Expect(held.Spec.PodReplacementPolicy).To(HaveValue(Equal(batchv1.TerminatingOrFailed)), "the Job API's default, left alone")
		Expect(held.Spec.Template.Labels).To(HaveKeyWithValue(batchv1alpha1.LabelGuardedJobPod, "true"), "written with the unsuspend")
		second := createJob(newGuardedJob(ns, "second", "db"))
		stillSuspended(second)

		podOfGuardedJob(held, "first-a", corev1.PodFailed)
		pod := podOfGuardedJob(held, "first-b", corev1.PodRunning)
		stillSuspended(second) // a failed pod and a running one end nothing

		setPhase(pod, corev1.PodSucceeded)
		_, fence2 := waitHeld(second)
		Expect(fence2).To(BeNumerically(">", fence1))
		done := waitReleased(first, fmt.Sprintf(`^Released: The pod of Job first succeeded; released lock db \(fencing token %d\)$`, fence1))
		Expect(done.Status.Conditions).To(BeEmpty(), "released before the Job controller's condition")

		completeJob(first)
		Consistently(func(g Gomega) {
			g.Expect(getJob(second).Annotations).To(HaveKeyWithValue(batchv1alpha1.AnnotationGuard, string(batchv1alpha1.GuardHeld)))
			g.Expect(jobEvents(first)).NotTo(ContainElement(HavePrefix("JobComplete: ")), "released once")
		}).WithTimeout(time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
	})

	It("waits for the Job's condition when the succeeded pod had been deleted (a replacement may have been due)", func() {
		ns := newNamespace()
		first := createJob(newGuardedJob(ns, "first", "db"))
		held, _ := waitHeld(first)
		second := createJob(newGuardedJob(ns, "second", "db"))
		pod := podOfGuardedJob(held, "first-a", corev1.PodRunning, "example.com/keep")
		Expect(k8sClient.Delete(ctx, pod)).To(Succeed())
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(pod), pod)).To(Succeed())
		Expect(pod.DeletionTimestamp).NotTo(BeNil())
		setPhase(pod, corev1.PodSucceeded)
		stillSuspended(second)

		completeJob(first)
		waitHeld(second)
		waitReleased(first, `^JobComplete: Job first completed; released lock db`)
		Eventually(func() error {
			p := &corev1.Pod{}
			if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(pod), p); err != nil {
				return err
			}
			p.Finalizers = nil
			return k8sClient.Update(ctx, p)
		}).Should(Succeed())
	})

	It("excludes a LockedJob and a guarded Job of one lock name, with fences rising across both", func() {
		ns := newNamespace()
		lj := waitPhase(create(newLockedJob(ns, "nightly", "db")), batchv1alpha1.PhaseRunning)
		job := createJob(newGuardedJob(ns, "migrate", "db"))
		stillSuspended(job)

		finishJob(lj, true)
		_, fence := waitHeld(job)
		Expect(fence).To(BeNumerically(">", *lj.Status.FencingToken))

		after := create(newLockedJob(ns, "after", "db"))
		Consistently(func(g Gomega) {
			g.Expect(fetch(after).Status.Phase).NotTo(Equal(batchv1alpha1.PhaseRunning))
		}).WithTimeout(2 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
		completeJob(job)
		ran := waitPhase(after, batchv1alpha1.PhaseRunning)
		Expect(*ran.Status.FencingToken).To(BeNumerically(">", fence))
	})

	It("keeps one lock name of two namespaces apart, and refuses Cluster scope from an untrusted one without a Redis call", func() {
		a, b := newNamespace(), newNamespace()
		_, fa := waitHeld(createJob(newGuardedJob(a, "migrate", "db")))
		_, fb := waitHeld(createJob(newGuardedJob(b, "migrate", "db")))
		Expect(fa).To(BeNumerically(">", 0))
		Expect(fb).To(BeNumerically(">", 0))

		lock := "shared-" + a
		refused := createJob(newGuardedJob(a, "global", lock, guardAnnotation(batchv1alpha1.AnnotationGuardScope, "Cluster")))
		Eventually(func(g Gomega) {
			g.Expect(getJob(refused).Annotations).To(HaveKeyWithValue(batchv1alpha1.AnnotationGuard, string(batchv1alpha1.GuardScopeNotAllowed)))
		}).Should(Succeed())
		got := getJob(refused)
		Expect(got.Spec.Suspend).To(HaveValue(BeTrue()))
		Expect(got.Annotations).NotTo(HaveKey(batchv1alpha1.AnnotationHolder))
		Expect(rdb.Keys(ctx, "*"+lock+"*").Val()).To(BeEmpty(), "no Redis call names the lock")
		Eventually(func() []string { return jobEvents(refused) }).Should(ContainElement(ContainSubstring("ScopeNotAllowed: Lock " + lock + " has scope Cluster")))
	})

	It("releases the lock of a deleted held Job, and lets the Job go", func() {
		ns := newNamespace()
		job := createJob(newGuardedJob(ns, "migrate", "db"))
		waitHeld(job)
		next := createJob(newGuardedJob(ns, "next", "db"))
		stillSuspended(next)

		Expect(k8sClient.Delete(ctx, job, client.PropagationPolicy(metav1.DeletePropagationBackground))).To(Succeed())
		Eventually(func() error {
			return k8sClient.Get(ctx, client.ObjectKeyFromObject(job), &batchv1.Job{})
		}).Should(Satisfy(apierrors.IsNotFound), "the finalizer goes and the Job with it")
		waitHeld(next)
	})

	It("stops the running pods of a deleted held Job itself, and releases once they are gone", func() {
		// The Job controller leaves a Job that is being deleted alone (it deletes active pods of a
		// suspended Job only while the Job is not deleted), and the garbage collector deletes the
		// pods of a background deletion only once the Job is gone, which our finalizer holds back.
		ns := newNamespace()
		job, _ := waitHeld(createJob(newGuardedJob(ns, "migrate", "db")))
		pod := createPodOf(job)
		next := createJob(newGuardedJob(ns, "next", "db"))
		stillSuspended(next)

		Expect(k8sClient.Delete(ctx, job, client.PropagationPolicy(metav1.DeletePropagationBackground))).To(Succeed())
		Eventually(func() error {
			return k8sClient.Get(ctx, client.ObjectKeyFromObject(pod), &corev1.Pod{})
		}).Should(Satisfy(apierrors.IsNotFound), "the operator deletes the pod the Job controller will not")
		Eventually(func() error {
			return k8sClient.Get(ctx, client.ObjectKeyFromObject(job), &batchv1.Job{})
		}).Should(Satisfy(apierrors.IsNotFound), "the finalizer goes once the pod is gone, and the Job with it")
		waitHeld(next)
	})

	It("lets the pods of a held Job deleted with propagation Orphan run on, under the lock until they end", func() {
		ns := newNamespace()
		job, _ := waitHeld(createJob(newGuardedJob(ns, "migrate", "db")))
		pod := createPodOf(job)
		next := createJob(newGuardedJob(ns, "next", "db"))

		// No garbage collector runs here: the orphan finalizer stays, as it does until the
		// collector has taken the pods from the Job.
		Expect(k8sClient.Delete(ctx, job, client.PropagationPolicy(metav1.DeletePropagationOrphan))).To(Succeed())
		stillSuspended(next)
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(pod), &corev1.Pod{})).To(Succeed(), "an orphaned pod runs on")

		Expect(k8sClient.Delete(ctx, pod)).To(Succeed())
		waitHeld(next)
	})

	It("re-adopts a held guarded Job after a restart with the same fence, writing nothing to it", func() {
		ns := newNamespace()
		held, fence := waitHeld(createJob(newGuardedJob(ns, "migrate", "db")))

		op.stop()
		op = startOperator()
		Eventually(func() bool { return op.book.Holding(held.UID) != nil }).Should(BeTrue(), "the new operator re-adopts the lock")
		Expect(op.book.Holding(held.UID).Fence()).To(Equal(fence))
		Consistently(func(g Gomega) {
			g.Expect(getJob(held).ResourceVersion).To(Equal(held.ResourceVersion))
		}).WithTimeout(time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
	})

	It("releases a guarded Job whose lease lapsed while the operator was away, nobody holding the lock since (issue 28)", func() {
		ns := newNamespace()
		held, fence := waitHeld(createJob(newGuardedJob(ns, "migrate", "db")))
		key := held.Annotations[batchv1alpha1.AnnotationGuardLockKey]

		op.stop()
		Expect(rdb.Del(ctx, key).Err()).To(Succeed()) // the lease ran out; the fence key stays
		completeJob(held)
		op = startOperator()

		Eventually(func() map[string]string { return getJob(held).Annotations }).Should(
			HaveKeyWithValue(batchv1alpha1.AnnotationGuard, string(batchv1alpha1.GuardReleased)))
		Expect(rdb.Get(ctx, key+":fence").Val()).To(Equal(strconv.FormatInt(fence, 10)), "no grant since")
	})

	It("marks a Job labelled after it was created Unguarded, and never gives it a fence", func() {
		ns := newNamespace()
		job := newGuardedJob(ns, "late", "db")
		delete(job.Labels, batchv1alpha1.LabelGuardLock)
		createJob(job)
		Eventually(func() error {
			j := getJob(job)
			j.Labels[batchv1alpha1.LabelGuardLock] = "db"
			return k8sClient.Update(ctx, j)
		}).Should(Succeed())

		Eventually(func(g Gomega) {
			g.Expect(getJob(job).Annotations).To(HaveKeyWithValue(batchv1alpha1.AnnotationGuard, string(batchv1alpha1.GuardUnguarded)))
		}).Should(Succeed())
		got := getJob(job)
		Expect(got.Annotations).NotTo(HaveKey(batchv1alpha1.AnnotationFencingToken))
		Expect(got.Finalizers).NotTo(ContainElement(batchv1alpha1.FinalizerReleaseLock))
		Expect(got.Spec.Suspend).To(HaveValue(BeFalse()), "left running")
		// The Event follows the record's write, through the recorder's buffer.
		Eventually(func() []string { return jobEvents(job) }).Should(ContainElement(HavePrefix("Unguarded: ")))

		// The lock stays free for a Job that asks for it properly.
		_, fence := waitHeld(createJob(newGuardedJob(ns, "proper", "db")))
		Expect(fence).To(BeNumerically(">", 0))
	})

	DescribeTable("applies its on-lock-lost policy when the lock vanishes behind the operator's back, and says so",
		func(policy batchv1alpha1.LockLostPolicy, check func(*batchv1.Job)) {
			ns := newNamespace()
			victim := createJob(newGuardedJob(ns, "victim", "lost",
				guardAnnotation(batchv1alpha1.AnnotationGuardOnLockLost, string(policy)),
				guardAnnotation(batchv1alpha1.AnnotationGuardTTL, "3s")))
			held, _ := waitHeld(victim)
			Expect(rdb.Del(ctx, held.Annotations[batchv1alpha1.AnnotationGuardLockKey]).Err()).To(Succeed())

			Eventually(func(g Gomega) {
				got := &batchv1.Job{}
				err := k8sClient.Get(ctx, client.ObjectKeyFromObject(victim), got)
				if policy == batchv1alpha1.LockLostDelete && apierrors.IsNotFound(err) {
					return // deleted, and let go: no record left to read
				}
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(got.Annotations).To(HaveKeyWithValue(batchv1alpha1.AnnotationGuard, string(batchv1alpha1.GuardLost)))
			}).Should(Succeed())
			Eventually(func() []string { return jobEvents(victim) }).Should(ContainElement(HavePrefix("LockLost: ")))
			check(victim)
		},
		Entry("Suspend suspends the Job", batchv1alpha1.LockLostSuspend, func(job *batchv1.Job) {
			Eventually(func() *bool { return getJob(job).Spec.Suspend }).Should(HaveValue(BeTrue()))
		}),
		Entry("Delete deletes the Job", batchv1alpha1.LockLostDelete, func(job *batchv1.Job) {
			Eventually(func() bool {
				got := &batchv1.Job{}
				err := k8sClient.Get(ctx, client.ObjectKeyFromObject(job), got)
				return apierrors.IsNotFound(err) || err == nil && got.DeletionTimestamp != nil
			}).Should(BeTrue())
		}),
		Entry("Ignore keeps the Job running", batchv1alpha1.LockLostIgnore, func(job *batchv1.Job) {
			Consistently(func() *bool { return getJob(job).Spec.Suspend }).WithTimeout(time.Second).Should(HaveValue(BeFalse()))
		}),
	)
})
