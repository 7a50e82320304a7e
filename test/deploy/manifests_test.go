// Package deploy_test checks the ways users deploy the operator: config/default (kustomize), the
// local cluster's component config/local, and the Helm chart in dist/chart, which
// kubebuilder's Helm plugin generates from config/default. The render tests need only the
// pinned kustomize and helm in bin/ (`make kustomize helm`); install_test.go also starts a local
// control plane.
package deploy_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/lockedjob/lockedjob/test/utils"
)

const (
	operatorNS = "lockedjob-system"
	// release is the Helm release name that makes the chart's object names equal kustomize's
	// (the chart prefixes them with the release name unless it is the chart's own name).
	release = "lockedjob"
	image   = "lockedjob.local/manager:dev"
)

// helperRoles are the admin/editor/viewer ClusterRoles kubebuilder scaffolds for each kind:
// kustomize installs them, the chart only with rbac.helpers.enabled=true. The operator itself never
// uses them. One set per CRD in config/crd/bases, so a new kind needs no edit here.
var helperRoles = func() []string {
	crds, err := filepath.Glob(filepath.Join("..", "..", "config", "crd", "bases", "*.yaml"))
	if err != nil || len(crds) == 0 {
		panic(fmt.Sprintf("no CRDs in config/crd/bases: %v", err))
	}
	var roles []string
	for _, path := range crds {
		raw, err := os.ReadFile(path)
		if err != nil {
			panic(err)
		}
		var crd struct {
			Spec struct {
				Names struct {
					Singular string `json:"singular"`
				} `json:"names"`
			} `json:"spec"`
		}
		if err := utilyaml.Unmarshal(raw, &crd); err != nil || crd.Spec.Names.Singular == "" {
			panic(fmt.Sprintf("%s: no spec.names.singular: %v", path, err))
		}
		for _, role := range []string{"admin", "editor", "viewer"} {
			roles = append(roles, fmt.Sprintf("lockedjob-%s-%s-role", crd.Spec.Names.Singular, role))
		}
	}
	return roles
}()

// tools are the project's root and its pinned binaries.
type tools struct {
	root, kustomize, helm string
}

func newTools(t *testing.T) tools {
	t.Helper()
	root, err := utils.ProjectDir()
	if err != nil {
		t.Fatal(err)
	}
	tl := tools{root: root, kustomize: filepath.Join(root, "bin", "kustomize"), helm: filepath.Join(root, "bin", "helm")}
	for _, b := range []string{tl.kustomize, tl.helm} {
		if _, err := os.Stat(b); err != nil {
			t.Fatalf("%s missing: run `make kustomize helm` first (make test-unit does): %v", b, err)
		}
	}
	return tl
}

