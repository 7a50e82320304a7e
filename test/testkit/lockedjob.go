package testkit

import (
	"fmt"
	"strconv"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
)

// minDeleting is how long a deleted pod terminates unless LockedJobOptions.Deleting says longer.
const minDeleting = 100 * time.Millisecond

// LockedJobOptions shape a LockedJob whose Job runs one pod, or a guarded Job that runs the same
// pod under the same lock (NewGuardedJob); the zero value of each field is the CRD's default, or
// the one named on the field.
type LockedJobOptions struct {
	Lock       string
	Scope      batchv1alpha1.LockScope
	TTL        time.Duration // 0: the CRD default (30s)
	Renew      time.Duration // 0: ttl/3
	OnLockLost batchv1alpha1.LockLostPolicy
	Priority   int32
	// Run is how long the pod runs before it succeeds.
	Run time.Duration
	// Fail makes the pod fail after Run instead (kwok's container-failed stage; exit 1 on a node).
	Fail bool
	// Deleting is how long a deleted pod keeps terminating (at least 100ms).
	Deleting time.Duration
	// App is the pod's app label, which tells one suite's pods from another's.
	App string
}

// NewLockedJob builds a LockedJob whose Job runs one pod, never retried (jobSpec).
func NewLockedJob(namespace, name string, o LockedJobOptions) *batchv1alpha1.LockedJob {
	lj := &batchv1alpha1.LockedJob{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: batchv1alpha1.LockedJobSpec{
			Lock:        batchv1alpha1.LockSpec{Name: o.Lock, Scope: o.Scope, OnLockLost: o.OnLockLost, Priority: o.Priority},
			JobTemplate: batchv1alpha1.JobTemplate{Spec: jobSpec(o)},
		},
	}
	if o.TTL > 0 {
		lj.Spec.Lock.TTL = &metav1.Duration{Duration: o.TTL}
	}
	if o.Renew > 0 {
		lj.Spec.Lock.RenewInterval = &metav1.Duration{Duration: o.Renew}
	}
	return lj
}

// NewGuardedJob builds a guarded Job: a plain Job labelled for o.Lock that runs the pod
// NewLockedJob's Job runs, under the lock NewLockedJob's spec.lock names, its terms in the guard
// annotations (api/v1alpha1/guard_types.go). The admission gate (config/guard) creates it
// suspended. A guarded Job has no renew interval of its own (the operator renews at ttl/3), so
// o.Renew must be zero.
func NewGuardedJob(namespace, name string, o LockedJobOptions) *batchv1.Job {
	if o.Renew != 0 {
		panic("testkit: a guarded Job has no renew interval (LockedJobOptions.Renew must be zero)")
	}
	annotations := map[string]string{}
	if o.Scope != "" {
		annotations[batchv1alpha1.AnnotationGuardScope] = string(o.Scope)
	}
	if o.TTL > 0 {
		annotations[batchv1alpha1.AnnotationGuardTTL] = o.TTL.String()
	}
	if o.Priority != 0 {
		annotations[batchv1alpha1.AnnotationGuardPriority] = strconv.Itoa(int(o.Priority))
	}
	if o.OnLockLost != "" {
		annotations[batchv1alpha1.AnnotationGuardOnLockLost] = string(o.OnLockLost)
	}
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace,
			Labels: map[string]string{batchv1alpha1.LabelGuardLock: o.Lock}, Annotations: annotations},
		Spec: jobSpec(o),
	}
}

// JobImage is the image of the Jobs of NewLockedJob and NewGuardedJob. kwok never pulls it; on a
// cluster whose pods are real containers (make test-kind) it must be loaded there: it is the
// Makefile's BUSYBOX_IMG (make image-busybox), whose sh and sleep run the Job's command.
const JobImage = "lockedjob.local/busybox:dev"

// jobSpec is the Job of NewLockedJob and NewGuardedJob: one pod, never retried. On kwok's nodes
// the stage annotations set the pod's timing exactly (delay == jitter-delay turns the jitter off);
// on a real node the command (of JobImage) takes as long.
func jobSpec(o LockedJobOptions) batchv1.JobSpec {
	deleting := max(o.Deleting, minDeleting)
	stages := map[string]time.Duration{
		"pod-create":   100 * time.Millisecond,
		"pod-ready":    100 * time.Millisecond,
		"pod-complete": o.Run,
		"pod-delete":   deleting,
	}
	labels := map[string]string{"app": o.App}
	script := fmt.Sprintf("sleep %.1f", o.Run.Seconds())
	if o.Fail {
		// The chaos stage picks its pods by this label; its delay is the run.
		labels["pod-container-running-failed.stage.kwok.x-k8s.io"] = "true"
		stages["pod-container-running-failed"] = o.Run
		script += "; exit 1"
	}
	annotations := map[string]string{}
	for stage, d := range stages {
		annotations[stage+".stage.kwok.x-k8s.io/delay"] = kwokDuration(d)
		annotations[stage+".stage.kwok.x-k8s.io/jitter-delay"] = kwokDuration(d)
	}
	zero := int32(0)
	// kwok removes a terminating pod no later than its grace period ends.
	grace := int64(deleting/time.Second) + 1
	return batchv1.JobSpec{
		BackoffLimit: &zero,
		Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: annotations},
			Spec: corev1.PodSpec{
				RestartPolicy:                 corev1.RestartPolicyNever,
				TerminationGracePeriodSeconds: &grace,
				Containers: []corev1.Container{{
					Name: "work", Image: JobImage,
					Command: []string{"sh", "-c", script},
				}},
			},
		},
	}
}

func kwokDuration(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) + "ms" }
