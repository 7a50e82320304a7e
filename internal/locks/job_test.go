package locks

import (
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
)

// TestClaimantOfJob: a guarded Job's label and annotations become its claim, and what does not
// parse is refused with the name of the label or annotation at fault.
func TestClaimantOfJob(t *testing.T) {
	created := time.Unix(1_700_000_000, 0)
	job := func(lock string, annotations map[string]string) *batchv1.Job {
		j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "migrate", UID: "uid-1",
			CreationTimestamp: metav1.NewTime(created), Annotations: annotations, Labels: map[string]string{}}}
		if lock != "" {
			j.Labels[batchv1alpha1.LabelGuardLock] = lock
		}
		return j
	}
	a := func(kv ...string) map[string]string {
		m := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	for name, tc := range map[string]struct {
		job     *batchv1.Job
		want    batchv1alpha1.LockSpec
		refused string // the label or annotation the error must name; "" for none
	}{
		"the label alone: Namespace scope, the defaults": {job: job("db", nil),
			want: batchv1alpha1.LockSpec{Name: "db", Scope: batchv1alpha1.LockScopeNamespace}},
		"every annotation": {job: job("team.db", a(batchv1alpha1.AnnotationGuardScope, "Cluster", batchv1alpha1.AnnotationGuardPriority, "-1000",
			batchv1alpha1.AnnotationGuardTTL, "1m30s", batchv1alpha1.AnnotationGuardOnLockLost, "Delete")),
			want: batchv1alpha1.LockSpec{Name: "team.db", Scope: batchv1alpha1.LockScopeCluster, Priority: -1000,
				TTL: &metav1.Duration{Duration: 90 * time.Second}, OnLockLost: batchv1alpha1.LockLostDelete}},
		"no label":                    {job: job("", nil), refused: batchv1alpha1.LabelGuardLock},
		"a label that is not a name":  {job: job("DB_1", nil), refused: batchv1alpha1.LabelGuardLock},
		"an unknown scope":            {job: job("db", a(batchv1alpha1.AnnotationGuardScope, "Everywhere")), refused: batchv1alpha1.AnnotationGuardScope},
		"a priority out of bounds":    {job: job("db", a(batchv1alpha1.AnnotationGuardPriority, "1001")), refused: batchv1alpha1.AnnotationGuardPriority},
		"a priority that is no int":   {job: job("db", a(batchv1alpha1.AnnotationGuardPriority, "high")), refused: batchv1alpha1.AnnotationGuardPriority},
		"a ttl below 1s":              {job: job("db", a(batchv1alpha1.AnnotationGuardTTL, "500ms")), refused: batchv1alpha1.AnnotationGuardTTL},
		"a ttl above 24h":             {job: job("db", a(batchv1alpha1.AnnotationGuardTTL, "25h")), refused: batchv1alpha1.AnnotationGuardTTL},
		"a ttl the API server's only": {job: job("db", a(batchv1alpha1.AnnotationGuardTTL, "1d")), refused: batchv1alpha1.AnnotationGuardTTL},
		"an unknown lock-lost policy": {job: job("db", a(batchv1alpha1.AnnotationGuardOnLockLost, "Pause")), refused: batchv1alpha1.AnnotationGuardOnLockLost},
	} {
		t.Run(name, func(t *testing.T) {
			c, err := ClaimantOfJob(tc.job)
			if tc.refused != "" {
				if err == nil || !strings.Contains(err.Error(), tc.refused) {
					t.Fatalf("ClaimantOfJob = %v, want an error naming %s", err, tc.refused)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := Claimant{Kind: KindJob, Namespace: "ns", Name: "migrate", UID: "uid-1", Created: created, Lock: tc.want}
			if c.Kind != want.Kind || c.Namespace != want.Namespace || c.Name != want.Name || c.UID != want.UID ||
				!c.Created.Equal(want.Created) || c.Lock.Name != want.Lock.Name || c.Lock.Scope != want.Lock.Scope ||
				c.Lock.Priority != want.Lock.Priority || c.Lock.OnLockLost != want.Lock.OnLockLost ||
				(c.Lock.TTL == nil) != (want.Lock.TTL == nil) || (c.Lock.TTL != nil && c.Lock.TTL.Duration != want.Lock.TTL.Duration) {
				t.Fatalf("ClaimantOfJob = %+v, want %+v", c, want)
			}
		})
	}
}

// TestAJobAndALockedJobShareTheKey: a guarded Job and a LockedJob of one lock name and scope in
// one namespace ask for one key, under holder names that never collide.
func TestAJobAndALockedJobShareTheKey(t *testing.T) {
	id := Identity{ClusterID: "c", TokenKey: []byte("0123456789abcdef")}
	j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", UID: "uid-j",
		Labels: map[string]string{batchv1alpha1.LabelGuardLock: "db"}}}
	job, err := ClaimantOfJob(j)
	if err != nil {
		t.Fatal(err)
	}
	lj := ClaimantOf(lockedJob("ns", "a", "uid-l", 0, time.Unix(0, 0)))
	if id.LockKey(job) != id.LockKey(lj) {
		t.Fatalf("keys %q and %q differ", id.LockKey(job), id.LockKey(lj))
	}
	if id.Holder(job) == id.Holder(lj) {
		t.Fatalf("holder names collide: %q", id.Holder(job))
	}
	if h, ok := ParseHolder(id.Holder(job)); !ok || h.Kind != KindJob || h.Name != "a" {
		t.Fatalf("ParseHolder(%q) = %+v, %v", id.Holder(job), h, ok)
	}
}

// TestIsGuardedJob: a Job is guarded by the lock label, unless it is a LockedJob's own Job; the
// cache's selector takes every such Job, and a Kueue queue label sends it to the AdmissionCheck
// instead of the guarded-Job reconciler, never to both.
func TestIsGuardedJob(t *testing.T) {
	const db, lj, batch = "db", "lj", "batch"
	for name, tc := range map[string]struct {
		labels                 map[string]string
		cached, guarded, kueue bool
	}{
		"the lock label":               {labels: map[string]string{batchv1alpha1.LabelGuardLock: db}, cached: true, guarded: true},
		"no label":                     {},
		"a LockedJob's Job":            {labels: map[string]string{batchv1alpha1.LabelLockedJob: lj}},
		"both labels: the LockedJob's": {labels: map[string]string{batchv1alpha1.LabelGuardLock: db, batchv1alpha1.LabelLockedJob: lj}},
		"an empty lock label is asked": {labels: map[string]string{batchv1alpha1.LabelGuardLock: ""}, cached: true, guarded: true},
		"a Kueue queue beside the lock label": {labels: map[string]string{batchv1alpha1.LabelGuardLock: db, LabelKueueQueue: batch},
			cached: true, kueue: true},
		"a Kueue queue alone": {labels: map[string]string{LabelKueueQueue: batch}},
	} {
		t.Run(name, func(t *testing.T) {
			job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Labels: tc.labels}}
			if got := IsGuardedJob(job); got != tc.guarded {
				t.Errorf("IsGuardedJob = %v, want %v", got, tc.guarded)
			}
			if got := IsKueueGuardedJob(job); got != tc.kueue {
				t.Errorf("IsKueueGuardedJob = %v, want %v", got, tc.kueue)
			}
			if got := GuardedJobs().Matches(labels.Set(tc.labels)); got != tc.cached {
				t.Errorf("GuardedJobs().Matches = %v, want %v", got, tc.cached)
			}
		})
	}
}
