package admission_test

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
)

// The names of the Pod policies in config/guard, built alone (config/default prefixes them).
const (
	podMutatePolicy   = "guard-pod-mutate"
	podValidatePolicy = "guard-pod-validate"
)

// guardedPod is a Pod labelled with a lock and no owner: two init containers and two containers, the first
// of each with no env and the second with an env list of its own.
func guardedPod(opts ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: "guarded-",
			Namespace:    namespace,
			Labels:       map[string]string{batchv1alpha1.LabelGuardLock: "db-migrate"},
		},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			InitContainers: []corev1.Container{
				{Name: "init-bare", Image: "busybox"},
				{Name: "init-env", Image: "busybox", Env: []corev1.EnvVar{{Name: "INIT", Value: "1"}}},
			},
			Containers: []corev1.Container{
				{Name: "main", Image: "busybox"},
				{Name: "side", Image: "busybox", Env: []corev1.EnvVar{
					{Name: "SIDE", Value: "2"},
					{Name: batchv1alpha1.EnvFencingToken, Value: "12345"},
					{Name: "AFTER", Value: "3"},
				}},
			},
		},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func podLabel(k, v string) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.Labels[k] = v }
}

func podAnnotate(k, v string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[k] = v
	}
}

// ownedBy gives the Pod an owner; a controller if controller is true. The owner need not exist:
// no garbage collector runs here.
func ownedBy(apiVersion, kind string, controller bool) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.OwnerReferences = append(p.OwnerReferences, metav1.OwnerReference{APIVersion: apiVersion, Kind: kind,
			Name: "owner", UID: types.UID("owner-uid"), Controller: ptr.To(controller)})
	}
}

func gateNames(p *corev1.Pod) []string {
	var names []string
	for _, g := range p.Spec.SchedulingGates {
		names = append(names, g.Name)
	}
	return names
}

// TestGuardedPodIsCreatedGatedWithTheLockEnv: a labelled Pod without an owner gets the scheduling gate, and every
// container and init container the four variables; a container's own entry of one of them is
// replaced by ours, the others come after its own.
func TestGuardedPodIsCreatedGatedWithTheLockEnv(t *testing.T) {
	eachPath(t, func(t *testing.T, k8s client.Client) {
		g := NewWithT(t)
		p := guardedPod()
		g.Expect(k8s.Create(context.Background(), p)).To(Succeed())

		got := &corev1.Pod{}
		g.Expect(k8s.Get(context.Background(), client.ObjectKeyFromObject(p), got)).To(Succeed())
		g.Expect(gateNames(got)).To(Equal([]string{batchv1alpha1.SchedulingGateGuard}))
		g.Expect(got.Status.Conditions).To(ContainElement(And(
			HaveField("Type", corev1.PodScheduled), HaveField("Reason", corev1.PodReasonSchedulingGated))),
			"the API server itself reports the Pod gated")
		g.Expect(got.Spec.InitContainers[0].Env).To(Equal(lockEnv))
		g.Expect(got.Spec.InitContainers[1].Env).To(Equal(append([]corev1.EnvVar{{Name: "INIT", Value: "1"}}, lockEnv...)))
		g.Expect(got.Spec.Containers[0].Env).To(Equal(lockEnv))
		g.Expect(got.Spec.Containers[1].Env).To(Equal(append([]corev1.EnvVar{{Name: "SIDE", Value: "2"}, lockEnv[0], {Name: "AFTER", Value: "3"}}, lockEnv[1:]...)),
			"the container's own token is replaced where it stood")
	})
}

