package kueue_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/lockedjob/lockedjob/internal/testutil/kueuerun"
)

const (
	// queueNameLabel puts a Job in a LocalQueue.
	queueNameLabel = kueuerun.QueueNameLabel
	// lockController is the AdmissionCheck controller name lockedjob is to answer for
	// (docs/design.md, Kueue).
	lockController = "batch.lockedjob.dev/lock"
	// fencingTokenAnnotation is the pod template annotation a guarded Job's fence travels in.
	fencingTokenAnnotation = "batch.lockedjob.dev/fencing-token"
	// holdWindow is how long the test watches a Workload whose check is Pending stay un-admitted.
	holdWindow = 2 * time.Second
	// mainPodSet is the name of a Job's one PodSet in its Workload.
	mainPodSet = "main"
)

// queues creates a namespace, a ResourceFlavor, a ClusterQueue of name with quota for a few small
// Jobs and the admission checks checks, and a LocalQueue of name on it, and returns the namespace.
func queues(t *testing.T, name string, checks ...string) string {
	t.Helper()
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kueue-" + name}}
	create(t, ns)
	flavor := kueuerun.Object("ResourceFlavor", "", name, map[string]any{})
	create(t, flavor)
	spec := map[string]any{
		"namespaceSelector": map[string]any{},
		"resourceGroups": []any{map[string]any{
			"coveredResources": []any{"cpu", "memory"},
			"flavors": []any{map[string]any{
				"name": name,
				"resources": []any{
					map[string]any{"name": "cpu", "nominalQuota": "4"},
					map[string]any{"name": "memory", "nominalQuota": "4Gi"},
				},
			}},
		}},
	}
	if len(checks) > 0 {
		// v1beta2 has no spec.admissionChecks (v1beta1's list); its strategy lists them.
		var rules []any
		for _, c := range checks {
			rules = append(rules, map[string]any{"name": c})
		}
		spec["admissionChecksStrategy"] = map[string]any{"admissionChecks": rules}
	}
	cq := kueuerun.Object("ClusterQueue", "", name, spec)
	create(t, cq)
	create(t, kueuerun.Object("LocalQueue", ns.Name, name, map[string]any{"clusterQueue": name}))
	// A ClusterQueue admits nothing until Kueue finds it active: flavor and checks known, checks
	// active.
	eventually(t, "ClusterQueue "+name+" is Active", func() (bool, string) {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(cq), cq); err != nil {
			return false, err.Error()
		}
		c := condition(cq, "Active")
		return c != nil && c.Status == metav1.ConditionTrue, fmt.Sprintf("Active = %+v", c)
	})
	return ns.Name
}

// queuedJob is a small Job in the LocalQueue queue of namespace ns, not suspended by its author:
// Kueue's defaulting webhook suspends it.
func queuedJob(ns, queue string) *batchv1.Job {
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: "queued-",
			Namespace:    ns,
			Labels:       map[string]string{queueNameLabel: queue},
		},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name: "main", Image: "busybox",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceCPU:    resource.MustParse("100m"),
					corev1.ResourceMemory: resource.MustParse("64Mi"),
				}},
			}},
		}}},
	}
}

func TestKueueAdmitsAJobOfItsQueue(t *testing.T) {
	ns := queues(t, "plain")
	job := queuedJob(ns, "plain")
	create(t, job)
	if job.Spec.Suspend == nil || !*job.Spec.Suspend {
		t.Fatalf("Job %s created with spec.suspend %v; want true from Kueue's defaulting webhook", job.Name, job.Spec.Suspend)
	}

	wl := workloadOf(t, job)
	eventually(t, "Workload "+wl.GetName()+" is Admitted", func() (bool, string) {
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(wl), wl); err != nil {
			return false, err.Error()
		}
		c := condition(wl, "Admitted")
		return c != nil && c.Status == metav1.ConditionTrue, fmt.Sprintf("Admitted = %+v", c)
	})
	waitUnsuspended(t, job)
}

