package admission_test

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
)

// TestWebhookPathIsAClusterBefore136: the webhook path's API server serves no
// MutatingAdmissionPolicy v1, as a 1.35 cluster, and the validating policies of config/guard
// compile and run there (InstallGuard's probes, here again at the start of the suite).
func TestWebhookPathIsAClusterBefore136(t *testing.T) {
	g := NewWithT(t)
	k8s := pathNamed(t, pathWebhook).k8s
	err := k8s.List(context.Background(), &admissionregistrationv1.MutatingAdmissionPolicyList{})
	g.Expect(meta.IsNoMatchError(err)).To(BeTrue(), "MutatingAdmissionPolicy v1 is served: %v", err)
	g.Expect(k8s.List(context.Background(), &admissionregistrationv1.ValidatingAdmissionPolicyList{})).To(Succeed())
}

// TestGateIsReadyWithItsOwnCertificate: the manager's gate is ready (its /readyz check) once the
// rotator wrote its CA and serving certificate into the one Secret and the CA into the webhook
// configuration.
func TestGateIsReadyWithItsOwnCertificate(t *testing.T) {
	g := NewWithT(t)
	p := pathNamed(t, pathWebhook)
	g.Expect(ready(p.gate)).To(Succeed())
	s := &corev1.Secret{}
	g.Expect(p.k8s.Get(context.Background(), client.ObjectKey{Namespace: webhookNamespace, Name: webhookSecret}, s)).To(Succeed())
	g.Expect(s.Data).To(HaveKey("tls.crt"))
	g.Expect(s.Data).To(HaveKey("tls.key"))
	c := &admissionregistrationv1.MutatingWebhookConfiguration{}
	g.Expect(p.k8s.Get(context.Background(), client.ObjectKey{Name: webhookConfiguration}, c)).To(Succeed())
	for _, h := range c.Webhooks {
		g.Expect(h.ClientConfig.CABundle).To(Equal(s.Data["ca.crt"]), h.Name)
	}
}

// TestBothPathsGateAlike: the same Jobs and Pods, created on both paths, come out the same: the
// webhook is the policies' rule (internal/guardgate), not a second one.
func TestBothPathsGateAlike(t *testing.T) {
	type gated struct {
		Suspend        *bool
		Gates          []corev1.PodSchedulingGate
		InitContainers []corev1.Container
		Containers     []corev1.Container
	}
	ctx := context.Background()
	for name, obj := range map[string]client.Object{
		"a guarded Job":     guardedJob(),
		"a LockedJob's Job": guardedJob(unguard, label(batchv1alpha1.LabelLockedJob, "nightly")),
		"an unlabelled Job": guardedJob(unguard),
		"a Job only with env of ours": guardedJob(func(j *batchv1.Job) {
			j.Spec.Template.Spec.Containers[0].Env = []corev1.EnvVar{{Name: batchv1alpha1.EnvSlot, Value: "1"}, {Name: batchv1alpha1.EnvSlot, Value: "2"}}
		}),
		"a guarded Pod":    guardedPod(),
		"a Workflow's Pod": guardedPod(ownedBy("argoproj.io/v1alpha1", "Workflow", true)),
		"a Job's Pod":      guardedPod(ownedBy("batch/v1", "Job", true)),
		"a Pod with another gate": guardedPod(func(p *corev1.Pod) {
			p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "example.com/quota"}}
		}),
		"a Pod with a repeated name of ours": guardedPod(func(p *corev1.Pod) {
			p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: batchv1alpha1.EnvLock, Value: "a"}, {Name: "X", Value: "x"}, {Name: batchv1alpha1.EnvLock, Value: "b"}}
		}),
		"an unlabelled Pod": guardedPod(func(p *corev1.Pod) { delete(p.Labels, batchv1alpha1.LabelGuardLock) }),
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			var results []gated
			for _, p := range paths {
				o := obj.DeepCopyObject().(client.Object)
				g.Expect(p.k8s.Create(ctx, o, client.DryRunAll)).To(Succeed(), p.name)
				switch o := o.(type) {
				case *batchv1.Job:
					s := o.Spec.Template.Spec
					results = append(results, gated{Suspend: o.Spec.Suspend, InitContainers: s.InitContainers, Containers: s.Containers})
				case *corev1.Pod:
					results = append(results, gated{Gates: o.Spec.SchedulingGates, InitContainers: o.Spec.InitContainers, Containers: o.Spec.Containers})
				}
			}
			g.Expect(results).To(HaveLen(2))
			if d := cmp.Diff(results[0], results[1]); d != "" {
				t.Errorf("(-policy,+webhook):\n%s", d)
			}
		})
	}
}

// TestWebhookFailsClosed: while no replica answers, a labelled Job is refused and an unlabelled
// one is created as sent (the objectSelector keeps it off the path). A second configuration of
// the same webhook, pointed at a port where nothing listens, stands for the replicas gone.
func TestWebhookFailsClosed(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	k8s := pathNamed(t, pathWebhook).k8s
	port, err := freePort()
	g.Expect(err).NotTo(HaveOccurred())
	dead := loopback(webhookConfig, port)
	dead.SetName("guard-webhook-down")
	g.Expect(k8s.Create(ctx, dead)).To(Succeed())
	defer func() {
		// The tests after this one want the gate back.
		g.Expect(k8s.Delete(ctx, dead)).To(Succeed())
		g.Eventually(func() error { return k8s.Create(ctx, guardedJob(), client.DryRunAll) }).WithTimeout(timeout).Should(Succeed())
	}()

	g.Eventually(func() error { return k8s.Create(ctx, guardedJob(), client.DryRunAll) }).
		WithTimeout(timeout).Should(MatchError(ContainSubstring("failed calling webhook")))
	g.Expect(k8s.Create(ctx, guardedPod(), client.DryRunAll)).To(MatchError(ContainSubstring("failed calling webhook")))
	g.Expect(k8s.Create(ctx, guardedJob(unguard), client.DryRunAll)).To(Succeed())
	g.Expect(k8s.Create(ctx, guardedJob(label(batchv1alpha1.LabelLockedJob, "nightly"), unguard), client.DryRunAll)).To(Succeed())
}
