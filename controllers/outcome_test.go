package controllers

import (
	"maps"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
)

// podOfJob creates a pod of the LockedJob's Job as the Job controller makes it from the template
// (there is none here): controlled by the Job, with the template's labels and annotations and the
// controller-uid label, and gives it the phase the kubelet would write.
func podOfJob(lj *batchv1alpha1.LockedJob, name string, phase corev1.PodPhase) *corev1.Pod {
	GinkgoHelper()
	job := jobOf(lj)
	labels := map[string]string{batchv1.ControllerUidLabel: string(job.UID), batchv1.JobNameLabel: job.Name}
	maps.Copy(labels, job.Spec.Template.Labels)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: lj.Namespace, Name: name, Labels: labels, Annotations: job.Spec.Template.Annotations,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(job, batchv1.SchemeGroupVersion.WithKind("Job"))}},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
	}
	Expect(k8sClient.Create(ctx, pod)).To(Succeed())
	pod.Status.Phase = phase
	Expect(k8sClient.Status().Update(ctx, pod)).To(Succeed())
	return pod
}

// setPhase writes a pod's phase as the kubelet would.
func setPhase(pod *corev1.Pod, phase corev1.PodPhase) {
	GinkgoHelper()
	pod.Status.Phase = phase
	Expect(k8sClient.Status().Update(ctx, pod)).To(Succeed())
}

// Issue 27, part 6 (docs/design.md, "Release at the outcome"): the lock of a Job of one pod at a
// time to one completion goes when its pod succeeds, a second or more before the Job controller's
// condition; the LockedJob's phase still follows the condition.
var _ = Describe("A lock released at its pod's outcome", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	It("hands the lock on when the Job's pod succeeds, before the Job's condition, and records the outcome when it comes", func() {
		holder := waitPhase(create(newLockedJob(ns, "holder", "outcome")), batchv1alpha1.PhaseRunning)
		waiter := waitPhase(create(newLockedJob(ns, "waiter", "outcome")), batchv1alpha1.PhaseWaiting)

		podOfJob(holder, "holder-a", corev1.PodFailed)
		pod := podOfJob(holder, "holder-b", corev1.PodRunning)
		Consistently(func() batchv1alpha1.LockedJobPhase { return fetch(waiter).Status.Phase }).
			WithTimeout(500*time.Millisecond).Should(Equal(batchv1alpha1.PhaseWaiting), "a failed pod and a running one end nothing")

		setPhase(pod, corev1.PodSucceeded)
		running := waitPhase(waiter, batchv1alpha1.PhaseRunning)
		released := fetch(holder)
		Expect(released.Status.Phase).To(Equal(batchv1alpha1.PhaseRunning), "the phase waits for the Job's condition")
		Expect(released.Status.ReleasedAt).NotTo(BeNil())
		Expect(condition(released, batchv1alpha1.ConditionLockAcquired).Reason).To(Equal(batchv1alpha1.ReasonReleased))
		Expect(*running.Status.FencingToken).To(BeNumerically(">", *released.Status.FencingToken))
		Expect(released.Status.Message).To(ContainSubstring("succeeded; lock released"))

		finishJob(released, true)
		done := waitPhase(holder, batchv1alpha1.PhaseSucceeded)
		Expect(done.Status.ReleasedAt.Time).To(BeTemporally("==", released.Status.ReleasedAt.Time), "released once, at the pod's outcome")
		Expect(condition(done, batchv1alpha1.ConditionComplete).Status).To(Equal(metav1.ConditionTrue))
		Expect(fetch(waiter).Status.Phase).To(Equal(batchv1alpha1.PhaseRunning), "the next holder is not disturbed")
		// Two Events, as for a release at the condition: status told the release when it came, and
		// the outcome's Event tells both (the recorder sends in order, so a Released Event emitted at
		// the pod's outcome would be stored before the last one and this would never match).
		Eventually(func() []string { return eventReasons(holder) }).Should(ConsistOf(
			batchv1alpha1.ReasonJobCreated, batchv1alpha1.ReasonJobComplete))
		Expect(eventNotes(holder)).To(ContainElement(MatchRegexp(
			`^JobComplete: .*; released lock outcome when its pod succeeded \(fencing token %d\)$`, *released.Status.FencingToken)))
	})

	It("records a Job that failed after its pod succeeded (activeDeadlineSeconds ran out in between) as Failed", func() {
		holder := waitPhase(create(newLockedJob(ns, "holder", "outcome-failed")), batchv1alpha1.PhaseRunning)
		podOfJob(holder, "holder-a", corev1.PodSucceeded)
		Eventually(func() *metav1.Time { return fetch(holder).Status.ReleasedAt }).ShouldNot(BeNil())
		finishJob(holder, false)
		waitPhase(holder, batchv1alpha1.PhaseFailed)
	})

	It("waits for the Job's condition when its pods cannot tell the outcome (two completions)", func() {
		holder := waitPhase(create(newLockedJob(ns, "holder", "outcome-two", func(lj *batchv1alpha1.LockedJob) {
			lj.Spec.JobTemplate.Spec.Completions = ptr.To[int32](2)
		})), batchv1alpha1.PhaseRunning)
		waiter := waitPhase(create(newLockedJob(ns, "waiter", "outcome-two")), batchv1alpha1.PhaseWaiting)
		podOfJob(holder, "holder-a", corev1.PodSucceeded)
		Consistently(func() batchv1alpha1.LockedJobPhase { return fetch(waiter).Status.Phase }).
			WithTimeout(time.Second).Should(Equal(batchv1alpha1.PhaseWaiting), "one pod of two completions ends nothing")
		Expect(fetch(holder).Status.ReleasedAt).To(BeNil())
		finishJob(holder, true)
		waitPhase(waiter, batchv1alpha1.PhaseRunning)
	})

	It("gives nothing back for a pod that succeeded but is not the Job's", func() {
		holder := waitPhase(create(newLockedJob(ns, "holder", "outcome-other")), batchv1alpha1.PhaseRunning)
		// Labelled and annotated as the Job's pods are, but nobody's pod: it wakes the LockedJob, which
		// finds no pod of its Job.
		job := jobOf(holder)
		stray := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "stray", Labels: job.Spec.Template.Labels, Annotations: job.Spec.Template.Annotations},
			Spec:       corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
		}
		Expect(k8sClient.Create(ctx, stray)).To(Succeed())
		setPhase(stray, corev1.PodRunning)
		setPhase(stray, corev1.PodSucceeded)
		Consistently(func() *metav1.Time { return fetch(holder).Status.ReleasedAt }).WithTimeout(time.Second).Should(BeNil())
	})
})