func (tl tools) run(t *testing.T, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = tl.root
	cmd.Env = append(inheritedEnv(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v\n%s%s", strings.Join(cmd.Args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// inheritedEnv is this process's environment without the variables that choose what and where
// to deploy, so a developer's own settings never leak into a test; each test sets those it needs.
// The make variables go too: under `make test-unit KUBECONFIG=...` MAKEFLAGS carries that
// assignment, and a make run by a test would take it over the test's own environment.
func inheritedEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch {
		case name == "IMG", name == "KUBECONFIG", strings.HasPrefix(name, "DEPLOY_"),
			name == "MAKEFLAGS", name == "MFLAGS", name == "MAKELEVEL", name == "MAKEOVERRIDES":
			continue
		}
		env = append(env, kv)
	}
	return env
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// overlay writes the kustomization `make deploy` builds (hack/deploy-overlay.sh) into a temp dir.
func (tl tools) overlay(t *testing.T, env ...string) string {
	t.Helper()
	dir := t.TempDir()
	env = append([]string{"IMG=" + image, "KUSTOMIZE=" + tl.kustomize}, env...)
	tl.run(t, env, "bash", filepath.Join(tl.root, "hack", "deploy-overlay.sh"), dir)
	return dir
}

func (tl tools) kustomizeBuild(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	return decode(t, tl.run(t, nil, tl.kustomize, "build", dir))
}

func (tl tools) helmTemplate(t *testing.T, sets ...string) []*unstructured.Unstructured {
	t.Helper()
	args := []string{"template", release, filepath.Join(tl.root, "dist", "chart"), "--namespace", operatorNS}
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	return decode(t, tl.run(t, nil, tl.helm, args...))
}

func decode(t *testing.T, manifests string) []*unstructured.Unstructured {
	t.Helper()
	d := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(manifests), 4096)
	var objs []*unstructured.Unstructured
	for {
		var raw json.RawMessage
		err := d.Decode(&raw)
		if errors.Is(err, io.EOF) {
			return objs
		}
		if err != nil {
			t.Fatalf("decode manifests: %v", err)
		}
		if len(raw) == 0 || string(raw) == "null" {
			continue
		}
		// Unstructured's own JSON decoding keeps integers int64, as the API machinery does.
		o := &unstructured.Unstructured{}
		if err := o.UnmarshalJSON(raw); err != nil {
			t.Fatalf("decode manifest %s: %v", raw, err)
		}
		objs = append(objs, o)
	}
}

func key(o *unstructured.Unstructured) string {
	return fmt.Sprintf("%s %s/%s", o.GetKind(), o.GetNamespace(), o.GetName())
}

func find(objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	return nil
}

// rbacOf reduces every RBAC object to what grants rights, keyed by kind, namespace and name: a
// role to the sorted set of single grants its rules expand to (so rule order and grouping do not
// matter), a binding to its roleRef and sorted subjects. Labels and annotations do not count.
func rbacOf(t *testing.T, objs []*unstructured.Unstructured) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, o := range objs {
		var grants []string
		switch o.GetKind() {
		case "Role", "ClusterRole":
			var role rbacv1.ClusterRole // a Role's fields are a subset
			fromUnstructured(t, o, &role)
			grants = expandRules(role.Rules)
			if role.AggregationRule != nil {
				grants = append(grants, fmt.Sprintf("aggregation %v", role.AggregationRule.ClusterRoleSelectors))
			}
		case "RoleBinding", "ClusterRoleBinding":
			var b rbacv1.ClusterRoleBinding
			fromUnstructured(t, o, &b)
			grants = append(grants, fmt.Sprintf("roleRef %s/%s", b.RoleRef.Kind, b.RoleRef.Name))
			for _, s := range b.Subjects {
				grants = append(grants, fmt.Sprintf("subject %s %s/%s", s.Kind, s.Namespace, s.Name))
			}
		default:
			continue
		}
		slices.Sort(grants)
		out[key(o)] = slices.Compact(grants)
	}
	return out
}

func expandRules(rules []rbacv1.PolicyRule) []string {
	var grants []string
	for _, r := range rules {
		for _, verb := range r.Verbs {
			for _, url := range r.NonResourceURLs {
				grants = append(grants, fmt.Sprintf("%s nonResourceURL %s", verb, url))
			}
			names := r.ResourceNames
			if len(names) == 0 {
				names = []string{"(any)"}
			}
			for _, g := range r.APIGroups {
				for _, res := range r.Resources {
					for _, n := range names {
						grants = append(grants, fmt.Sprintf("%s %s/%s name=%s", verb, g, res, n))
					}
				}
			}
		}
	}
	return grants
}

func fromUnstructured(t *testing.T, o *unstructured.Unstructured, into any) {
	t.Helper()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, into); err != nil {
		t.Fatalf("convert %s: %v", key(o), err)
	}
}

// diffRBAC reports every object and grant that is in one set and not the other.
func diffRBAC(want, got map[string][]string) []string {
	var out []string
	for k, w := range want {
		g, ok := got[k]
		if !ok {
			out = append(out, "missing "+k)
			continue
		}
		for _, x := range w {
			if !slices.Contains(g, x) {
				out = append(out, fmt.Sprintf("%s lacks %q", k, x))
			}
		}
		for _, x := range g {
			if !slices.Contains(w, x) {
				out = append(out, fmt.Sprintf("%s has extra %q", k, x))
			}
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			out = append(out, "extra "+k)
		}
	}
	slices.Sort(out)
	return out
}

