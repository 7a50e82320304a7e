package controllers

import (
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
)

func lockedJob(ns, name, uid string, priority int32, created time.Time) *batchv1alpha1.LockedJob {
	return &batchv1alpha1.LockedJob{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(uid), CreationTimestamp: metav1.NewTime(created)},
		Spec:       batchv1alpha1.LockedJobSpec{Lock: batchv1alpha1.LockSpec{Name: "db", Priority: priority}},
	}
}

func TestTokenIsDerivedAndSecret(t *testing.T) {
	id := Identity{ClusterID: "c1", TokenKey: []byte("0123456789abcdef")}
	lj := lockedJob("ns", "a", "uid-1", 0, time.Unix(0, 0))
	cases := map[string]struct {
		other Identity
		lj    *batchv1alpha1.LockedJob
		same  bool
	}{
		"same key and object":        {id, lockedJob("ns", "a", "uid-1", 0, time.Unix(0, 0)), true},
		"recreated object (new UID)": {id, lockedJob("ns", "a", "uid-2", 0, time.Unix(0, 0)), false},
		"another cluster":            {Identity{ClusterID: "c2", TokenKey: id.TokenKey}, lj, false},
		"another key":                {Identity{ClusterID: "c1", TokenKey: []byte("fedcba9876543210")}, lj, false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := tc.other.Token(tc.lj) == id.Token(lj); got != tc.same {
				t.Fatalf("tokens equal = %v, want %v", got, tc.same)
			}
		})
	}
	if tok := id.Token(lj); len(tok) < 40 || strings.Contains(tok, "uid-1") {
		t.Fatalf("token %q should be a 256-bit MAC, not contain the UID", tok)
	}
}

func TestLockKeyScope(t *testing.T) {
	id := Identity{ClusterID: "c"}
	lj := lockedJob("team-a", "x", "u", 0, time.Unix(0, 0))
	if got, want := id.LockKey(lj), "ns/team-a/db"; got != want {
		t.Fatalf("namespace scope: %q, want %q", got, want)
	}
	lj.Spec.Lock.Scope = batchv1alpha1.LockScopeCluster
	if got, want := id.LockKey(lj), "cluster/db"; got != want {
		t.Fatalf("cluster scope: %q, want %q", got, want)
	}
}

func TestQueueScoreOrdersByPriorityThenAge(t *testing.T) {
	id := Identity{}
	t0 := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	// In serving order: highest priority first, then the oldest.
	order := []*batchv1alpha1.LockedJob{
		lockedJob("n", "urgent-new", "1", 1000, t0.Add(time.Hour)),
		lockedJob("n", "high", "2", 10, t0.Add(time.Minute)),
		lockedJob("n", "old", "3", 0, t0),
		lockedJob("n", "new", "4", 0, t0.Add(time.Second)),
		lockedJob("n", "low-old", "5", -1000, t0.Add(-24*time.Hour)),
	}
	for i := 1; i < len(order); i++ {
		if a, b := id.QueueScore(order[i-1]), id.QueueScore(order[i]); a >= b {
			t.Fatalf("%s (score %.0f) should be served before %s (score %.0f)", order[i-1].Name, a, order[i].Name, b)
		}
	}
}

func TestJobNameFitsAndChangesWithFence(t *testing.T) {
	long := lockedJob("n", strings.Repeat("a", 253), "u", 0, time.Unix(0, 0))
	name := jobName(long, 1796078263000000)
	if len(name) > 63 {
		t.Fatalf("job name %q is %d characters; Job names allow 63", name, len(name))
	}
	short := lockedJob("n", "nightly", "u", 0, time.Unix(0, 0))
	if a, b := jobName(short, 41), jobName(short, 42); a == b || a != "nightly-15" {
		t.Fatalf("job names %q and %q: want distinct, first nightly-15", a, b)
	}
}

func TestBuildJobCarriesTheLock(t *testing.T) {
	lj := lockedJob("n", "migrate", "uid", 0, time.Unix(0, 0))
	lj.Spec.JobTemplate = batchv1alpha1.JobTemplate{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"team": "db"}, Annotations: map[string]string{"note": "x"}},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "init", Env: []corev1.EnvVar{{Name: "KEEP", Value: "1"}}}},
			Containers:     []corev1.Container{{Name: "a"}, {Name: "b"}},
		}}},
	}
	job, err := buildJob(lj, "migrate-15", 41, "c/n/migrate/uid", testSchemeForUnit(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range append(job.Spec.Template.Spec.InitContainers, job.Spec.Template.Spec.Containers...) {
		env := map[string]string{}
		for _, e := range c.Env {
			env[e.Name] = e.Value
		}
		if env[batchv1alpha1.EnvFencingToken] != "41" || env[batchv1alpha1.EnvLock] != "db" || env[batchv1alpha1.EnvHolder] != "c/n/migrate/uid" {
			t.Fatalf("container %s env %v lacks the lock", c.Name, env)
		}
	}
	if job.Spec.Template.Spec.InitContainers[0].Env[0].Name != "KEEP" {
		t.Fatal("template env was not kept")
	}
	if job.Labels["team"] != "db" || job.Labels[batchv1alpha1.LabelLockedJob] != "migrate" || job.Annotations["note"] != "x" ||
		job.Annotations[batchv1alpha1.AnnotationFencingToken] != "41" {
		t.Fatalf("labels %v annotations %v", job.Labels, job.Annotations)
	}
	if lj.Spec.JobTemplate.Spec.Template.Spec.Containers[0].Env != nil || lj.Spec.JobTemplate.Labels[batchv1alpha1.LabelLockedJob] != "" {
		t.Fatal("buildJob changed the LockedJob's template")
	}
	if len(job.OwnerReferences) != 1 || job.OwnerReferences[0].UID != "uid" || !*job.OwnerReferences[0].Controller {
		t.Fatalf("owner references %v", job.OwnerReferences)
	}
}
