package deploy_test

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// localValues are per-cluster values given explicitly, as the local cluster would supply them.
var localValues = []string{
	"DEPLOY_OVERLAY=config/local",
	"DEPLOY_APISERVER_PORT=32443",
	"DEPLOY_NODE_IP=10.200.7.1",
	"DEPLOY_REDIS_ADDR=127.0.0.1:32479",
	"DEPLOY_PROBE_PORT=18081",
	"DEPLOY_METRICS_PORT=18443",
}

// config/local must change nothing but what the local cluster lacks: apply exactly those changes
// to config/default's Deployment and metrics Service and the two builds must be equal, object for
// object.
func TestLocalOverlayChangesOnlyWhatTheLocalClusterLacks(t *testing.T) {
	tl := newTools(t)
	def := tl.kustomizeBuild(t, tl.overlay(t, "DEPLOY_OVERLAY=config/default"))
	local := tl.kustomizeBuild(t, tl.overlay(t, localValues...))

	if find(local, "ConfigMap", "local-cluster") != nil {
		t.Errorf("the local-cluster values ConfigMap is local-config and must not be emitted")
	}
	dep := find(def, "Deployment", "lockedjob-controller-manager")
	svc := find(def, "Service", "lockedjob-controller-manager-metrics-service")
	if dep == nil || svc == nil {
		t.Fatalf("config/default has no manager Deployment or metrics Service")
	}
	localChanges(t, dep, svc)

	if len(def) != len(local) {
		t.Errorf("config/default has %d objects, config/local %d", len(def), len(local))
	}
	for _, want := range def {
		got := find(local, want.GetKind(), want.GetName())
		if got == nil {
			t.Errorf("config/local lacks %s", key(want))
			continue
		}
		if !reflect.DeepEqual(want.Object, got.Object) {
			t.Errorf("%s differs beyond the local-cluster changes:\nwant %v\ngot  %v", key(want), want.Object, got.Object)
		}
	}
}

// localChanges applies to config/default's objects what docs/deploy.md says config/local changes.
func localChanges(t *testing.T, dep, svc *unstructured.Unstructured) {
	t.Helper()
	dep.Object["spec"].(map[string]any)["strategy"] = map[string]any{"type": "Recreate"}
	spec := dep.Object["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
	spec["hostNetwork"] = true
	spec["dnsPolicy"] = "Default"
	spec["nodeSelector"] = map[string]any{"lockedjob.dev/real-node": "true"}
	spec["tolerations"] = []any{map[string]any{
		"key": "lockedjob.dev/real-node", "operator": "Equal", "value": "true", "effect": "NoSchedule",
	}}
	c := spec["containers"].([]any)[0].(map[string]any)
	if c["name"] != "manager" {
		t.Fatalf("first container of the Deployment is %v, not manager", c["name"])
	}
	c["imagePullPolicy"] = "Never"
	args := c["args"].([]any)
	for i, a := range args {
		switch a {
		case "--metrics-bind-address=:8443":
			args[i] = "--metrics-bind-address=10.200.7.1:18443"
		case "--health-probe-bind-address=:8081":
			args[i] = "--health-probe-bind-address=10.200.7.1:18081"
		}
	}
	env := c["env"].([]any)
	for _, e := range env {
		if e := e.(map[string]any); e["name"] == "LOCKEDJOB_REDIS_ADDR" {
			e["value"] = "127.0.0.1:32479"
		}
	}
	c["env"] = append(env,
		map[string]any{"name": "KUBERNETES_SERVICE_HOST", "value": "127.0.0.1"},
		map[string]any{"name": "KUBERNETES_SERVICE_PORT", "value": "32443"})
	c["ports"].([]any)[0].(map[string]any)["containerPort"] = int64(18081)
	c["livenessProbe"].(map[string]any)["httpGet"].(map[string]any)["port"] = int64(18081)
	c["readinessProbe"].(map[string]any)["httpGet"].(map[string]any)["port"] = int64(18081)
	svc.Object["spec"].(map[string]any)["ports"].([]any)[0].(map[string]any)["targetPort"] = int64(18443)
}

// The overlay refuses what it cannot deploy rather than writing a broken kustomization.
func TestDeployOverlayRefusesBadInput(t *testing.T) {
	tl := newTools(t)
	script := filepath.Join(tl.root, "hack", "deploy-overlay.sh")
	for name, tc := range map[string]struct {
		env  []string
		want string
	}{
		"no image":           {env: []string{"IMG="}, want: "IMG is not set"},
		"unknown overlay":    {env: []string{"IMG=x:1", "DEPLOY_OVERLAY=config/manager"}, want: "must be config/default, config/local or config/overlays/guard-webhook"},
		"bad port":           {env: append([]string{"IMG=x:1"}, append(localValues, "DEPLOY_PROBE_PORT=80a")...), want: "not a port number: 80a"},
		"redis without port": {env: append([]string{"IMG=x:1"}, append(localValues, "DEPLOY_REDIS_ADDR=redis")...), want: "host:port"},
	} {
		t.Run(name, func(t *testing.T) {
			cmd := exec.Command("bash", script, t.TempDir())
			cmd.Env = append(append(inheritedEnv(), "KUSTOMIZE="+tl.kustomize), tc.env...)
			out, err := cmd.CombinedOutput()
			if err == nil || !strings.Contains(string(out), tc.want) {
				t.Errorf("want a failure saying %q, got err=%v:\n%s", tc.want, err, out)
			}
		})
	}
}

// `make deploy` picks config/local by itself when KUBECONFIG is the local cluster's, and only then
// imports the image into the real node; DEPLOY_OVERLAY overrides the choice.
func TestMakeDeployPicksTheOverlay(t *testing.T) {
	tl := newTools(t)
	clusterDir := t.TempDir()
	kubeconfig := filepath.Join(clusterDir, "kubeconfig")
	writeFile(t, kubeconfig, "apiVersion: v1\nkind: Config\n")
	other := filepath.Join(t.TempDir(), "kubeconfig")
	writeFile(t, other, "apiVersion: v1\nkind: Config\n")

	for name, tc := range map[string]struct {
		env       []string
		overlay   string
		loadImage bool
	}{
		"local cluster":         {env: []string{"KUBECONFIG=" + kubeconfig}, overlay: "config/local", loadImage: true},
		"another cluster":       {env: []string{"KUBECONFIG=" + other}, overlay: "config/default"},
		"no KUBECONFIG":         {env: []string{"KUBECONFIG="}, overlay: "config/default"},
		"local, told default":   {env: []string{"KUBECONFIG=" + kubeconfig, "DEPLOY_OVERLAY=config/default"}, overlay: "config/default"},
		"elsewhere, told local": {env: []string{"KUBECONFIG=" + other, "DEPLOY_OVERLAY=config/local"}, overlay: "config/local", loadImage: true},
	} {
		t.Run(name, func(t *testing.T) {
			env := append([]string{"LOCKEDJOB_CLUSTER_DIR=" + clusterDir}, tc.env...)
			out := tl.run(t, env, "make", "-n", "deploy", "IMG="+image)
			if want := fmt.Sprintf("DEPLOY_OVERLAY=%q", tc.overlay); !strings.Contains(out, want) {
				t.Errorf("make -n deploy does not run the overlay script with %s:\n%s", want, out)
			}
			if got := strings.Contains(out, "hack/cluster.sh load-image"); got != tc.loadImage {
				t.Errorf("load-image in make -n deploy = %v, want %v:\n%s", got, tc.loadImage, out)
			}
		})
	}
}
