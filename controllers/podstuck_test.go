package controllers

import (
	"strings"
	"unicode/utf8"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/controllers/internal/reconcile"
	"github.com/lockedjob/lockedjob/controllers/internal/unit"
)

var _ = Describe("A pod that cannot start", func() {
	It("shows the kubelet's reason in the LockedJob's status, and drops it once the pod is ready", func() {
		ns := newNamespace()
		lj := create(newLockedJob(ns, "noimage", "stuck"))
		running := waitPhase(lj, batchv1alpha1.PhaseRunning)

		pod := standInPod(running)
		const kubeletSays = `Container image "nowhere/none:1" is not present with pull policy of Never`
		pod.Status.Phase = corev1.PodPending
		pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "c", Image: "nowhere/none:1",
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImageNeverPull", Message: kubeletSays}}}}
		Expect(k8sClient.Status().Update(ctx, pod)).To(Succeed())
		setJobPods(running, 1, 0)

		Eventually(func(g Gomega) {
			got := fetch(lj)
			g.Expect(got.Status.Phase).To(Equal(batchv1alpha1.PhaseRunning), "the lock stays held: the user decides")
			g.Expect(got.Status.Message).To(ContainSubstring("ErrImageNeverPull: " + kubeletSays))
			g.Expect(condition(got, batchv1alpha1.ConditionJobRunning).Reason).To(Equal(batchv1alpha1.ReasonPodStuck))
		}).Should(Succeed())

		setJobPods(running, 1, 1)
		Eventually(func(g Gomega) {
			got := fetch(lj)
			g.Expect(got.Status.Message).NotTo(ContainSubstring("ErrImageNeverPull"))
			g.Expect(condition(got, batchv1alpha1.ConditionJobRunning).Reason).To(Equal(batchv1alpha1.ReasonJobRunning))
		}).Should(Succeed())
	})

	It("quotes a kubelet message of any length within the API's limits (#23)", func() {
		ns := newNamespace()
		lj := create(newLockedJob(ns, "verbose", "stuck"))
		running := waitPhase(lj, batchv1alpha1.PhaseRunning)

		pod := standInPod(running)
		kubeletSays := "Fehler beim Abrufen des Abbilds: " + strings.Repeat("é", 2560)
		pod.Status.Phase = corev1.PodPending
		pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "c", Image: "nowhere/none:1",
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImagePull", Message: kubeletSays}}}}
		Expect(k8sClient.Status().Update(ctx, pod)).To(Succeed())
		setJobPods(running, 1, 0)

		Eventually(func(g Gomega) {
			got := fetch(lj)
			g.Expect(condition(got, batchv1alpha1.ConditionJobRunning).Reason).To(Equal(batchv1alpha1.ReasonPodStuck))
			g.Expect(got.Status.Message).To(ContainSubstring("ErrImagePull: Fehler beim Abrufen des Abbilds: "))
			g.Expect(got.Status.Message).To(HaveSuffix(reconcile.Ellipsis))
			g.Expect(len(got.Status.Message)).To(BeNumerically("<=", unit.APILimit))
			g.Expect(utf8.ValidString(got.Status.Message)).To(BeTrue())
		}).Should(Succeed())
	})
})

// setJobPods writes the pod counts the Job controller would write.
func setJobPods(lj *batchv1alpha1.LockedJob, active, ready int32) {
	GinkgoHelper()
	job := jobOf(lj)
	job.Status.Active, job.Status.Ready = active, ptr.To(ready)
	Expect(k8sClient.Status().Update(ctx, job)).To(Succeed())
}
