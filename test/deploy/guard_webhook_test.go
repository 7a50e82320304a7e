package deploy_test

import (
	"fmt"
	"maps"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/internal/webhook"
)

// TestGuardWebhookOverlay: config/overlays/guard-webhook (config/default with the component
// config/components/guard-webhook) has no MutatingAdmissionPolicy, keeps the validating policies,
// and gates with a MutatingWebhookConfiguration as the policies do: failurePolicy Fail, CREATE
// only, never reinvoked, the policies' objectSelectors, through the Service in front of the
// manager's webhook port. Its objects carry the names the manager's flags default to.
func TestGuardWebhookOverlay(t *testing.T) {
	tl := newTools(t)
	objs := tl.kustomizeBuild(t, filepath.Join(tl.root, "config", "overlays", "guard-webhook"))
	kinds := map[string]int{}
	for _, o := range objs {
		kinds[o.GetKind()]++
	}
	for kind, want := range map[string]int{
		"MutatingAdmissionPolicy": 0, "MutatingAdmissionPolicyBinding": 0,
		"ValidatingAdmissionPolicy": 3, "ValidatingAdmissionPolicyBinding": 3, // Jobs, Pods, misplaced labels
		"MutatingWebhookConfiguration": 1, "PodDisruptionBudget": 1,
	} {
		if kinds[kind] != want {
			t.Errorf("%d %s, want %d", kinds[kind], kind, want)
		}
	}

	cfg := find(objs, "MutatingWebhookConfiguration", webhook.DefaultConfigurationName)
	if cfg == nil {
		t.Fatalf("no MutatingWebhookConfiguration %s", webhook.DefaultConfigurationName)
	}
	var mwc admissionregistrationv1.MutatingWebhookConfiguration
	fromUnstructured(t, cfg, &mwc)
	lock := metav1.LabelSelectorRequirement{Key: batchv1alpha1.LabelGuardLock, Operator: metav1.LabelSelectorOpExists}
	notLockedJob := metav1.LabelSelectorRequirement{Key: batchv1alpha1.LabelLockedJob, Operator: metav1.LabelSelectorOpDoesNotExist}
	wantSelector := map[string][]metav1.LabelSelectorRequirement{"jobs": {lock, notLockedJob}, "pods": {lock}}
	if len(mwc.Webhooks) != len(wantSelector) {
		t.Fatalf("%d webhooks, want %d", len(mwc.Webhooks), len(wantSelector))
	}
	for _, h := range mwc.Webhooks {
		if h.FailurePolicy == nil || *h.FailurePolicy != admissionregistrationv1.Fail {
			t.Errorf("%s: failurePolicy %v, want Fail", h.Name, h.FailurePolicy)
		}
		if h.SideEffects == nil || *h.SideEffects != admissionregistrationv1.SideEffectClassNone {
			t.Errorf("%s: sideEffects %v, want None", h.Name, h.SideEffects)
		}
		if h.ReinvocationPolicy == nil || *h.ReinvocationPolicy != admissionregistrationv1.NeverReinvocationPolicy {
			t.Errorf("%s: reinvocationPolicy %v, want Never", h.Name, h.ReinvocationPolicy)
		}
		if len(h.Rules) != 1 || !slices.Equal(h.Rules[0].Operations, []admissionregistrationv1.OperationType{admissionregistrationv1.Create}) ||
			len(h.Rules[0].Resources) != 1 {
			t.Errorf("%s: rules %+v, want CREATE of one resource", h.Name, h.Rules)
			continue
		}
		want, ok := wantSelector[h.Rules[0].Resources[0]]
		if !ok || h.ObjectSelector == nil || !reflect.DeepEqual(h.ObjectSelector.MatchExpressions, want) || len(h.ObjectSelector.MatchLabels) != 0 {
			t.Errorf("%s: objectSelector %+v, want %+v", h.Name, h.ObjectSelector, want)
		}
		svc := h.ClientConfig.Service
		if svc == nil || svc.Name != webhook.DefaultServiceName || svc.Namespace != operatorNS {
			t.Errorf("%s: clientConfig.service %+v, want %s/%s", h.Name, svc, operatorNS, webhook.DefaultServiceName)
		}
	}

	if find(objs, "Secret", webhook.DefaultSecretName) == nil {
		t.Errorf("no Secret %s for the rotator to fill", webhook.DefaultSecretName)
	}
	var svc corev1.Service
	if o := find(objs, "Service", webhook.DefaultServiceName); o == nil {
		t.Fatalf("no Service %s", webhook.DefaultServiceName)
	} else {
		fromUnstructured(t, o, &svc)
	}
	var dep appsv1.Deployment
	fromUnstructured(t, find(objs, "Deployment", managerDeployment), &dep)
	pod := dep.Spec.Template.Spec
	c := pod.Containers[0]
	if !slices.Contains(c.Args, "--guard-admission=webhook") {
		t.Errorf("manager args %v lack --guard-admission=webhook", c.Args)
	}
	if !slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool {
		return p.ContainerPort == int32(webhook.DefaultPort) && svc.Spec.Ports[0].TargetPort.IntValue() == webhook.DefaultPort
	}) {
		t.Errorf("the Service's target port %v is not the manager's webhook port %d (%v)", svc.Spec.Ports, webhook.DefaultPort, c.Ports)
	}
	if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == webhook.DefaultCertDir }) ||
		!slices.ContainsFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Secret != nil && v.Secret.SecretName == webhook.DefaultSecretName }) {
		t.Errorf("the Secret %s is not mounted at %s: %v %v", webhook.DefaultSecretName, webhook.DefaultCertDir, c.VolumeMounts, pod.Volumes)
	}
	if dep.Spec.Replicas == nil || *dep.Spec.Replicas < 2 {
		t.Errorf("replicas %v: a single replica leaves no one to gate during its rollout", dep.Spec.Replicas)
	}
}

