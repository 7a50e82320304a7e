package deploy_test

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/lockedjob/lockedjob/internal/webhook"
)

// nameFlags are the manager's flags that name the guard webhook's objects: the chart passes them
// on the webhook path (its names follow the release); kustomize's objects have their defaults.
var nameFlags = map[string]string{
	"Secret":                       "--webhook-secret-name=",
	"Service":                      "--webhook-service-name=",
	"MutatingWebhookConfiguration": "--webhook-configuration-name=",
}

// TestChartGuardAdmission: the chart's guard.admission renders the gate's path as kustomize builds
// it. policy (the default): config/default's objects; webhook: config/overlays/guard-webhook's,
// the webhook configuration, its Service, Secret, PodDisruptionBudget and the manager pod spec
// equal to the overlay's, the mutating policies and their bindings gone, the validating ones
// kept, RBAC equal. The chart leaves the Namespace to helm and the CRD helper roles to
// rbac.helpers.enabled, on both paths.
func TestChartGuardAdmission(t *testing.T) {
	tl := newTools(t)
	repo, tag, _ := strings.Cut(image, ":")
	for name, tc := range map[string]struct {
		overlay string
		sets    []string
	}{
		"policy by default":     {overlay: "config/default"},
		"policy named":          {overlay: "config/default", sets: []string{"guard.admission=policy"}},
		"webhook":               {overlay: "config/overlays/guard-webhook", sets: []string{"guard.admission=webhook"}},
		"webhook, helper roles": {overlay: "config/overlays/guard-webhook", sets: []string{"guard.admission=webhook", "rbac.helpers.enabled=true"}},
	} {
		t.Run(name, func(t *testing.T) {
			want := tl.kustomizeBuild(t, tl.overlay(t, "DEPLOY_OVERLAY="+tc.overlay))
			helpers := slices.Contains(tc.sets, "rbac.helpers.enabled=true")
			got := tl.helmTemplate(t, append([]string{"manager.image.repository=" + repo, "manager.image.tag=" + tag}, tc.sets...)...)

			var wantNames []string
			for _, o := range want {
				if o.GetKind() == "Namespace" || (!helpers && o.GetKind() == "ClusterRole" && slices.Contains(helperRoles, o.GetName())) {
					continue
				}
				wantNames = append(wantNames, o.GetKind()+" "+o.GetName())
			}
			if g, w := kindNames(got), sorted(wantNames); !slices.Equal(g, w) {
				t.Errorf("helm template renders\n  %s\nwant the objects of kustomize build %s\n  %s", strings.Join(g, "\n  "), tc.overlay, strings.Join(w, "\n  "))
			}

			wantRBAC := rbacOf(t, want)
			if !helpers {
				for _, r := range helperRoles {
					delete(wantRBAC, "ClusterRole /"+r)
				}
			}
			if d := diffRBAC(wantRBAC, rbacOf(t, got)); len(d) > 0 {
				t.Errorf("the chart's RBAC differs from kustomize build %s:\n  %s", tc.overlay, strings.Join(d, "\n  "))
			}

			// The webhook path's own objects, field for field but their labels.
			for _, kind := range []string{"MutatingWebhookConfiguration", "Service", "Secret", "PodDisruptionBudget"} {
				for _, w := range want {
					if w.GetKind() != kind || w.GetName() == "lockedjob-controller-manager-metrics-service" {
						continue
					}
					g := find(got, kind, w.GetName())
					if g == nil {
						continue // reported above
					}
					if a, b := withoutLabels(w), withoutLabels(g); !reflect.DeepEqual(a, b) {
						t.Errorf("%s differs from kustomize's:\nkustomize %s\nhelm      %s", key(w), a, b)
					}
				}
			}

			wantPod, gotPod := managerPodSpec(t, want), managerPodSpec(t, got)
			if tc.overlay != "config/default" {
				// The chart names the webhook's objects by release, and says so in flags whose
				// defaults are kustomize's names: with release "lockedjob" they are the same.
				c := gotPod["containers"].([]any)[0].(map[string]any)
				var args []any
				for _, a := range c["args"].([]any) {
					for _, flag := range nameFlags {
						if v, ok := strings.CutPrefix(a.(string), flag); ok {
							if !slices.Contains([]string{webhook.DefaultSecretName, webhook.DefaultServiceName, webhook.DefaultConfigurationName}, v) {
								t.Errorf("%s names %q, not the manager's default for release %s", flag, v, release)
							}
							a = nil
							break
						}
					}
					if a != nil {
						args = append(args, a)
					}
				}
				if n := len(c["args"].([]any)) - len(args); n != len(nameFlags) {
					t.Errorf("the chart passes %d of the %d name flags: %v", n, len(nameFlags), c["args"])
				}
				c["args"] = args
			}
			if !reflect.DeepEqual(wantPod, gotPod) {
				w, _ := json.MarshalIndent(wantPod, "", " ")
				g, _ := json.MarshalIndent(gotPod, "", " ")
				t.Errorf("the chart's manager pod spec differs from kustomize build %s:\nkustomize %s\nhelm      %s", tc.overlay, w, g)
			}
			if w, g := replicas(t, want), replicas(t, got); w != g {
				t.Errorf("the chart's manager runs %d replicas, kustomize build %s %d", g, tc.overlay, w)
			}
		})
	}
}

