package guard

import (
	"errors"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/internal/locks"
)

// TestHeldLockIsTheRecordedOne: a Job (or Pod) let run under a lock keeps that lock until it ends,
// whatever its label and annotations say later, but only a record the Job could have made itself
// counts: a lock of this cluster, and of its own namespace for Namespace scope.
func TestHeldLockIsTheRecordedOne(t *testing.T) {
	id := locks.Identity{ClusterID: "c1", TokenKey: []byte("k")}
	libraryKey := func(redisKey string) (string, bool) {
		rest, ok := strings.CutPrefix(redisKey, "lockedjob:{")
		if !ok || !strings.HasSuffix(rest, "}") {
			return "", false
		}
		return strings.TrimSuffix(rest, "}"), true
	}
	job := func(recordedKey string, finalizers ...string) *batchv1.Job {
		j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "migrate", UID: "u-1",
			Finalizers:  finalizers,
			Labels:      map[string]string{batchv1alpha1.LabelGuardLock: "db"},
			Annotations: map[string]string{}}}
		if recordedKey != "" {
			j.Annotations[batchv1alpha1.AnnotationGuardLockKey] = recordedKey
		}
		return j
	}
	for name, tc := range map[string]struct {
		job      *batchv1.Job
		wantHeld bool
		want     RecordedLock
	}{
		"held under a lock of its namespace": {job: job("lockedjob:{ns/c1/team-a/db}", Finalizer), wantHeld: true,
			want: RecordedLock{Scope: batchv1alpha1.LockScopeNamespace, Name: "db", Key: "lockedjob:{ns/c1/team-a/db}"}},
		"held under a Cluster lock": {job: job("lockedjob:{cluster/db}", Finalizer), wantHeld: true,
			want: RecordedLock{Scope: batchv1alpha1.LockScopeCluster, Name: "db", Key: "lockedjob:{cluster/db}"}},
		"no finalizer: released, or never held": {job: job("lockedjob:{ns/c1/team-a/db}")},
		"no key recorded":                       {job: job("", Finalizer)},
		"another namespace's lock":              {job: job("lockedjob:{ns/c1/team-b/db}", Finalizer)},
		"another cluster's lock":                {job: job("lockedjob:{ns/c2/team-a/db}", Finalizer)},
		"a key of another prefix":               {job: job("other:{ns/c1/team-a/db}", Finalizer)},
	} {
		t.Run(name, func(t *testing.T) {
			got, held := HeldLock(tc.job, id, libraryKey)
			if held != tc.wantHeld || got != tc.want {
				t.Errorf("HeldLock = %+v, %v; want %+v, %v", got, held, tc.want, tc.wantHeld)
			}
		})
	}

	h := RecordedLock{Scope: batchv1alpha1.LockScopeNamespace, Name: "db", Key: "lockedjob:{ns/c1/team-a/db}"}
	j := job(h.Key, Finalizer)
	parsed, err := locks.ClaimantOfJob(j)
	if err != nil {
		t.Fatal(err)
	}
	if c, drift := h.Over(locks.KindJob, j, parsed, nil); drift != "" || c != parsed {
		t.Errorf("a Job that still names its lock: %+v, drift %q; want %+v and none", c, drift, parsed)
	}

	renamed := parsed
	renamed.Lock.Name, renamed.Lock.Scope = "other", batchv1alpha1.LockScopeCluster
	c, drift := h.Over(locks.KindJob, j, renamed, nil)
	if id.LockKey(c) != "ns/c1/team-a/db" || !strings.Contains(drift, "now names lock other (scope Cluster): it keeps lock db") {
		t.Errorf("a Job relabelled while held: key %s, drift %q; want the recorded lock, said so", id.LockKey(c), drift)
	}

	c, drift = h.Over(locks.KindJob, j, locks.Claimant{}, errors.New("annotation batch.lockedjob.dev/ttl: \"soon\" is not a duration"))
	if id.LockKey(c) != "ns/c1/team-a/db" || c.UID != "u-1" || c.Kind != locks.KindJob || c.Lock.TTL != nil ||
		!strings.Contains(drift, "cannot be read (annotation batch.lockedjob.dev/ttl") {
		t.Errorf("a Job whose terms stopped parsing: %+v, drift %q; want the recorded lock on default terms, said so", c, drift)
	}
	if id.Token(c) != id.Token(parsed) || id.Holder(c) != id.Holder(parsed) {
		t.Errorf("the fallback claimant must keep the token and holder it acquired with")
	}
}
