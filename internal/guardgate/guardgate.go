// Package guardgate is the admission gate of guarded Jobs and Pods written in Go, for the clusters
// where the mutating policies of config/guard cannot run (before Kubernetes 1.36, which made
// MutatingAdmissionPolicy GA). From a batch/v1 Job or a v1 Pod it builds the JSONPatch those
// policies build, rule for rule, so both paths gate an object the same way; the webhook of
// internal/webhook serves it (docs/design.md, "Before 1.36: the same gate as a webhook").
//
// It knows only k8s.io/api types and the rules of api/v1alpha1 and internal/locks; what serves
// it is not its concern.
package guardgate

import (
	"fmt"
	"slices"
	"strconv"

	"gomodules.xyz/jsonpatch/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/internal/locks"
)

// lockEnv are the four variables in the order the policies give them, each with the annotation
// (of the pod template, or of the Pod) it reads.
var lockEnv = []struct{ name, annotation string }{
	{batchv1alpha1.EnvFencingToken, batchv1alpha1.AnnotationFencingToken},
	{batchv1alpha1.EnvLock, batchv1alpha1.AnnotationLock},
	{batchv1alpha1.EnvHolder, batchv1alpha1.AnnotationHolder},
	{batchv1alpha1.EnvSlot, batchv1alpha1.AnnotationSlot},
}

// LockEnv is the lock's environment of a guarded container: the four variables as downward-API
// references to the annotations the operator writes once it holds the lock. The apiVersion of
// each fieldRef is the one the API server defaults, so what the webhook writes and what the
// policy's patch becomes once stored are the same.
func LockEnv() []corev1.EnvVar {
	env := make([]corev1.EnvVar, 0, len(lockEnv))
	for _, p := range lockEnv {
		env = append(env, lockEnvVar(p.name, p.annotation))
	}
	return env
}

func lockEnvVar(name, annotation string) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{
		APIVersion: "v1", FieldPath: fmt.Sprintf("metadata.annotations['%s']", annotation),
	}}}
}

func isLockEnv(name string) bool {
	return slices.ContainsFunc(lockEnv, func(p struct{ name, annotation string }) bool { return p.name == name })
}

// GuardsJob reports whether the gate acts on job at its creation: it carries the lock label and
// is not a LockedJob's own Job (labelled batch.lockedjob.dev/lockedjob), which already runs under
// its LockedJob's lock. The policy's objectSelector, and the webhook's.
func GuardsJob(job *batchv1.Job) bool {
	_, locked := job.Labels[batchv1alpha1.LabelGuardLock]
	_, owned := job.Labels[batchv1alpha1.LabelLockedJob]
	return locked && !owned
}

// JobPatch is the mutation of a guarded Job at its creation (config/guard/mutating_policy.yaml),
// nil for a Job the gate leaves alone: spec.suspend set to true, and for every init container and
// container one op that writes its whole env list, its own entries without the four names (so a
// token copied into the template never stands beside the fence) followed by LockEnv.
func JobPatch(job *batchv1.Job) []jsonpatch.Operation {
	if !GuardsJob(job) {
		return nil
	}
	ops := []jsonpatch.Operation{jsonpatch.NewOperation("add", "/spec/suspend", true)}
	spec := job.Spec.Template.Spec
	for i, c := range spec.InitContainers {
		ops = append(ops, jsonpatch.NewOperation("add", "/spec/template/spec/initContainers/"+strconv.Itoa(i)+"/env", jobEnv(c.Env)))
	}
	for i, c := range spec.Containers {
		ops = append(ops, jsonpatch.NewOperation("add", "/spec/template/spec/containers/"+strconv.Itoa(i)+"/env", jobEnv(c.Env)))
	}
	return ops
}

func jobEnv(own []corev1.EnvVar) []corev1.EnvVar {
	env := slices.DeleteFunc(slices.Clone(own), func(e corev1.EnvVar) bool { return isLockEnv(e.Name) })
	return append(env, LockEnv()...)
}

// GuardsPod reports whether the gate acts on pod at its creation: it carries the lock label, no
// batch/v1 Job controls it (locks.IsGuardedPod: a Job's pods are the Job path's) and it is not
// bound to a node (a gate cannot hold back a bound Pod; the validating policy refuses it). The
// policy's objectSelector and matchConditions; the webhook's objectSelector is the label alone.
func GuardsPod(pod *corev1.Pod) bool {
	return locks.IsGuardedPod(pod) && pod.Spec.NodeName == ""
}

// PodPatch is the mutation of a guarded Pod at its creation (config/guard/mutating_pod_policy.yaml),
// nil for a Pod the gate leaves alone: the scheduling gate batch.lockedjob.dev/lock added unless
// the Pod names it already, and for every init container and container the four variables, each
// one op: it replaces the container's own entry of that name where it stands (the last one,
// should the name repeat: the kubelet lets the later entry win), or is appended; a container
// without env gets LockEnv as its list.
func PodPatch(pod *corev1.Pod) []jsonpatch.Operation {
	if !GuardsPod(pod) {
		return nil
	}
	var ops []jsonpatch.Operation
	gate := corev1.PodSchedulingGate{Name: batchv1alpha1.SchedulingGateGuard}
	switch {
	case slices.ContainsFunc(pod.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool { return g.Name == gate.Name }):
	case len(pod.Spec.SchedulingGates) > 0:
		ops = append(ops, jsonpatch.NewOperation("add", "/spec/schedulingGates/-", gate))
	default:
		ops = append(ops, jsonpatch.NewOperation("add", "/spec/schedulingGates", []corev1.PodSchedulingGate{gate}))
	}
	for i, c := range pod.Spec.InitContainers {
		ops = append(ops, podEnvOps("/spec/initContainers/"+strconv.Itoa(i), c.Env)...)
	}
	for i, c := range pod.Spec.Containers {
		ops = append(ops, podEnvOps("/spec/containers/"+strconv.Itoa(i), c.Env)...)
	}
	return ops
}

// podEnvOps are the ops of one container at path whose env is own. Unlike the Job's, a Pod's env
// is not written back whole: the policy cannot hand a Pod's existing entries to a patch, so it
// writes one variable at a time, and this does the same.
func podEnvOps(path string, own []corev1.EnvVar) []jsonpatch.Operation {
	if len(own) == 0 {
		return []jsonpatch.Operation{jsonpatch.NewOperation("add", path+"/env", LockEnv())}
	}
	ops := make([]jsonpatch.Operation, 0, len(lockEnv))
	for _, p := range lockEnv {
		v := lockEnvVar(p.name, p.annotation)
		if i := lastIndexOf(own, p.name); i >= 0 {
			ops = append(ops, jsonpatch.NewOperation("replace", path+"/env/"+strconv.Itoa(i), v))
		} else {
			ops = append(ops, jsonpatch.NewOperation("add", path+"/env/-", v))
		}
	}
	return ops
}

// lastIndexOf is the index of the last entry of env named name, or -1.
func lastIndexOf(env []corev1.EnvVar, name string) int {
	for i, e := range slices.Backward(env) {
		if e.Name == name {
			return i
		}
	}
	return -1
}