// TestGuardKeepsGatesItDoesNotOwn: another controller's gate stays beside ours, and a Pod that names
// our gate already keeps one of it.
func TestGuardKeepsGatesItDoesNotOwn(t *testing.T) {
	eachPath(t, func(t *testing.T, k8s client.Client) {
		for name, tc := range map[string]struct {
			gates []string
			want  []string
		}{
			"another gate": {gates: []string{"example.com/quota"}, want: []string{"example.com/quota", batchv1alpha1.SchedulingGateGuard}},
			"ours already": {gates: []string{batchv1alpha1.SchedulingGateGuard}, want: []string{batchv1alpha1.SchedulingGateGuard}},
		} {
			t.Run(name, func(t *testing.T) {
				g := NewWithT(t)
				p := guardedPod(func(p *corev1.Pod) {
					for _, n := range tc.gates {
						p.Spec.SchedulingGates = append(p.Spec.SchedulingGates, corev1.PodSchedulingGate{Name: n})
					}
				})
				g.Expect(k8s.Create(context.Background(), p, client.DryRunAll)).To(Succeed())
				g.Expect(gateNames(p)).To(Equal(tc.want))
			})
		}
	})
}

// TestWhichPodsTheGuardGates: a labelled Pod is gated unless a batch/v1 Job controls it (a guarded
// Job's pods are the Job path's); another controller (an Argo Workflow, a Tekton TaskRun) leaves it
// on the Pod path, and so does a Job that owns it without controlling it. A Pod without the lock
// label is created as sent.
func TestWhichPodsTheGuardGates(t *testing.T) {
	eachPath(t, func(t *testing.T, k8s client.Client) {
		for name, tc := range map[string]struct {
			pod   *corev1.Pod
			gated bool
		}{
			"no owner":                    {pod: guardedPod(), gated: true},
			"a Workflow's pod":            {pod: guardedPod(ownedBy("argoproj.io/v1alpha1", "Workflow", true)), gated: true},
			"a TaskRun's pod":             {pod: guardedPod(ownedBy("tekton.dev/v1", "TaskRun", true)), gated: true},
			"a Job that is no controller": {pod: guardedPod(ownedBy("batch/v1", "Job", false)), gated: true},
			"a Job of another group":      {pod: guardedPod(ownedBy("example.com/v1", "Job", true)), gated: true},
			"a Job's pod":                 {pod: guardedPod(ownedBy("batch/v1", "Job", true))},
			"a Job's pod a Workflow owns": {pod: guardedPod(ownedBy("argoproj.io/v1alpha1", "Workflow", false), ownedBy("batch/v1", "Job", true))},
			"no lock label, a Workflow's": {pod: guardedPod(ownedBy("argoproj.io/v1alpha1", "Workflow", true),
				func(p *corev1.Pod) { delete(p.Labels, batchv1alpha1.LabelGuardLock) })},
			"no lock label": {pod: guardedPod(func(p *corev1.Pod) { delete(p.Labels, batchv1alpha1.LabelGuardLock) })},
		} {
			t.Run(name, func(t *testing.T) {
				g := NewWithT(t)
				g.Expect(k8s.Create(context.Background(), tc.pod, client.DryRunAll)).To(Succeed())
				if tc.gated {
					g.Expect(gateNames(tc.pod)).To(Equal([]string{batchv1alpha1.SchedulingGateGuard}))
					g.Expect(tc.pod.Spec.Containers[0].Env).To(Equal(lockEnv))
					return
				}
				g.Expect(tc.pod.Spec.SchedulingGates).To(BeEmpty())
				g.Expect(tc.pod.Spec.Containers[0].Env).To(BeEmpty())
			})
		}
	})
}

