package locks

import (
	"strings"
	"testing"
	"time"

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
	// Namespace scope is per cluster: two clusters on one Redis must not block each other's
	// same-named namespaces (issue 9 item 21).
	if got, want := id.LockKey(lj), "ns/c/team-a/db"; got != want {
		t.Fatalf("namespace scope: %q, want %q", got, want)
	}
	if got := (Identity{ClusterID: "d"}).LockKey(lj); got == id.LockKey(lj) {
		t.Fatalf("namespace scope: clusters c and d share key %q", got)
	}
	if got, ok := id.LegacyLockKey(lj); !ok || got != "ns/team-a/db" {
		t.Fatalf("legacy key of namespace scope: %q, %v; want ns/team-a/db, true", got, ok)
	}
	lj.Spec.Lock.Scope = batchv1alpha1.LockScopeCluster
	if got, want := id.LockKey(lj), "cluster/db"; got != want {
		t.Fatalf("cluster scope: %q, want %q", got, want)
	}
	if got := (Identity{ClusterID: "d"}).LockKey(lj); got != id.LockKey(lj) {
		t.Fatalf("cluster scope must be shared across clusters: %q", got)
	}
	if got, ok := id.LegacyLockKey(lj); ok {
		t.Fatalf("cluster scope has no legacy key, got %q", got)
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

func TestParseHolderInvertsHolder(t *testing.T) {
	lj := lockedJob("team-a", "x", "0123456789abcdef", 0, time.Unix(0, 0))
	cluster, namespace, name, uid, ok := ParseHolder(Identity{ClusterID: "c"}.Holder(lj))
	if !ok || cluster != "c" || namespace != "team-a" || name != "x" || uid != "01234567" {
		t.Fatalf("ParseHolder = %q %q %q %q %v, want c team-a x 01234567 true", cluster, namespace, name, uid, ok)
	}
	for _, other := range []string{"", "c/team-a/x", "redis-cli"} {
		if _, _, _, _, ok := ParseHolder(other); ok {
			t.Errorf("ParseHolder(%q) is ok; Holder makes no such name", other)
		}
	}
}
