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
			if got := tc.other.Token(ClaimantOf(tc.lj)) == id.Token(ClaimantOf(lj)); got != tc.same {
				t.Fatalf("tokens equal = %v, want %v", got, tc.same)
			}
		})
	}
	if tok := id.Token(ClaimantOf(lj)); len(tok) < 40 || strings.Contains(tok, "uid-1") {
		t.Fatalf("token %q should be a 256-bit MAC, not contain the UID", tok)
	}
}

func TestLockKeyScope(t *testing.T) {
	id := Identity{ClusterID: "c"}
	lj := lockedJob("team-a", "x", "u", 0, time.Unix(0, 0))
	// Namespace scope is per cluster: two clusters on one Redis must not block each other's
	// same-named namespaces (issue 9 item 21).
	if got, want := id.LockKey(ClaimantOf(lj)), "ns/c/team-a/db"; got != want {
		t.Fatalf("namespace scope: %q, want %q", got, want)
	}
	if got := (Identity{ClusterID: "d"}).LockKey(ClaimantOf(lj)); got == id.LockKey(ClaimantOf(lj)) {
		t.Fatalf("namespace scope: clusters c and d share key %q", got)
	}
	if got, ok := id.LegacyLockKey(ClaimantOf(lj)); !ok || got != "ns/team-a/db" {
		t.Fatalf("legacy key of namespace scope: %q, %v; want ns/team-a/db, true", got, ok)
	}
	lj.Spec.Lock.Scope = batchv1alpha1.LockScopeCluster
	if got, want := id.LockKey(ClaimantOf(lj)), "cluster/db"; got != want {
		t.Fatalf("cluster scope: %q, want %q", got, want)
	}
	if got := (Identity{ClusterID: "d"}).LockKey(ClaimantOf(lj)); got != id.LockKey(ClaimantOf(lj)) {
		t.Fatalf("cluster scope must be shared across clusters: %q", got)
	}
	if got, ok := id.LegacyLockKey(ClaimantOf(lj)); ok {
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
		if a, b := id.QueueScore(ClaimantOf(order[i-1])), id.QueueScore(ClaimantOf(order[i])); a >= b {
			t.Fatalf("%s (score %.0f) should be served before %s (score %.0f)", order[i-1].Name, a, order[i].Name, b)
		}
	}
}

func TestParseHolderInvertsHolder(t *testing.T) {
	lj := lockedJob("team-a", "x", "0123456789abcdef", 0, time.Unix(0, 0))
	h, ok := ParseHolder(Identity{ClusterID: "c"}.Holder(ClaimantOf(lj)))
	cluster, namespace, name, uid := h.ClusterID, h.Namespace, h.Name, h.UIDPrefix
	if !ok || cluster != "c" || namespace != "team-a" || name != "x" || uid != "01234567" {
		t.Fatalf("ParseHolder = %q %q %q %q %v, want c team-a x 01234567 true", cluster, namespace, name, uid, ok)
	}
	for _, other := range []string{"", "c/team-a/x", "redis-cli"} {
		if _, ok := ParseHolder(other); ok {
			t.Errorf("ParseHolder(%q) is ok; Holder makes no such name", other)
		}
	}
}