func TestAdmissionCheckHoldsTheWorkloadUntilReady(t *testing.T) {
	ctx := context.Background()
	check := admissionCheck(t, "lockedjob")
	ns := queues(t, "checked", check.GetName())
	job := queuedJob(ns, "checked")
	create(t, job)

	// Quota reserved, the check Pending: Kueue waits for the check, and the Job stays suspended.
	wl := workloadOf(t, job)
	eventually(t, "Workload "+wl.GetName()+" has quota and its check Pending", func() (bool, string) {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(wl), wl); err != nil {
			return false, err.Error()
		}
		c := condition(wl, "QuotaReserved")
		state := checkState(wl, check.GetName())
		return c != nil && c.Status == metav1.ConditionTrue && state == "Pending",
			fmt.Sprintf("QuotaReserved = %+v, check state %q", c, state)
	})
	consistently(t, "Workload "+wl.GetName()+" stays un-admitted and its Job suspended", func() (bool, string) {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(wl), wl); err != nil {
			return false, err.Error()
		}
		if c := condition(wl, "Admitted"); c != nil && c.Status == metav1.ConditionTrue {
			return false, fmt.Sprintf("Admitted while its check is %q: %+v", checkState(wl, check.GetName()), c)
		}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(job), job); err != nil {
			return false, err.Error()
		}
		return job.Spec.Suspend != nil && *job.Spec.Suspend, fmt.Sprintf("Job spec.suspend = %v", job.Spec.Suspend)
	})

	// The test answers for the check, as lockedjob's controller is to: Ready, with the fence for the
	// pods.
	admitWithFence(t, wl, check.GetName(), "7")
	waitUnsuspended(t, job)
	if got := job.Spec.Template.Annotations[fencingTokenAnnotation]; got != "7" {
		t.Fatalf("Job %s unsuspended with pod template annotation %s = %q; want \"7\" from the check's podSetUpdates",
			job.Name, fencingTokenAnnotation, got)
	}
}

// A check set to Retry after admission evicts the Workload: Kueue suspends the Job again, takes
// the check's annotation out of its pod template, and asks the check anew (Pending). That is the
// path the design leaves a lost lock to.
func TestAdmissionCheckRetryTakesTheFenceOut(t *testing.T) {
	ctx := context.Background()
	check := admissionCheck(t, "lockedjob-retry")
	ns := queues(t, "retry", check.GetName())
	job := queuedJob(ns, "retry")
	create(t, job)
	wl := workloadOf(t, job)
	eventually(t, "Workload "+wl.GetName()+" has its check Pending", func() (bool, string) {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(wl), wl); err != nil {
			return false, err.Error()
		}
		state := checkState(wl, check.GetName())
		return state == "Pending", fmt.Sprintf("check state %q", state)
	})
	admitWithFence(t, wl, check.GetName(), "8")
	waitUnsuspended(t, job)

	setCheck(t, wl, map[string]any{"name": check.GetName(), "state": "Retry", "message": "lock lost"})
	eventually(t, "Job "+job.Name+" is suspended again without the fence", func() (bool, string) {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(job), job); err != nil {
			return false, err.Error()
		}
		_, fenced := job.Spec.Template.Annotations[fencingTokenAnnotation]
		return job.Spec.Suspend != nil && *job.Spec.Suspend && !fenced,
			fmt.Sprintf("spec.suspend = %v, pod template annotations %v", job.Spec.Suspend, job.Spec.Template.Annotations)
	})
	eventually(t, "Workload "+wl.GetName()+" asks its check anew", func() (bool, string) {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(wl), wl); err != nil {
			return false, err.Error()
		}
		c := condition(wl, "Admitted")
		state := checkState(wl, check.GetName())
		return state == "Pending" && (c == nil || c.Status != metav1.ConditionTrue),
			fmt.Sprintf("check state %q, Admitted = %+v", state, c)
	})
}

// admissionCheck creates an AdmissionCheck of lockedjob's controller name and sets it Active, as
// its controller is to: until then the ClusterQueues listing it admit nothing.
func admissionCheck(t *testing.T, name string) *unstructured.Unstructured {
	t.Helper()
	check := kueuerun.Object("AdmissionCheck", "", name, map[string]any{"controllerName": lockController})
	create(t, check)
	setStatus(t, check, map[string]any{"conditions": []any{map[string]any{
		"type": "Active", "status": "True", "reason": "Active", "message": "set by the test",
		"lastTransitionTime": metav1.Now().UTC().Format(time.RFC3339),
	}}})
	return check
}

