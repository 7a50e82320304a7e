package controllers

import (
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
)

// newGuardedPod is a Pod without an owner labelled for lock: the gate creates it behind a scheduling gate.
func newGuardedPod(ns, name, lock string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{batchv1alpha1.LabelGuardLock: lock}},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "work", Image: "busybox", Command: []string{"true"}}}},
	}
}

func createPod(pod *corev1.Pod) *corev1.Pod {
	GinkgoHelper()
	Expect(k8sClient.Create(ctx, pod)).To(Succeed())
	return pod
}

func getPod(pod *corev1.Pod) *corev1.Pod {
	GinkgoHelper()
	out := &corev1.Pod{}
	Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(pod), out)).To(Succeed())
	return out
}

func hasGuardGate(pod *corev1.Pod) bool {
	for _, g := range pod.Spec.SchedulingGates {
		if g.Name == batchv1alpha1.SchedulingGateGuard {
			return true
		}
	}
	return false
}

// waitPodHeld waits until the guarded Pod is ungated under its lock and returns it with its fence.
func waitPodHeld(pod *corev1.Pod) (*corev1.Pod, int64) {
	GinkgoHelper()
	var got *corev1.Pod
	Eventually(func(g Gomega) {
		got = &corev1.Pod{}
		g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(pod), got)).To(Succeed())
		g.Expect(got.Annotations).To(HaveKeyWithValue(batchv1alpha1.AnnotationGuard, string(batchv1alpha1.GuardHeld)))
		g.Expect(hasGuardGate(got)).To(BeFalse())
	}).Should(Succeed())
	fence, err := strconv.ParseInt(got.Annotations[batchv1alpha1.AnnotationFencingToken], 10, 64)
	Expect(err).NotTo(HaveOccurred())
	return got, fence
}

// stillGated checks for a while that the Pod waits, gated and with no fence.
func stillGated(pod *corev1.Pod) {
	GinkgoHelper()
	Consistently(func(g Gomega) {
		got := getPod(pod)
		g.Expect(hasGuardGate(got)).To(BeTrue())
		g.Expect(got.Annotations).NotTo(HaveKey(batchv1alpha1.AnnotationFencingToken))
	}).WithTimeout(2 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
}

// endPod writes the phase the kubelet writes when the Pod's containers stopped.
func endPod(pod *corev1.Pod, phase corev1.PodPhase) {
	GinkgoHelper()
	Eventually(func() error {
		p := getPod(pod)
		p.Status.Phase = phase
		return k8sClient.Status().Update(ctx, p)
	}).Should(Succeed())
}

// bindPod binds the Pod to a node, as the scheduler would (no node exists here; nothing runs it).
func bindPod(pod *corev1.Pod) {
	GinkgoHelper()
	Expect(k8sClient.SubResource("binding").Create(ctx, pod, &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace},
		Target:     corev1.ObjectReference{Kind: "Node", Name: "node-1"}})).To(Succeed())
}

// podEvents are the Events regarding the Pod, as "Reason: note".
func podEvents(pod *corev1.Pod) []string {
	GinkgoHelper()
	var list eventsv1.EventList
	Expect(k8sClient.List(ctx, &list, client.InNamespace(pod.Namespace))).To(Succeed())
	var out []string
	for _, e := range list.Items {
		if e.Regarding.Kind == "Pod" && e.Regarding.Name == pod.Name {
			out = append(out, e.Reason+": "+e.Note)
		}
	}
	return out
}