// TestGuardWebhookRBACIsScoped: the webhook variant grants config/default's RBAC and, beside it,
// only what the certificate rotation needs, bound to the manager's ServiceAccount: writes by name
// on the one Secret and the one webhook configuration, reads (list and watch, which RBAC cannot
// narrow by name for an informer) of Secrets in the operator's namespace only and of webhook
// configurations. The policy path gains nothing.
func TestGuardWebhookRBACIsScoped(t *testing.T) {
	tl := newTools(t)
	base := rbacOf(t, tl.kustomizeBuild(t, tl.overlay(t, "DEPLOY_OVERLAY=config/default")))
	got := rbacOf(t, tl.kustomizeBuild(t, filepath.Join(tl.root, "config", "overlays", "guard-webhook")))
	const (
		role    = "lockedjob-guard-webhook-cert-role"
		binding = "lockedjob-guard-webhook-cert-rolebinding"
	)
	subject := fmt.Sprintf("subject ServiceAccount %s/lockedjob-controller-manager", operatorNS)
	want := maps.Clone(base)
	want["Role "+operatorNS+"/"+role] = []string{
		"get /secrets name=" + webhook.DefaultSecretName,
		"list /secrets name=(any)",
		"update /secrets name=" + webhook.DefaultSecretName,
		"watch /secrets name=(any)",
	}
	want["RoleBinding "+operatorNS+"/"+binding] = []string{"roleRef Role/" + role, subject}
	want["ClusterRole /"+role] = []string{
		"get admissionregistration.k8s.io/mutatingwebhookconfigurations name=" + webhook.DefaultConfigurationName,
		"list admissionregistration.k8s.io/mutatingwebhookconfigurations name=(any)",
		"update admissionregistration.k8s.io/mutatingwebhookconfigurations name=" + webhook.DefaultConfigurationName,
		"watch admissionregistration.k8s.io/mutatingwebhookconfigurations name=(any)",
	}
	want["ClusterRoleBinding /"+binding] = []string{"roleRef ClusterRole/" + role, subject}
	if d := diffRBAC(want, got); len(d) > 0 {
		t.Errorf("the webhook variant's RBAC differs from config/default's plus the rotation's:\n%s", strings.Join(d, "\n"))
	}
	for k, grants := range base {
		for _, g := range grants {
			if strings.Contains(g, "mutatingwebhookconfigurations") || strings.Contains(g, webhook.DefaultSecretName) {
				t.Errorf("config/default grants %s %q: the policy path must not", k, g)
			}
		}
	}
}

// TestDeployOverlayOfTheWebhookVariant: `make deploy DEPLOY_OVERLAY=config/overlays/guard-webhook`
// (and `make undeploy` given the same) builds the objects of config/overlays/guard-webhook, with
// the image IMG, so undeploy removes the webhook configuration that would otherwise refuse every
// labelled Job and Pod once its manager is gone.
func TestDeployOverlayOfTheWebhookVariant(t *testing.T) {
	tl := newTools(t)
	want := tl.kustomizeBuild(t, filepath.Join(tl.root, "config", "overlays", "guard-webhook"))
	got := tl.kustomizeBuild(t, tl.overlay(t, "DEPLOY_OVERLAY=config/overlays/guard-webhook"))
	names := func(objs []*unstructured.Unstructured) []string {
		var out []string
		for _, o := range objs {
			out = append(out, o.GetKind()+" "+o.GetNamespace()+"/"+o.GetName())
		}
		slices.Sort(out)
		return out
	}
	if g, w := names(got), names(want); !slices.Equal(g, w) {
		t.Fatalf("the deploy overlay builds\n%v\nwant the objects of config/overlays/guard-webhook\n%v", g, w)
	}
	dep := find(got, "Deployment", "lockedjob-controller-manager")
	if dep == nil {
		t.Fatal("no Deployment lockedjob-controller-manager")
	}
	containers, _, _ := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "containers")
	if len(containers) == 0 || containers[0].(map[string]any)["image"] != image {
		t.Fatalf("the manager's image is not %s: %v", image, containers)
	}
}
