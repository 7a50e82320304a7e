package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"reflect"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// build returns the objects `kustomize build dir` writes.
func build(kustomize, dir string) ([]*unstructured.Unstructured, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(kustomize, "build", dir)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s build %s: %v\n%s", kustomize, dir, err, stderr.String())
	}
	d := utilyaml.NewYAMLOrJSONDecoder(&stdout, 4096)
	var objs []*unstructured.Unstructured
	for {
		var raw json.RawMessage
		err := d.Decode(&raw)
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("decode the build of %s: %w", dir, err)
		}
		if len(raw) == 0 || string(raw) == "null" {
			continue
		}
		o := &unstructured.Unstructured{}
		if err := o.UnmarshalJSON(raw); err != nil {
			return nil, fmt.Errorf("decode an object of %s: %w", dir, err)
		}
		objs = append(objs, o)
	}
}

func keyOf(o *unstructured.Unstructured) string {
	return o.GetKind() + " " + o.GetNamespace() + "/" + o.GetName()
}

// variants is what the webhook path's build has that the policy path's has not (added), the other
// way round (removed), and the manager Deployment of each: the only object both have that may
// differ.
type variants struct {
	added, removed                []*unstructured.Unstructured
	policyManager, webhookManager *unstructured.Unstructured
}

// diff compares the builds of config/default (policy) and config/overlays/guard-webhook (webhook).
func diff(policy, webhook []*unstructured.Unstructured) (variants, error) {
	var v variants
	index := func(objs []*unstructured.Unstructured) map[string]*unstructured.Unstructured {
		m := map[string]*unstructured.Unstructured{}
		for _, o := range objs {
			m[keyOf(o)] = o
		}
		return m
	}
	p, w := index(policy), index(webhook)
	var changed []string
	for _, o := range webhook {
		old, ok := p[keyOf(o)]
		switch {
		case !ok:
			v.added = append(v.added, o)
		case isManager(o):
			v.policyManager, v.webhookManager = old, o
		case !reflect.DeepEqual(old.Object, o.Object):
			changed = append(changed, keyOf(o))
		}
	}
	for _, o := range policy {
		if _, ok := w[keyOf(o)]; !ok {
			v.removed = append(v.removed, o)
		}
	}
	if len(changed) > 0 {
		return v, fmt.Errorf("the webhook path changes %s, which this step does not carry into the chart: teach hack/chartguard", strings.Join(changed, ", "))
	}
	if v.webhookManager == nil {
		return v, errors.New("no manager Deployment (label control-plane: controller-manager) in both builds")
	}
	return v, nil
}

func isManager(o *unstructured.Unstructured) bool {
	return o.GetKind() == "Deployment" && o.GetLabels()["control-plane"] == "controller-manager"
}

// managerChanges is how the webhook path's manager Deployment differs from the policy path's: a
// replica count, and items appended to the manager container's args, ports and volume mounts and
// to the pod's volumes.
type managerChanges struct {
	replicas                           int64
	args, ports, volumeMounts, volumes []any
}

// managerDiff returns the changes, and an error if the Deployments differ in anything else.
func managerDiff(policy, webhook *unstructured.Unstructured) (managerChanges, error) {
	var c managerChanges
	w := webhook.DeepCopy()
	replicas, _, _ := unstructured.NestedInt64(w.Object, "spec", "replicas")
	policyReplicas, _, _ := unstructured.NestedInt64(policy.Object, "spec", "replicas")
	c.replicas = replicas
	if err := unstructured.SetNestedField(w.Object, policyReplicas, "spec", "replicas"); err != nil {
		return c, err
	}
	podPath := []string{"spec", "template", "spec"}
	containers, _, _ := unstructured.NestedSlice(w.Object, append(podPath, "containers")...)
	policyContainers, _, _ := unstructured.NestedSlice(policy.Object, append(podPath, "containers")...)
	if len(containers) != 1 || len(policyContainers) != 1 {
		return c, fmt.Errorf("the manager pod has %d containers on the webhook path and %d on the policy path, want one", len(containers), len(policyContainers))
	}
	container, policyContainer := containers[0].(map[string]any), policyContainers[0].(map[string]any)
	var err error
	appended := func(field string, into *[]any, in, policyIn map[string]any) {
		if err != nil {
			return
		}
		got, _ := in[field].([]any)
		base, _ := policyIn[field].([]any)
		if len(got) < len(base) || !reflect.DeepEqual(got[:len(base)], base) {
			err = fmt.Errorf("the webhook path's manager %s %v do not start with the policy path's %v", field, got, base)
			return
		}
		*into = slices.Clone(got[len(base):])
		if old, ok := policyIn[field]; ok {
			in[field] = old
		} else {
			delete(in, field)
		}
	}
	appended("args", &c.args, container, policyContainer)
	appended("ports", &c.ports, container, policyContainer)
	appended("volumeMounts", &c.volumeMounts, container, policyContainer)
	pod, _, _ := unstructured.NestedMap(w.Object, podPath...)
	policyPod, _, _ := unstructured.NestedMap(policy.Object, podPath...)
	appended("volumes", &c.volumes, pod, policyPod)
	if err != nil {
		return c, err
	}
	pod["containers"] = []any{container}
	if err := unstructured.SetNestedMap(w.Object, pod, podPath...); err != nil {
		return c, err
	}
	if !reflect.DeepEqual(w.Object, policy.Object) {
		a, _ := json.MarshalIndent(policy.Object, "", " ")
		b, _ := json.MarshalIndent(w.Object, "", " ")
		return c, fmt.Errorf("the webhook path changes the manager Deployment beyond replicas, args, ports, volume mounts and volumes; teach hack/chartguard:\npolicy  %s\nwebhook %s", a, b)
	}
	return c, nil
}