var _ = Describe("Guarded Pods", func() {
	It("ungates a labelled Pod without an owner under its lock, with the fence in its annotations", func() {
		ns := newNamespace()
		pod := createPod(newGuardedPod(ns, "etl", "db"))

		got, fence := waitPodHeld(pod)
		Expect(fence).To(BeNumerically(">", 0))
		Expect(got.Finalizers).To(ContainElement(batchv1alpha1.FinalizerReleaseLock))
		Expect(got.Annotations).To(HaveKeyWithValue(batchv1alpha1.AnnotationGuardLockKey, "lockedjob:{ns/envtest/"+ns+"/db}"))
		Expect(got.Annotations).To(HaveKeyWithValue(batchv1alpha1.AnnotationHolder, "envtest/"+ns+"/pod:etl/"+string(got.UID)[:8]))
		Expect(got.Annotations).To(HaveKeyWithValue(batchv1alpha1.AnnotationLock, "db"))
		Expect(got.Annotations).To(HaveKeyWithValue(batchv1alpha1.AnnotationSlot, "0"))
		Eventually(func() []string { return podEvents(pod) }).Should(ContainElement(
			MatchRegexp(`^Acquired: Acquired lock db with fencing token %d; ungated$`, fence)))
	})

	It("runs two guarded Pods of one lock one after the other, the second under a higher fence", func() {
		ns := newNamespace()
		first := createPod(newGuardedPod(ns, "first", "db"))
		_, fence1 := waitPodHeld(first)
		second := createPod(newGuardedPod(ns, "second", "db"))
		stillGated(second)

		endPod(first, corev1.PodSucceeded)
		_, fence2 := waitPodHeld(second)
		Expect(fence2).To(BeNumerically(">", fence1))
		// The release lets the successor in before the end record's write, so the record is waited for.
		Eventually(func(g Gomega) {
			done := getPod(first)
			g.Expect(done.Annotations).To(HaveKeyWithValue(batchv1alpha1.AnnotationGuard, string(batchv1alpha1.GuardReleased)))
			g.Expect(done.Finalizers).NotTo(ContainElement(batchv1alpha1.FinalizerReleaseLock))
		}).Should(Succeed())
	})

	It("excludes a guarded Pod, a LockedJob and a guarded Job of one lock name, with fences rising across all three", func() {
		ns := newNamespace()
		lj := waitPhase(create(newLockedJob(ns, "nightly", "db")), batchv1alpha1.PhaseRunning)
		pod := createPod(newGuardedPod(ns, "etl", "db"))
		stillGated(pod)

		finishJob(lj, true)
		_, fence := waitPodHeld(pod)
		Expect(fence).To(BeNumerically(">", *lj.Status.FencingToken))

		job := createJob(newGuardedJob(ns, "migrate", "db"))
		stillSuspended(job)
		endPod(pod, corev1.PodFailed)
		_, jobFence := waitHeld(job)
		Expect(jobFence).To(BeNumerically(">", fence))
		Eventually(func() map[string]string { return getPod(pod).Annotations }).Should(
			HaveKeyWithValue(batchv1alpha1.AnnotationGuard, string(batchv1alpha1.GuardReleased)), "recorded after the release")
	})

	It("keeps the lock of a deleted bound Pod until its containers stopped, then releases it and lets the Pod go", func() {
		ns := newNamespace()
		pod, _ := waitPodHeld(createPod(newGuardedPod(ns, "etl", "db")))
		bindPod(pod)
		next := createPod(newGuardedPod(ns, "next", "db"))

		Expect(k8sClient.Delete(ctx, pod)).To(Succeed())
		stillGated(next)
		Expect(getPod(pod).DeletionTimestamp).NotTo(BeNil(), "our finalizer keeps it while it may run")

		endPod(pod, corev1.PodFailed) // the kubelet, once its containers stopped
		// A bound Pod's object goes when its kubelet confirms the deletion; none runs here, so the
		// finalizer's removal is what says the operator let it go.
		Eventually(func() []string { return getPod(pod).Finalizers }).ShouldNot(ContainElement(batchv1alpha1.FinalizerReleaseLock))
		waitPodHeld(next)
	})

	It("releases the lock of a deleted Pod that was never bound at once", func() {
		ns := newNamespace()
		pod, _ := waitPodHeld(createPod(newGuardedPod(ns, "etl", "db")))
		next := createPod(newGuardedPod(ns, "next", "db"))
		stillGated(next)

		Expect(k8sClient.Delete(ctx, pod)).To(Succeed())
		Eventually(func() error {
			return k8sClient.Get(ctx, client.ObjectKeyFromObject(pod), &corev1.Pod{})
		}).Should(Satisfy(apierrors.IsNotFound))
		waitPodHeld(next)
	})

	It("re-adopts a held guarded Pod after a restart with the same fence, writing nothing to it", func() {
		ns := newNamespace()
		held, fence := waitPodHeld(createPod(newGuardedPod(ns, "etl", "db")))

		op.stop()
		op = startOperator()
		Eventually(func() bool { return op.book.Holding(held.UID) != nil }).Should(BeTrue(), "the new operator re-adopts the lock")
		Expect(op.book.Holding(held.UID).Fence()).To(Equal(fence))
		Consistently(func(g Gomega) {
			g.Expect(getPod(held).ResourceVersion).To(Equal(held.ResourceVersion))
		}).WithTimeout(time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
	})

	It("marks a Pod labelled after it was created Unguarded, and never gives it a fence", func() {
		ns := newNamespace()
		pod := newGuardedPod(ns, "late", "db")
		pod.Labels = nil
		createPod(pod)
		Eventually(func() error {
			p := getPod(pod)
			p.Labels = map[string]string{batchv1alpha1.LabelGuardLock: "db"}
			return k8sClient.Update(ctx, p)
		}).Should(Succeed())

		Eventually(func(g Gomega) {
			g.Expect(getPod(pod).Annotations).To(HaveKeyWithValue(batchv1alpha1.AnnotationGuard, string(batchv1alpha1.GuardUnguarded)))
		}).Should(Succeed())
		got := getPod(pod)
		Expect(got.Annotations).NotTo(HaveKey(batchv1alpha1.AnnotationFencingToken))
		Expect(got.Finalizers).To(BeEmpty())
		Eventually(func() []string { return podEvents(pod) }).Should(ContainElement(HavePrefix("Unguarded: "))) // the Event follows the record

		_, fence := waitPodHeld(createPod(newGuardedPod(ns, "proper", "db")))
		Expect(fence).To(BeNumerically(">", 0), "the lock stays free for a Pod that asks for it properly")
	})

	It("guards the Pods a Workflow-like controller owns one at a time, and keeps the lock of one it deletes until its containers stopped", func() {
		ns := newNamespace()
		// A ConfigMap stands in for an Argo Workflow: the rule looks only at the controller's
		// kind and apiVersion, and no garbage collector runs here.
		wf := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "wf-1"}}
		Expect(k8sClient.Create(ctx, wf)).To(Succeed())
		stepOf := func(name string) *corev1.Pod {
			pod := newGuardedPod(ns, name, "db")
			pod.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(wf, corev1.SchemeGroupVersion.WithKind("ConfigMap"))}
			return createPod(pod)
		}
		first, fence1 := waitPodHeld(stepOf("wf-1-step-a"))
		bindPod(first)
		second := stepOf("wf-1-step-b")
		stillGated(second)

		Expect(k8sClient.Delete(ctx, first)).To(Succeed()) // as the owner's controller may
		stillGated(second)
		endPod(first, corev1.PodFailed) // the kubelet, once its containers stopped
		_, fence2 := waitPodHeld(second)
		Expect(fence2).To(BeNumerically(">", fence1))
	})

	It("leaves a Pod owned by a Job to the Job path", func() {
		ns := newNamespace()
		job, _ := waitHeld(createJob(newGuardedJob(ns, "migrate", "db")))
		pod := newGuardedPod(ns, "of-the-job", "db")
		pod.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(job, batchv1.SchemeGroupVersion.WithKind("Job"))}
		createPod(pod)
		Consistently(func(g Gomega) {
			got := getPod(pod)
			g.Expect(got.Spec.SchedulingGates).To(BeEmpty(), "not gated: it would wait for the lock its own Job holds")
			g.Expect(got.Annotations).NotTo(HaveKey(batchv1alpha1.AnnotationGuard))
			g.Expect(got.Finalizers).To(BeEmpty())
		}).WithTimeout(2 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
	})

	It("deletes a held Pod whose lock vanishes behind the operator's back (Suspend), and records Lost", func() {
		ns := newNamespace()
		pod := newGuardedPod(ns, "victim", "lost")
		pod.Annotations = map[string]string{batchv1alpha1.AnnotationGuardTTL: "3s"}
		held, _ := waitPodHeld(createPod(pod))
		bindPod(held)
		Expect(rdb.Del(ctx, held.Annotations[batchv1alpha1.AnnotationGuardLockKey]).Err()).To(Succeed())

		Eventually(func(g Gomega) {
			got := getPod(pod)
			g.Expect(got.DeletionTimestamp).NotTo(BeNil())
			g.Expect(got.Annotations).To(HaveKeyWithValue(batchv1alpha1.AnnotationGuard, string(batchv1alpha1.GuardLost)))
		}).Should(Succeed())
		Eventually(func() []string { return podEvents(pod) }).Should(ContainElement(
			ContainSubstring("policy Suspend (a Pod cannot be suspended: it was deleted) applied")))
		Consistently(func() []string { return getPod(pod).Finalizers }).WithTimeout(time.Second).WithPolling(100*time.Millisecond).
			Should(ContainElement(batchv1alpha1.FinalizerReleaseLock), "kept while its containers may run")
		endPod(pod, corev1.PodFailed)
		Eventually(func() []string { return getPod(pod).Finalizers }).ShouldNot(ContainElement(batchv1alpha1.FinalizerReleaseLock),
			"let go once it runs nothing")
	})
})
