package testkit

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/internal/locks"
)

func TestNewLockedJobDefaults(t *testing.T) {
	lj := NewLockedJob("ns", "x", LockedJobOptions{Lock: "door", Run: 2500 * time.Millisecond, App: "e2e"})
	if lj.Namespace != "ns" || lj.Name != "x" {
		t.Errorf("LockedJob %s/%s, want ns/x", lj.Namespace, lj.Name)
	}
	lock := lj.Spec.Lock
	if lock.Name != "door" || lock.Scope != "" || lock.TTL != nil || lock.RenewInterval != nil || lock.OnLockLost != "" {
		t.Errorf("lock %+v, want only the name and the CRD's defaults for the rest", lock)
	}
	job := lj.Spec.JobTemplate.Spec
	if job.BackoffLimit == nil || *job.BackoffLimit != 0 {
		t.Errorf("backoffLimit %v, want 0: a failed pod is not retried", job.BackoffLimit)
	}
	pod := job.Template
	if pod.Spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("restartPolicy %s, want Never", pod.Spec.RestartPolicy)
	}
	if g := pod.Spec.TerminationGracePeriodSeconds; g == nil || *g != 1 {
		t.Errorf("grace period %v, want 1s (the default 100ms deletion, rounded up)", g)
	}
	wantAnnotations := map[string]string{
		"pod-create.stage.kwok.x-k8s.io/delay": "100ms", "pod-create.stage.kwok.x-k8s.io/jitter-delay": "100ms",
		"pod-ready.stage.kwok.x-k8s.io/delay": "100ms", "pod-ready.stage.kwok.x-k8s.io/jitter-delay": "100ms",
		"pod-complete.stage.kwok.x-k8s.io/delay": "2500ms", "pod-complete.stage.kwok.x-k8s.io/jitter-delay": "2500ms",
		"pod-delete.stage.kwok.x-k8s.io/delay": "100ms", "pod-delete.stage.kwok.x-k8s.io/jitter-delay": "100ms",
	}
	if diff := cmp.Diff(wantAnnotations, pod.Annotations); diff != "" {
		t.Errorf("unexpected kwok annotations (-want,+got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]string{"app": "e2e"}, pod.Labels); diff != "" {
		t.Errorf("unexpected labels (-want,+got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"sh", "-c", "sleep 2.5"}, pod.Spec.Containers[0].Command); diff != "" {
		t.Errorf("unexpected command (-want,+got):\n%s", diff)
	}
}

func TestNewLockedJobOptions(t *testing.T) {
	cases := map[string]struct {
		o     LockedJobOptions
		check func(t *testing.T, lj *batchv1alpha1.LockedJob)
	}{
		"a failing pod is picked by kwok's chaos stage and exits 1 on a node": {
			o: LockedJobOptions{Run: 10 * time.Second, Fail: true},
			check: func(t *testing.T, lj *batchv1alpha1.LockedJob) {
				pod := lj.Spec.JobTemplate.Spec.Template
				if pod.Labels["pod-container-running-failed.stage.kwok.x-k8s.io"] != "true" {
					t.Errorf("labels %v, want kwok's failure stage", pod.Labels)
				}
				if d := pod.Annotations["pod-container-running-failed.stage.kwok.x-k8s.io/delay"]; d != "10000ms" {
					t.Errorf("failure delay %q, want the run (10000ms)", d)
				}
				if c := pod.Spec.Containers[0].Command; c[2] != "sleep 10.0; exit 1" {
					t.Errorf("command %q", c)
				}
			},
		},
		"a slow deletion lengthens the grace period past it": {
			o: LockedJobOptions{Deleting: 8 * time.Second},
			check: func(t *testing.T, lj *batchv1alpha1.LockedJob) {
				pod := lj.Spec.JobTemplate.Spec.Template
				if d := pod.Annotations["pod-delete.stage.kwok.x-k8s.io/delay"]; d != "8000ms" {
					t.Errorf("deletion delay %q, want 8000ms", d)
				}
				if g := *pod.Spec.TerminationGracePeriodSeconds; g != 9 {
					t.Errorf("grace period %ds, want 9s", g)
				}
			},
		},
		"a short deletion is raised to 100ms": {
			o: LockedJobOptions{Deleting: 10 * time.Millisecond},
			check: func(t *testing.T, lj *batchv1alpha1.LockedJob) {
				if d := lj.Spec.JobTemplate.Spec.Template.Annotations["pod-delete.stage.kwok.x-k8s.io/delay"]; d != "100ms" {
					t.Errorf("deletion delay %q, want 100ms", d)
				}
			},
		},
		"the lock's fields are passed through": {
			o: LockedJobOptions{Lock: "l", Scope: batchv1alpha1.LockScopeCluster, TTL: 3 * time.Second, Renew: time.Second,
				OnLockLost: batchv1alpha1.LockLostSuspend, Priority: 5},
			check: func(t *testing.T, lj *batchv1alpha1.LockedJob) {
				want := batchv1alpha1.LockSpec{Name: "l", Scope: batchv1alpha1.LockScopeCluster,
					TTL: &metav1.Duration{Duration: 3 * time.Second}, RenewInterval: &metav1.Duration{Duration: time.Second},
					OnLockLost: batchv1alpha1.LockLostSuspend, Priority: 5}
				if diff := cmp.Diff(want, lj.Spec.Lock); diff != "" {
					t.Errorf("unexpected lock (-want,+got):\n%s", diff)
				}
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) { tc.check(t, NewLockedJob("ns", "x", tc.o)) })
	}
}

// TestNewGuardedJobAsksWhatTheLockedJobAsks: a guarded Job built from the same options runs the
// LockedJob's Job and asks for its lock, as the operator reads a guarded Job's label and annotations.
func TestNewGuardedJobAsksWhatTheLockedJobAsks(t *testing.T) {
	for name, o := range map[string]LockedJobOptions{
		"the lock's name alone": {Lock: "door", Run: 2 * time.Second, App: "fault"},
		"every term of the lock": {Lock: "door", Scope: batchv1alpha1.LockScopeCluster, TTL: 3 * time.Second,
			OnLockLost: batchv1alpha1.LockLostDelete, Priority: -7, Run: 5 * time.Second, Deleting: 8 * time.Second, Fail: true},
	} {
		t.Run(name, func(t *testing.T) {
			job, lj := NewGuardedJob("ns", "g", o), NewLockedJob("ns", "g", o)
			if job.Namespace != "ns" || job.Name != "g" {
				t.Errorf("Job %s/%s, want ns/g", job.Namespace, job.Name)
			}
			if !locks.IsGuardedJob(job) {
				t.Errorf("labels %v: not a guarded Job", job.Labels)
			}
			if diff := cmp.Diff(lj.Spec.JobTemplate.Spec, job.Spec); diff != "" {
				t.Errorf("the guarded Job does not run the LockedJob's Job (-lockedjob,+guarded):\n%s", diff)
			}
			c, err := locks.ClaimantOfJob(job)
			if err != nil {
				t.Fatalf("ClaimantOfJob: %v", err)
			}
			want := lj.Spec.Lock
			want.Scope = want.ScopeOrDefault()
			if diff := cmp.Diff(want, c.Lock); diff != "" {
				t.Errorf("the guarded Job asks for another lock than the LockedJob (-lockedjob,+guarded):\n%s", diff)
			}
		})
	}
}