// TestGuardRefusesPodsItCannotGuard: each Pod is refused at CREATE with a message that names the
// field at fault.
func TestGuardRefusesPodsItCannotGuard(t *testing.T) {
	eachPath(t, func(t *testing.T, k8s client.Client) {
		const lockLabel = "metadata.labels['" + batchv1alpha1.LabelGuardLock + "']"
		for name, tc := range map[string]struct {
			opt  func(*corev1.Pod)
			want string
		}{
			"bound to a node at creation": {func(p *corev1.Pod) { p.Spec.NodeName = "node-1" }, "spec.nodeName must not be set"},
			"a fence brought along": {podAnnotate(batchv1alpha1.AnnotationFencingToken, "17"),
				"metadata.annotations['" + batchv1alpha1.AnnotationFencingToken + "'] must not be set when a Pod"},
			"a guard state brought along": {podAnnotate(batchv1alpha1.AnnotationGuard, "Released"),
				"metadata.annotations['" + batchv1alpha1.AnnotationGuard + "'] must not be set"},
			"a lock name with upper case": {podLabel(batchv1alpha1.LabelGuardLock, "DB"), lockLabel + " must be a lock name"},
			"a scope in lower case": {podAnnotate(batchv1alpha1.AnnotationGuardScope, "cluster"),
				"metadata.annotations['" + batchv1alpha1.AnnotationGuardScope + "'] must be Namespace or Cluster"},
			"a priority above 1000": {podAnnotate(batchv1alpha1.AnnotationGuardPriority, "1001"),
				"metadata.annotations['" + batchv1alpha1.AnnotationGuardPriority + "'] must be an integer"},
			"a ttl in days": {podAnnotate(batchv1alpha1.AnnotationGuardTTL, "1d"),
				"metadata.annotations['" + batchv1alpha1.AnnotationGuardTTL + "'] must be a Go duration"},
			"an on-lock-lost in lower case": {podAnnotate(batchv1alpha1.AnnotationGuardOnLockLost, "delete"),
				"metadata.annotations['" + batchv1alpha1.AnnotationGuardOnLockLost + "'] must be Suspend, Delete or Ignore"},
			"a Kueue queue": {podLabel("kueue.x-k8s.io/queue-name", "batch"),
				"metadata.labels['kueue.x-k8s.io/queue-name'] and " + lockLabel + " are not supported together yet"},
		} {
			t.Run(name, func(t *testing.T) {
				g := NewWithT(t)
				g.Expect(k8s.Create(context.Background(), guardedPod(tc.opt))).To(MatchError(ContainSubstring(tc.want)))
			})
		}
	})
}

// ungate is the operator's write: the fence, lock, holder and slot in the Pod's annotations and the
// gate removed, in one merge patch with the resourceVersion read.
func ungate(ctx context.Context, k8s client.Client, p *corev1.Pod) error {
	base := p.DeepCopy()
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations[batchv1alpha1.AnnotationFencingToken] = "1780000000000001"
	p.Annotations[batchv1alpha1.AnnotationLock] = "db-migrate"
	p.Annotations[batchv1alpha1.AnnotationHolder] = "c/default/pod:" + p.Name + "/uid"
	p.Annotations[batchv1alpha1.AnnotationSlot] = "0"
	p.Spec.SchedulingGates = withoutGuardGate(p.Spec.SchedulingGates)
	return k8s.Patch(ctx, p, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
}

func withoutGuardGate(gates []corev1.PodSchedulingGate) []corev1.PodSchedulingGate {
	var out []corev1.PodSchedulingGate
	for _, g := range gates {
		if g.Name != batchv1alpha1.SchedulingGateGuard {
			out = append(out, g)
		}
	}
	return out
}

// TestUngatingWritesTheFenceInOneWrite: the facts the operator's one write stands on, on the real
// API server. A gated Pod whose env reads annotations it does not have is let in (above); its
// annotations may be written and its gate removed in one patch; once ungated, a gate cannot be
// added back (which is why a Pod cannot be suspended); and a Pod being deleted that was never bound
// can no longer be bound, so it never runs.
func TestUngatingWritesTheFenceInOneWrite(t *testing.T) {
	eachPath(t, func(t *testing.T, k8s client.Client) {
		g := NewWithT(t)
		ctx := context.Background()
		p := guardedPod(func(p *corev1.Pod) {
			p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "example.com/quota"}}
			p.Finalizers = []string{batchv1alpha1.FinalizerReleaseLock}
		})
		g.Expect(k8s.Create(ctx, p)).To(Succeed())
		g.Expect(ungate(ctx, k8s, p)).To(Succeed())
		got := &corev1.Pod{}
		g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(p), got)).To(Succeed())
		g.Expect(gateNames(got)).To(Equal([]string{"example.com/quota"}), "only our gate goes")
		g.Expect(got.Annotations).To(HaveKeyWithValue(batchv1alpha1.AnnotationFencingToken, "1780000000000001"))

		regate := got.DeepCopy()
		regate.Spec.SchedulingGates = append(regate.Spec.SchedulingGates, corev1.PodSchedulingGate{Name: batchv1alpha1.SchedulingGateGuard})
		g.Expect(k8s.Update(ctx, regate)).To(MatchError(ContainSubstring("spec.schedulingGates")), "a gate cannot be added back")

		g.Expect(k8s.Delete(ctx, got)).To(Succeed())
		binding := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: got.Name, Namespace: got.Namespace},
			Target: corev1.ObjectReference{Kind: "Node", Name: "node-1"}}
		g.Expect(k8s.SubResource("binding").Create(ctx, got, binding)).To(MatchError(ContainSubstring("being deleted")),
			"a Pod being deleted is never bound")

		g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(p), got)).To(Succeed())
		base := got.DeepCopy()
		got.Finalizers = nil
		g.Expect(k8s.Patch(ctx, got, client.MergeFrom(base))).To(Succeed(), "the finalizer's removal is let in")
	})
}

