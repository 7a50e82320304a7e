//go:build e2e

package e2e

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/test/testkit"
)

// Guarded Pods of a controller that is not a Job, as Argo Workflows and Tekton create them: each
// step a Pod of its own whose controller ownerReference names the Workflow (or TaskRun). The gate
// lets them in behind the scheduling gate and the operator ungates one at a time, under the lock
// they share with a LockedJob.

const (
	argoLock       = "argo"
	argoSteps      = 3
	argoStepWrites = 3
)

// argoLike creates a stand-in Workflow, its step Pods and a LockedJob on one lock at once, and
// judges them as the other guarded specs judge theirs: by the Pods' own record, their containers'
// logs and the fenced store.
func (l *guardedLane) argoLike(ctx SpecContext) {
	s := l.s
	// A ConfigMap stands in for the Workflow: a real object, so the garbage collector keeps the
	// Pods it controls, and deletes them with it at the end.
	wf := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "wf-1"}}
	Expect(suite.k8s.Create(ctx, wf)).To(Succeed())
	DeferCleanup(func(ctx SpecContext) {
		Expect(client.IgnoreNotFound(suite.k8s.Delete(ctx, wf, client.PropagationPolicy(metav1.DeletePropagationBackground)))).To(Succeed())
	})

	const holderWrites = 6
	holder := l.d.writerJob(s, "argo-holder", argoLock, testkit.LockedJobOptions{}, "--writes="+strconv.Itoa(holderWrites), "--interval=500ms")
	steps := make([]*corev1.Pod, 0, argoSteps)
	for i := range argoSteps {
		steps = append(steps, l.argoStep(wf, fmt.Sprintf("%s-step-%d", wf.Name, i)))
	}
	By("creating the LockedJob and the Workflow's step Pods at once")
	s.create(holder)
	for _, p := range steps {
		Expect(suite.k8s.Create(ctx, p)).To(Succeed())
	}
	created := time.Now()

	By("every step Pod that does not hold the lock gated and unscheduled, until all ran and were released")
	sawGated := false
	Eventually(func(g Gomega) {
		released := 0
		for _, p := range l.argoSteps(ctx) {
			if _, fenced := p.Annotations[batchv1alpha1.AnnotationFencingToken]; !fenced {
				if !hasGuardGate(p) || p.Spec.NodeName != "" {
					StopTrying(fmt.Sprintf("step Pod %s has no fence but is ungated or bound (node %q, gates %v)",
						p.Name, p.Spec.NodeName, p.Spec.SchedulingGates)).Now()
				}
				sawGated = true
			}
			if p.Annotations[batchv1alpha1.AnnotationGuard] == string(batchv1alpha1.GuardReleased) {
				released++
			}
		}
		g.Expect(released).To(Equal(argoSteps), "step Pods Released")
		g.Expect(s.get(holder.Name).Status.Phase).To(Equal(batchv1alpha1.PhaseSucceeded))
	}).WithContext(ctx).WithTimeout(3 * time.Minute).WithPolling(250 * time.Millisecond).Should(Succeed())
	Expect(sawGated).To(BeTrue(), "no step Pod was ever seen waiting behind the gate: they did not contend")
	measure("in-cluster: a LockedJob and %d Argo-like step Pods on one lock, created at once -> all ended %s", argoSteps, ms(time.Since(created)))

	By("each step Pod: run under its fence, its env read from its own annotation, Released")
	lj := s.get(holder.Name)
	runs := []writerRun{{Job: lj.Status.JobName, Fence: deref(lj.Status.FencingToken), Writes: holderWrites}}
	for _, p := range l.argoSteps(ctx) {
		runs = append(runs, expectStepRan(p))
	}

	By("the containers' logs and the fenced store: one writer at a time, fences rising across both kinds")
	gaps := l.d.expectOneAfterAnother(ctx, s.ns, argoLock, runs)
	measure("in-cluster: Argo-like step Pods and a LockedJob on one lock, %d holders; gaps between their containers %s", len(runs), durationStats(gaps))
}

// argoStep is a step Pod of the stand-in Workflow: the lane's workload, labelled for the lock,
// controlled by wf as Argo's controller sets it (controller and blockOwnerDeletion true).
func (l *guardedLane) argoStep(wf *corev1.ConfigMap, name string) *corev1.Pod {
	tmpl := l.d.writerPod(map[string]string{"app": "e2e", batchv1alpha1.LabelGuardLock: argoLock}, argoLock,
		"--writes="+strconv.Itoa(argoStepWrites), "--interval=500ms")
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: l.s.ns, Name: name, Labels: tmpl.Labels,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: wf.Name, UID: wf.UID,
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}},
		Spec: tmpl.Spec,
	}
}

// argoSteps are the step Pods of the lane's namespace, by name.
func (l *guardedLane) argoSteps(ctx SpecContext) []*corev1.Pod {
	GinkgoHelper()
	var list corev1.PodList
	Expect(suite.k8s.List(ctx, &list, client.InNamespace(l.s.ns), client.MatchingLabels{batchv1alpha1.LabelGuardLock: argoLock})).To(Succeed())
	pods := make([]*corev1.Pod, 0, len(list.Items))
	for i := range list.Items {
		pods = append(pods, &list.Items[i])
	}
	slices.SortFunc(pods, func(a, b *corev1.Pod) int { return cmp.Compare(a.Name, b.Name) })
	return pods
}

// expectStepRan checks what the gate and the operator left on a step Pod that ran: it Succeeded,
// Released, without the operator's finalizer or the gate, and its container's fencing token is
// the downward API's read of its own fence annotation. It returns the run, with its fence.
func expectStepRan(p *corev1.Pod) writerRun {
	GinkgoHelper()
	Expect(p.Status.Phase).To(Equal(corev1.PodSucceeded), "step Pod %s", p.Name)
	Expect(p.Annotations).To(HaveKeyWithValue(batchv1alpha1.AnnotationGuard, string(batchv1alpha1.GuardReleased)), "step Pod %s", p.Name)
	Expect(p.Finalizers).NotTo(ContainElement(batchv1alpha1.FinalizerReleaseLock), "step Pod %s", p.Name)
	Expect(hasGuardGate(p)).To(BeFalse(), "step Pod %s", p.Name)
	Expect(metav1.GetControllerOf(p)).To(HaveField("Kind", "ConfigMap"), "step Pod %s keeps its controller", p.Name)
	fence, err := strconv.ParseInt(p.Annotations[batchv1alpha1.AnnotationFencingToken], 10, 64)
	Expect(err).NotTo(HaveOccurred(), "fence of step Pod %s", p.Name)
	Expect(fence).To(BeNumerically(">", 0))
	Expect(p.Spec.Containers[0].Env).To(ContainElement(corev1.EnvVar{Name: batchv1alpha1.EnvFencingToken,
		ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1",
			FieldPath: "metadata.annotations['" + batchv1alpha1.AnnotationFencingToken + "']"}}}), "step Pod %s", p.Name)
	return writerRun{Job: p.Name, Pod: p.Name, Fence: fence, Writes: argoStepWrites}
}

// hasGuardGate tells a Pod our scheduling gate holds back.
func hasGuardGate(p *corev1.Pod) bool {
	return slices.ContainsFunc(p.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool { return g.Name == batchv1alpha1.SchedulingGateGuard })
}