// TestChartGuardWebhookFollowsTheRelease: under another release name the chart's webhook objects
// take the release's names, and the manager's flags, the rotation's roles and the webhook
// configuration's Service name those, not kustomize's.
func TestChartGuardWebhookFollowsTheRelease(t *testing.T) {
	tl := newTools(t)
	out := tl.run(t, nil, tl.helm, "template", "other", filepath.Join(tl.root, "dist", "chart"), "--namespace", "elsewhere",
		"--set", "guard.admission=webhook", "--set", "manager.replicas=3")
	objs := decode(t, out)
	names := map[string]string{}
	for kind := range nameFlags {
		var found []string
		for _, o := range objs {
			if o.GetKind() == kind && strings.Contains(o.GetName(), "webhook") {
				found = append(found, o.GetName())
			}
		}
		if len(found) != 1 || !strings.HasPrefix(found[0], "other-lockedjob-") {
			t.Fatalf("%s of the webhook: %v, want one named after release other", kind, found)
		}
		names[kind] = found[0]
	}
	var dep struct {
		Spec struct {
			Replicas int `json:"replicas"`
			Template struct {
				Spec struct {
					Containers []struct {
						Args []string `json:"args"`
					} `json:"containers"`
					Volumes []struct {
						Secret *struct {
							SecretName string `json:"secretName"`
						} `json:"secret"`
					} `json:"volumes"`
				} `json:"spec"`
			} `json:"template"`
		} `json:"spec"`
	}
	fromUnstructured(t, find(objs, "Deployment", "other-lockedjob-controller-manager"), &dep)
	for kind, flag := range nameFlags {
		if !slices.Contains(dep.Spec.Template.Spec.Containers[0].Args, flag+names[kind]) {
			t.Errorf("manager args %v lack %s%s", dep.Spec.Template.Spec.Containers[0].Args, flag, names[kind])
		}
	}
	if !slices.ContainsFunc(dep.Spec.Template.Spec.Volumes, func(v struct {
		Secret *struct {
			SecretName string `json:"secretName"`
		} `json:"secret"`
	}) bool {
		return v.Secret != nil && v.Secret.SecretName == names["Secret"]
	}) {
		t.Errorf("the manager does not mount Secret %s", names["Secret"])
	}
	if dep.Spec.Replicas != 3 {
		t.Errorf("replicas %d, want manager.replicas 3 (the webhook path runs at least 2, not at most)", dep.Spec.Replicas)
	}
	rbac := rbacOf(t, objs)
	for k, want := range map[string]string{
		"Role elsewhere/other-lockedjob-guard-webhook-cert-role": "update /secrets name=" + names["Secret"],
		"ClusterRole /other-lockedjob-guard-webhook-cert-role":   "update admissionregistration.k8s.io/mutatingwebhookconfigurations name=" + names["MutatingWebhookConfiguration"],
	} {
		if !slices.Contains(rbac[k], want) {
			t.Errorf("%s grants %v, want %q", k, rbac[k], want)
		}
	}
	cfg := find(objs, "MutatingWebhookConfiguration", names["MutatingWebhookConfiguration"])
	hooks, _, _ := unstructured.NestedSlice(cfg.Object, "webhooks")
	for _, h := range hooks {
		svc, _, _ := unstructured.NestedStringMap(h.(map[string]any), "clientConfig", "service")
		if svc["name"] != names["Service"] || svc["namespace"] != "elsewhere" {
			t.Errorf("webhook %v calls Service %s/%s, want elsewhere/%s", h.(map[string]any)["name"], svc["namespace"], svc["name"], names["Service"])
		}
	}
}

// TestChartGuardAdmissionRefusesOtherValues: a value other than policy or webhook fails the
// render instead of installing no gate.
func TestChartGuardAdmissionRefusesOtherValues(t *testing.T) {
	tl := newTools(t)
	cmd := exec.Command(tl.helm, "template", release, filepath.Join(tl.root, "dist", "chart"), "--set", "guard.admission=webhooks")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), `guard.admission must be policy or webhook, not "webhooks"`) {
		t.Errorf("helm template with guard.admission=webhooks: %v\n%s", err, out)
	}
}

func kindNames(objs []*unstructured.Unstructured) []string {
	var out []string
	for _, o := range objs {
		out = append(out, o.GetKind()+" "+o.GetName())
	}
	return sorted(out)
}

func sorted(s []string) []string {
	slices.Sort(s)
	return s
}

func withoutLabels(o *unstructured.Unstructured) string {
	c := o.DeepCopy()
	c.SetLabels(nil)
	b, _ := json.Marshal(c.Object)
	return string(b)
}

func replicas(t *testing.T, objs []*unstructured.Unstructured) int64 {
	t.Helper()
	n, _, _ := unstructured.NestedInt64(find(objs, "Deployment", managerDeployment).Object, "spec", "replicas")
	return n
}