// TestGuardRefusesChangesToAGuardedPod: on UPDATE the lock label and scope are fixed, the gate goes
// only in the write that gives the Pod its fence, the fence is fixed once written, and a guarded
// Pod gains no batch/v1 Job as controller (it would leave the Pod path); any other controller may
// adopt it.
func TestGuardRefusesChangesToAGuardedPod(t *testing.T) {
	eachPath(t, func(t *testing.T, k8s client.Client) {
		const fence = "metadata.annotations['" + batchv1alpha1.AnnotationFencingToken + "']"
		for name, tc := range map[string]struct {
			ungated bool // the operator's write ran first
			opt     func(*corev1.Pod)
			want    string // empty: the update is let in
		}{
			"another lock": {opt: podLabel(batchv1alpha1.LabelGuardLock, "db-backup"),
				want: "metadata.labels['" + batchv1alpha1.LabelGuardLock + "'] must not change or be removed"},
			"the lock label taken off": {opt: func(p *corev1.Pod) { delete(p.Labels, batchv1alpha1.LabelGuardLock) },
				want: "must not change or be removed"},
			"scope Cluster": {opt: podAnnotate(batchv1alpha1.AnnotationGuardScope, "Cluster"),
				want: "metadata.annotations['" + batchv1alpha1.AnnotationGuardScope + "'] must not change"},
			"the gate removed alone": {opt: func(p *corev1.Pod) { p.Spec.SchedulingGates = withoutGuardGate(p.Spec.SchedulingGates) },
				want: "spec.schedulingGates: the gate " + batchv1alpha1.SchedulingGateGuard + " may be removed only in the update that writes " + fence},
			"an update after the ungating": {ungated: true, opt: podLabel("after", "ungated")},
			"the fence changed": {ungated: true, opt: podAnnotate(batchv1alpha1.AnnotationFencingToken, "1780000000000002"),
				want: fence + " must not change once written"},
			"the holder changed": {ungated: true, opt: podAnnotate(batchv1alpha1.AnnotationHolder, "someone"),
				want: "metadata.annotations['" + batchv1alpha1.AnnotationHolder + "'] must not change once written"},
			"the fence removed": {ungated: true, opt: func(p *corev1.Pod) { delete(p.Annotations, batchv1alpha1.AnnotationFencingToken) },
				want: fence + " must not change once written"},
			"a Job gained as controller": {opt: ownedBy("batch/v1", "Job", true),
				want: "metadata.ownerReferences must not gain a batch/v1 Job as controller"},
			"a Job gained as controller after the ungating": {ungated: true, opt: ownedBy("batch/v1", "Job", true),
				want: "metadata.ownerReferences must not gain a batch/v1 Job as controller"},
			"a Job gained as an owner":        {opt: ownedBy("batch/v1", "Job", false)},
			"a Workflow gained as controller": {opt: ownedBy("argoproj.io/v1alpha1", "Workflow", true)},
			"a Kueue queue added":             {opt: podLabel("kueue.x-k8s.io/queue-name", "batch"), want: "are not supported together yet"},
			"the guard state written":         {ungated: true, opt: podAnnotate(batchv1alpha1.AnnotationGuard, "Released")},
			"another label":                   {opt: podLabel("team", "a")},
			"a good priority":                 {opt: podAnnotate(batchv1alpha1.AnnotationGuardPriority, "10")},
		} {
			t.Run(name, func(t *testing.T) {
				g := NewWithT(t)
				ctx := context.Background()
				p := guardedPod()
				g.Expect(k8s.Create(ctx, p)).To(Succeed())
				if tc.ungated {
					g.Expect(ungate(ctx, k8s, p)).To(Succeed())
				}
				tc.opt(p)
				err := k8s.Update(ctx, p)
				if tc.want == "" {
					g.Expect(err).NotTo(HaveOccurred())
					return
				}
				g.Expect(err).To(MatchError(ContainSubstring(tc.want)))
			})
		}
	})
}

