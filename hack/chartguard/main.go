// Command chartguard gives dist/chart the value guard.admission: policy (default) or webhook, the
// two paths of the admission gate of guarded Jobs and Pods. `make helm-chart` runs it right after
// kubebuilder's Helm plugin (helm/v2-alpha), which writes the chart from config/default, the
// policy path, and cannot carry the other one (docs/deploy.md, "Why a second step"):
//
//   - the plugin wraps only the kinds it knows in conditionals (AddConditionalWrappers in
//     templater/appliers/conditionals.go); a MutatingAdmissionPolicy gets none, so no value can
//     leave it out;
//   - its webhook support is cert-manager's: the webhook-certs volume mount renders only with
//     certManager.enabled (MakeWebhookVolumeMountsConditional in appliers/manager.go), and the
//     manager's other args move to values.yaml, which it writes once and then preserves;
//   - its file names collide for a Role and a ClusterRole of one name (generateFileName in
//     kustomize/generator.go): the rotation's namespaced Role would be dropped.
//
// So this step reads what config/overlays/guard-webhook (config/default with the component
// config/components/guard-webhook) adds, removes and changes, as kustomize builds both, and writes
// it into the chart under the value: the objects the component adds as templates of their own in
// templates/guard-webhook, the objects it removes (the mutating policies and their bindings)
// wrapped so they render only on the policy path, and the manager Deployment's differences
// (replicas, args, port, certificate volume) as conditional blocks in the plugin's
// manager/manager.yaml. Anything else the component might change fails the step, so a change to
// the component never goes missing from the chart. With guard.admission: policy the chart renders
// byte for byte what the plugin wrote.
//
// It also gives the chart the value hostNetwork (hostnetwork.go): the pod-level part of
// config/local, which the plugin's values cannot express; the rest of config/local is values the
// plugin already has.
//
// Usage: go run ./hack/chartguard [-kustomize bin/kustomize] [-chart dist/chart]
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
)

func main() {
	kustomize := flag.String("kustomize", filepath.Join("bin", "kustomize"), "the pinned kustomize")
	chart := flag.String("chart", filepath.Join("dist", "chart"), "the chart kubebuilder's Helm plugin wrote")
	flag.Parse()
	if err := run(*kustomize, *chart); err != nil {
		log.Fatalf("chartguard: %v", err)
	}
}

func run(kustomize, chart string) error {
	policy, err := build(kustomize, filepath.Join("config", "default"))
	if err != nil {
		return err
	}
	webhook, err := build(kustomize, filepath.Join("config", "overlays", "guard-webhook"))
	if err != nil {
		return err
	}
	d, err := diff(policy, webhook)
	if err != nil {
		return err
	}
	templates := filepath.Join(chart, "templates")
	for _, o := range d.removed {
		if err := wrapPolicyOnly(templates, o); err != nil {
			return err
		}
	}
	if err := writeWebhookObjects(templates, d.added); err != nil {
		return err
	}
	if err := patchManager(templates, d); err != nil {
		return err
	}
	if err := patchHostNetwork(templates); err != nil {
		return err
	}
	if err := ensureValue(filepath.Join(chart, "values.yaml"), valuesBlock, "guard"); err != nil {
		return err
	}
	if err := ensureValue(filepath.Join(chart, "values.yaml"), hostNetworkValue, "hostNetwork"); err != nil {
		return err
	}
	fmt.Printf("chartguard: guard.admission and hostNetwork written into %s: %d objects on the webhook path only, %d on the policy path only\n",
		chart, len(d.added), len(d.removed))
	return nil
}

// writeFile writes content to path unless it already holds it, so a second run leaves mtimes alone.
func writeFile(path, content string) error {
	if old, err := os.ReadFile(path); err == nil && string(old) == content {
		return nil
	}
	return os.WriteFile(path, []byte(content), 0o644)
}
