package testkit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
)

// GuardPolicies are the objects of the admission gate of guarded Jobs and Pods (config/guard) as the
// project's pinned kustomize builds them (Kustomize). Every suite that installs the gate installs
// these, so each runs what ships.
func GuardPolicies(root string) ([]*unstructured.Unstructured, error) {
	return Kustomize(root, filepath.Join("config", "guard"))
}

// Kustomize is what the project's pinned kustomize builds of dir (relative to root): bin/kustomize
// under root (`make kustomize`), or $KUSTOMIZE.
func Kustomize(root, dir string) ([]*unstructured.Unstructured, error) {
	kustomize := filepath.Join(root, "bin", "kustomize")
	if k := os.Getenv("KUSTOMIZE"); k != "" {
		kustomize = k
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(kustomize, "build", filepath.Join(root, dir))
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s (run `make kustomize` first): %w\n%s", cmd, err, stderr.String())
	}
	var objs []*unstructured.Unstructured
	d := utilyaml.NewYAMLOrJSONDecoder(&stdout, 4096)
	for {
		var raw json.RawMessage
		if err := d.Decode(&raw); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("decode kustomize build %s: %w", dir, err)
		}
		o := &unstructured.Unstructured{}
		if err := o.UnmarshalJSON(raw); err != nil {
			return nil, fmt.Errorf("decode %s: %w", raw, err)
		}
		objs = append(objs, o)
	}
	if len(objs) == 0 {
		return nil, fmt.Errorf("kustomize build %s built nothing", dir)
	}
	return objs, nil
}

// InstallGuard creates policies (GuardPolicies) through c and waits, up to timeout, until all are
// in force: the API server compiles a policy and starts using it a moment after it is created. A
// probe Job and a probe Pod in namespace, sent as dry runs so they leave nothing behind, must be
// suspended (gated) by the mutating policies, ones with a scope that does not parse refused by
// the validating policies, and a Job labelled only on its pod template refused by the policy of
// misplaced labels. c's scheme must know batch/v1 and v1.
func InstallGuard(ctx context.Context, c client.Client, policies []*unstructured.Unstructured, namespace string, timeout time.Duration) error {
	for _, o := range policies {
		if err := c.Create(ctx, o.DeepCopy()); err != nil {
			return fmt.Errorf("create %s %s: %w", o.GetKind(), o.GetName(), err)
		}
	}
	deadline := time.Now().Add(timeout)
	for {
		why := guardProbe(ctx, c, namespace)
		if why == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the policies of config/guard are not in force after %s: %s", timeout, why)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the policies of config/guard: %s: %w", why, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// guardProbeName names the probes, and their lock.
const guardProbeName = "guard-probe"

// guardProbe says why the gate is not in force yet ("" once it is).
func guardProbe(ctx context.Context, c client.Client, namespace string) string {
	probe := NewGuardedJob(namespace, guardProbeName, LockedJobOptions{Lock: guardProbeName, Run: time.Second})
	if err := c.Create(ctx, probe, client.DryRunAll); err != nil {
		return fmt.Sprintf("a guarded Job is refused: %v", err)
	}
	if probe.Spec.Suspend == nil || !*probe.Spec.Suspend {
		return "the mutating policy is not in force: a guarded Job is created running"
	}
	bad := NewGuardedJob(namespace, guardProbeName, LockedJobOptions{Lock: guardProbeName, Scope: "Everywhere", Run: time.Second})
	err := c.Create(ctx, bad, client.DryRunAll)
	if err == nil || !strings.Contains(err.Error(), batchv1alpha1.AnnotationGuardScope) {
		return fmt.Sprintf("the validating policy is not in force: a guarded Job of scope Everywhere is answered %v", err)
	}
	// The policy of misplaced labels fails open (failurePolicy Ignore): only this probe tells that
	// it runs.
	misplaced := NewGuardedJob(namespace, guardProbeName, LockedJobOptions{Lock: guardProbeName, Run: time.Second})
	// A label of its own: a Job with none takes its pod template's.
	misplaced.Labels = map[string]string{"app": guardProbeName}
	misplaced.Spec.Template.Labels[batchv1alpha1.LabelGuardLock] = guardProbeName
	err = c.Create(ctx, misplaced, client.DryRunAll)
	if err == nil || !strings.Contains(err.Error(), "spec.template.metadata.labels['"+batchv1alpha1.LabelGuardLock+"']") {
		return fmt.Sprintf("the policy of misplaced labels is not in force: a Job labelled only on its pod template is answered %v", err)
	}
	pod := guardProbePod(namespace, "")
	if err := c.Create(ctx, pod, client.DryRunAll); err != nil {
		return fmt.Sprintf("a guarded Pod is refused: %v", err)
	}
	if !slices.ContainsFunc(pod.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool { return g.Name == batchv1alpha1.SchedulingGateGuard }) {
		return "the mutating Pod policy is not in force: a guarded Pod is created without its scheduling gate"
	}
	err = c.Create(ctx, guardProbePod(namespace, "Everywhere"), client.DryRunAll)
	if err == nil || !strings.Contains(err.Error(), batchv1alpha1.AnnotationGuardScope) {
		return fmt.Sprintf("the validating Pod policy is not in force: a guarded Pod of scope Everywhere is answered %v", err)
	}
	return ""
}

// guardProbePod is a bare Pod labelled for a lock, of scope ("" for none).
func guardProbePod(namespace, scope string) *corev1.Pod {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: guardProbeName,
			Labels: map[string]string{batchv1alpha1.LabelGuardLock: guardProbeName}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "probe", Image: "busybox"}}},
	}
	if scope != "" {
		pod.Annotations = map[string]string{batchv1alpha1.AnnotationGuardScope: scope}
	}
	return pod
}