// admitWithFence answers Workload wl's check as lockedjob's controller is to, Ready with the
// fence for the pods, and waits until Kueue admitted wl.
func admitWithFence(t *testing.T, wl *unstructured.Unstructured, check, token string) {
	t.Helper()
	setCheck(t, wl, map[string]any{
		"name":    check,
		"state":   "Ready",
		"message": "lock held",
		"podSetUpdates": []any{map[string]any{
			"name":        mainPodSet,
			"annotations": map[string]any{fencingTokenAnnotation: token},
		}},
	})
	eventually(t, "Workload "+wl.GetName()+" is Admitted", func() (bool, string) {
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(wl), wl); err != nil {
			return false, err.Error()
		}
		c := condition(wl, "Admitted")
		return c != nil && c.Status == metav1.ConditionTrue, fmt.Sprintf("Admitted = %+v", c)
	})
}

// setCheck writes the one admission check state of Workload wl, stamped now. A merge patch
// replaces the whole list: the Workloads here have one check.
func setCheck(t *testing.T, wl *unstructured.Unstructured, state map[string]any) {
	t.Helper()
	state["lastTransitionTime"] = metav1.Now().UTC().Format(time.RFC3339)
	setStatus(t, wl, map[string]any{"admissionChecks": []any{state}})
}

// workloadOf waits for the Workload Kueue made for job (the one it owns) and returns it.
func workloadOf(t *testing.T, job *batchv1.Job) *unstructured.Unstructured {
	t.Helper()
	var found *unstructured.Unstructured
	eventually(t, "a Workload for Job "+job.Name, func() (bool, string) {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(kueuerun.GroupVersion.WithKind("WorkloadList"))
		if err := k8s.List(context.Background(), list, client.InNamespace(job.Namespace)); err != nil {
			return false, err.Error()
		}
		for i := range list.Items {
			for _, ref := range list.Items[i].GetOwnerReferences() {
				if ref.UID == job.UID {
					found = &list.Items[i]
					return true, ""
				}
			}
		}
		return false, fmt.Sprintf("%d Workloads in %s, none owned by the Job", len(list.Items), job.Namespace)
	})
	return found
}

// waitUnsuspended waits until Kueue unsuspended job, and leaves job as read then.
func waitUnsuspended(t *testing.T, job *batchv1.Job) {
	t.Helper()
	eventually(t, "Job "+job.Name+" is unsuspended", func() (bool, string) {
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(job), job); err != nil {
			return false, err.Error()
		}
		return job.Spec.Suspend != nil && !*job.Spec.Suspend, fmt.Sprintf("spec.suspend = %v", job.Spec.Suspend)
	})
}

// condition is the status condition of type typ of o, or nil.
func condition(o *unstructured.Unstructured, typ string) *metav1.Condition {
	raw, _, _ := unstructured.NestedSlice(o.Object, "status", "conditions")
	var conds []metav1.Condition
	for _, r := range raw {
		m, ok := r.(map[string]any)
		if !ok {
			continue
		}
		c := metav1.Condition{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m, &c); err != nil {
			continue
		}
		conds = append(conds, c)
	}
	return meta.FindStatusCondition(conds, typ)
}

// checkState is the state of the admission check name in Workload wl's status, or "".
func checkState(wl *unstructured.Unstructured, name string) string {
	checks, _, _ := unstructured.NestedSlice(wl.Object, "status", "admissionChecks")
	for _, c := range checks {
		m, ok := c.(map[string]any)
		if ok && m["name"] == name {
			s, _ := m["state"].(string)
			return s
		}
	}
	return ""
}

// setStatus merge-patches o's status subresource with status.
func setStatus(t *testing.T, o *unstructured.Unstructured, status map[string]any) {
	t.Helper()
	patch, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		t.Fatal(err)
	}
	if err := k8s.Status().Patch(context.Background(), o, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatalf("patching the status of %s %s: %v", o.GetKind(), o.GetName(), err)
	}
}

// create creates o; envtest's API server goes away with the suite, so nothing is deleted.
func create(t *testing.T, o client.Object) {
	t.Helper()
	if err := k8s.Create(context.Background(), o); err != nil {
		t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
	}
}

// consistently polls cond for holdWindow, failing the test with its report the first time it does
// not hold.
func consistently(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	end := time.Now().Add(holdWindow)
	for time.Now().Before(end) {
		if ok, report := cond(); !ok {
			t.Fatalf("%s: broken: %s", what, report)
		}
		time.Sleep(poll)
	}
}

// eventually polls cond until it holds, failing the test with its last report after timeout.
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, report := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s: %s", what, timeout, report)
		}
		time.Sleep(poll)
	}
}