// TestLockedJobIdentityIsPinned keeps a LockedJob's key, holder name, token and score what they
// were before other kinds asked for locks: an upgraded operator re-adopts the locks a running one
// holds in Redis only if it derives the same values byte for byte.
func TestLockedJobIdentityIsPinned(t *testing.T) {
	id := Identity{ClusterID: "prod-eu", TokenKey: []byte("0123456789abcdef0123456789abcdef")}
	lj := lockedJob("team-a", "nightly-report", "6f1c2d3e-4b5a-4978-8a9b-0c1d2e3f4a5b", 42, time.Date(2026, 3, 14, 15, 9, 26, 0, time.UTC))
	c := ClaimantOf(lj)
	if got, want := id.LockKey(c), "ns/prod-eu/team-a/db"; got != want {
		t.Errorf("LockKey = %q, want %q", got, want)
	}
	if got, ok := id.LegacyLockKey(c); !ok || got != "ns/team-a/db" {
		t.Errorf("LegacyLockKey = %q, %v; want ns/team-a/db, true", got, ok)
	}
	if got, want := id.Holder(c), "prod-eu/team-a/nightly-report/6f1c2d3e"; got != want {
		t.Errorf("Holder = %q, want %q", got, want)
	}
	if got, want := id.Token(c), "av8Vp3krm6yKwiTvA_QtEdXYev0ZJ6m97ZhxNOJub7U"; got != want {
		t.Errorf("Token = %q, want %q", got, want)
	}
	if got, want := id.QueueScore(c), 9581773500966.0; got != want {
		t.Errorf("QueueScore = %.0f, want %.0f", got, want)
	}
	lj.Spec.Lock.Scope = batchv1alpha1.LockScopeCluster
	if got, want := id.LockKey(ClaimantOf(lj)), "cluster/db"; got != want {
		t.Errorf("LockKey of Cluster scope = %q, want %q", got, want)
	}
}

// TestHolderNamesTellKindsApart: a Job, a Pod and a LockedJob of one name in one namespace hold
// under three names, ParseHolder says which kind each is, and their tokens differ by UID alone.
func TestHolderNamesTellKindsApart(t *testing.T) {
	id := Identity{ClusterID: "c", TokenKey: []byte("0123456789abcdef")}
	base := ClaimantOf(lockedJob("team-a", "x", "0123456789abcdef", 0, time.Unix(0, 0)))
	cases := []struct {
		kind   Kind
		holder string
	}{
		{KindLockedJob, "c/team-a/x/01234567"},
		{KindJob, "c/team-a/job:x/01234567"},
		{KindPod, "c/team-a/pod:x/01234567"},
	}
	seen := map[string]Kind{}
	for _, tc := range cases {
		c := base
		c.Kind = tc.kind
		got := id.Holder(c)
		if got != tc.holder {
			t.Errorf("%s: Holder = %q, want %q", tc.kind, got, tc.holder)
		}
		if other, ok := seen[got]; ok {
			t.Errorf("%s and %s share the holder name %q", other, tc.kind, got)
		}
		seen[got] = tc.kind
		want := HolderName{ClusterID: "c", Kind: tc.kind, Namespace: "team-a", Name: "x", UIDPrefix: "01234567"}
		if h, ok := ParseHolder(got); !ok || h != want {
			t.Errorf("ParseHolder(%q) = %+v, %v; want %+v, true", got, h, ok, want)
		}
		if id.Token(c) != id.Token(base) {
			t.Errorf("%s: the token must depend on cluster and UID only", tc.kind)
		}
		if want := "c/team-a/" + c.ObjectName() + "/01234567"; got != want {
			t.Errorf("%s: ObjectName %q is not the holder name's object part (%q)", tc.kind, c.ObjectName(), got)
		}
	}
	if h, ok := ParseHolder("c/team-a/cron:x/01234567"); ok {
		t.Errorf("ParseHolder of an unknown kind's prefix = %+v, true; no kind makes it", h)
	}
}

// TestQueueCompareBreaksTiesLikeTheQueue: at equal scores Redis serves members in the order of
// their holder names, so a Pod "a" waits behind a LockedJob "m" ("pod:a" > "m"), though "a" < "m".
func TestQueueCompareBreaksTiesLikeTheQueue(t *testing.T) {
	id := Identity{ClusterID: "c"}
	t0 := time.Unix(1000, 0)
	lj := ClaimantOf(lockedJob("n", "m", "1", 0, t0))
	pod := lj
	pod.Kind, pod.Name, pod.UID = KindPod, "a", "2"
	if QueueCompare(lj, pod) >= 0 || id.Holder(lj) >= id.Holder(pod) {
		t.Fatalf("QueueCompare(m, pod a) = %d; want m first, as its holder name %q sorts before %q",
			QueueCompare(lj, pod), id.Holder(lj), id.Holder(pod))
	}
	pod.Created = t0.Add(-time.Second)
	if QueueCompare(pod, lj) >= 0 {
		t.Fatal("the older waiter should be served first, whatever its kind")
	}
}