// The chart must grant exactly what config/default grants. kubebuilder's Helm plugin used to drop
// the namespaced Role and RoleBinding for the token-key Secret (its template file name collided
// with the ClusterRole's); this is the check that keeps it from coming back.
func TestChartRBACEqualsKustomize(t *testing.T) {
	tl := newTools(t)
	want := rbacOf(t, tl.kustomizeBuild(t, tl.overlay(t, "DEPLOY_OVERLAY=config/default")))
	if len(want) < 10 {
		t.Fatalf("kustomize build config/default rendered only %d RBAC objects: %v", len(want), want)
	}
	for _, k := range []string{"Role lockedjob-system/lockedjob-manager-secret-role", "RoleBinding lockedjob-system/lockedjob-manager-secret-rolebinding"} {
		if _, ok := want[k]; !ok {
			t.Fatalf("config/default has no %s; the token-key Secret's rights are gone", k)
		}
	}

	t.Run("with the helper roles", func(t *testing.T) {
		got := rbacOf(t, tl.helmTemplate(t, "rbac.helpers.enabled=true"))
		if d := diffRBAC(want, got); len(d) > 0 {
			t.Errorf("helm template dist/chart differs from kustomize build config/default in RBAC:\n  %s", strings.Join(d, "\n  "))
		}
	})
	t.Run("default values", func(t *testing.T) {
		got := rbacOf(t, tl.helmTemplate(t))
		wantDefault := map[string][]string{}
		for k, v := range want {
			if !slices.ContainsFunc(helperRoles, func(n string) bool { return k == "ClusterRole /"+n }) {
				wantDefault[k] = v
			}
		}
		if len(wantDefault) != len(want)-len(helperRoles) {
			t.Fatalf("config/default lacks some of the helper roles %v", helperRoles)
		}
		if d := diffRBAC(wantDefault, got); len(d) > 0 {
			t.Errorf("helm template dist/chart (default values) differs from config/default without the helper roles:\n  %s", strings.Join(d, "\n  "))
		}
	})
}

// The chart's manager pod must be config/default's: same container, args, env, probes, ports,
// resources and security context. Two differences are the plugin's and harmless: it orders the
// args differently, and it states imagePullPolicy IfNotPresent, which is the API's default for a
// tagged image that is not :latest anyway.
func TestChartManagerPodEqualsKustomize(t *testing.T) {
	tl := newTools(t)
	repo, tag, _ := strings.Cut(image, ":")
	want := managerPodSpec(t, tl.kustomizeBuild(t, tl.overlay(t, "DEPLOY_OVERLAY=config/default")))
	got := managerPodSpec(t, tl.helmTemplate(t, "manager.image.repository="+repo, "manager.image.tag="+tag))
	if !reflect.DeepEqual(want, got) {
		w, _ := json.MarshalIndent(want, "", " ")
		g, _ := json.MarshalIndent(got, "", " ")
		t.Errorf("the chart's manager pod spec differs from config/default's:\nkustomize %s\nhelm      %s", w, g)
	}
}

// managerPodSpec is the pod spec of the manager Deployment in objs, with its args sorted and an
// imagePullPolicy IfNotPresent left out (the plugin's two harmless differences).
func managerPodSpec(t *testing.T, objs []*unstructured.Unstructured) map[string]any {
	t.Helper()
	d := find(objs, "Deployment", managerDeployment)
	if d == nil {
		t.Fatalf("no Deployment %s rendered", managerDeployment)
	}
	spec, _, err := unstructured.NestedMap(d.Object, "spec", "template", "spec")
	if err != nil {
		t.Fatal(err)
	}
	c := spec["containers"].([]any)[0].(map[string]any)
	args := c["args"].([]any)
	slices.SortFunc(args, func(a, b any) int { return strings.Compare(fmt.Sprint(a), fmt.Sprint(b)) })
	if c["imagePullPolicy"] == "IfNotPresent" {
		delete(c, "imagePullPolicy")
	}
	return spec
}