// TestLabelAddedToAPodByUpdateDoesNotGate: only CREATE can gate; a label added later is judged (here:
// accepted) and the reconciler marks the Pod Unguarded.
func TestLabelAddedToAPodByUpdateDoesNotGate(t *testing.T) {
	eachPath(t, func(t *testing.T, k8s client.Client) {
		g := NewWithT(t)
		ctx := context.Background()
		p := guardedPod(func(p *corev1.Pod) { delete(p.Labels, batchv1alpha1.LabelGuardLock) })
		g.Expect(k8s.Create(ctx, p)).To(Succeed())
		p.Labels = map[string]string{batchv1alpha1.LabelGuardLock: "db-migrate"}
		g.Expect(k8s.Update(ctx, p)).To(Succeed())
		g.Expect(p.Spec.SchedulingGates).To(BeEmpty())
		g.Expect(p.Spec.Containers[0].Env).To(BeEmpty())
	})
}

// TestPodGuardFailsClosed: a guarded Pod is not let in when the gate cannot run, as the API server
// holds the Pod policies, and the Pods' webhook.
func TestPodGuardFailsClosed(t *testing.T) {
	t.Run(pathPolicy, func(t *testing.T) {
		g := NewWithT(t)
		k8s := pathNamed(t, pathPolicy).k8s
		m := &admissionregistrationv1.MutatingAdmissionPolicy{}
		g.Expect(k8s.Get(context.Background(), client.ObjectKey{Name: podMutatePolicy}, m)).To(Succeed())
		g.Expect(m.Spec.FailurePolicy).To(HaveValue(Equal(admissionregistrationv1.Fail)))
		validatingFailsClosed(t, k8s, podValidatePolicy, podValidatePolicy+"-binding")
	})
	t.Run(pathWebhook, func(t *testing.T) {
		k8s := pathNamed(t, pathWebhook).k8s
		hook := webhookNamed(t, k8s, "guard-pod.lockedjob.dev")
		NewWithT(t).Expect(hook.ObjectSelector).To(Equal(&metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: batchv1alpha1.LabelGuardLock, Operator: metav1.LabelSelectorOpExists},
		}}), "the policy's objectSelector")
		validatingFailsClosed(t, k8s, podValidatePolicy, podValidatePolicy+"-binding")
	})
}
