package controllers

import (
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

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

// TestJobNameIsADNSLabel: the Job API puts the Job's name into pod labels and, for Indexed Jobs,
// pod host names, so it must be a DNS-1123 label whatever the LockedJob is called (issue 9 item 14).
// Names that need shortening or cleaning must still differ between LockedJobs.
func TestJobNameIsADNSLabel(t *testing.T) {
	const fence = 1796078263000000 // a clock-sized fence: the longest suffix in practice
	cases := map[string]struct{ name, twin string }{
		"longest name":                     {strings.Repeat("a", 253), strings.Repeat("a", 252) + "b"},
		"dots":                             {"db.migrate", "db-migrate"},
		"dot where truncation cuts":        {strings.Repeat("a", 51) + "." + strings.Repeat("b", 20), strings.Repeat("a", 51) + "-" + strings.Repeat("b", 20)},
		"dash where truncation cuts":       {strings.Repeat("a", 51) + "-" + strings.Repeat("b", 20), strings.Repeat("a", 51) + "-" + strings.Repeat("b", 19) + "c"},
		"dotted label at the limit":        {strings.Repeat("a", 63) + "." + strings.Repeat("b", 63), strings.Repeat("a", 63) + "." + strings.Repeat("b", 62)},
		"dashes and dots mixed":            {"a-.b", "a.-b"},
		"exactly fits":                     {strings.Repeat("x", 63-len("-"+strconv.FormatInt(fence, 36))), strings.Repeat("x", 62-len("-"+strconv.FormatInt(fence, 36)))},
		"one over":                         {strings.Repeat("x", 64-len("-"+strconv.FormatInt(fence, 36))), strings.Repeat("x", 63-len("-"+strconv.FormatInt(fence, 36)))},
		"digits only":                      {"123", "1.23"},
		"upper case (not from API server)": {"Nightly", "nightly"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			for _, f := range []int64{0, 1, fence, math.MaxInt64, math.MinInt64} {
				a := jobName(lockedJob("n", tc.name, "u", 0, time.Unix(0, 0)), f)
				b := jobName(lockedJob("n", tc.twin, "u", 0, time.Unix(0, 0)), f)
				if errs := validation.IsDNS1123Label(a); len(errs) > 0 {
					t.Errorf("jobName(%q, %d) = %q: %v", tc.name, f, a, errs)
				}
				if a == b {
					t.Errorf("jobName(%q) and jobName(%q) are both %q at fence %d", tc.name, tc.twin, a, f)
				}
			}
		})
	}
}

// TestLockedJobLabelIsALabelValue: a LockedJob name may have 253 characters, a label value 63.
func TestLockedJobLabelIsALabelValue(t *testing.T) {
	if got := lockedJobLabel("db.migrate-2"); got != "db.migrate-2" {
		t.Fatalf("a name that is a label value stays as it is, got %q", got)
	}
	cases := map[string]struct{ name, twin string }{
		"longest name":               {strings.Repeat("a", 253), strings.Repeat("a", 252) + "b"},
		"64 characters":              {strings.Repeat("a", 64), strings.Repeat("a", 63) + "b"},
		"dot where truncation cuts":  {strings.Repeat("a", 54) + "." + strings.Repeat("b", 20), strings.Repeat("a", 54) + "-" + strings.Repeat("b", 20)},
		"dash where truncation cuts": {strings.Repeat("a", 54) + "-" + strings.Repeat("b", 20), strings.Repeat("a", 54) + "-" + strings.Repeat("c", 20)},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			a, b := lockedJobLabel(tc.name), lockedJobLabel(tc.twin)
			if errs := validation.IsValidLabelValue(a); len(errs) > 0 {
				t.Errorf("lockedJobLabel(%q) = %q: %v", tc.name, a, errs)
			}
			if a == b {
				t.Errorf("lockedJobLabel(%q) and lockedJobLabel(%q) are both %q", tc.name, tc.twin, a)
			}
		})
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

// TestBuildJobLongNameLabel: the owner label fits a label value and the annotation keeps the name.
func TestBuildJobLongNameLabel(t *testing.T) {
	lj := lockedJob("n", strings.Repeat("a", 253), "uid", 0, time.Unix(0, 0))
	job, err := buildJob(lj, "j", 41, "h", testSchemeForUnit(t))
	if err != nil {
		t.Fatal(err)
	}
	if got := job.Labels[batchv1alpha1.LabelLockedJob]; got != lockedJobLabel(lj.Name) || len(validation.IsValidLabelValue(got)) > 0 {
		t.Fatalf("label %s = %q, want the valid %q", batchv1alpha1.LabelLockedJob, got, lockedJobLabel(lj.Name))
	}
	if got := job.Annotations[batchv1alpha1.AnnotationLockedJob]; got != lj.Name {
		t.Fatalf("annotation %s = %q, want the full name", batchv1alpha1.AnnotationLockedJob, got)
	}
}

// TestBuildJobRunsAtOnceOnePodAtATime: a suspended Job would hold the lock while nothing runs
// (item 18); a replacement pod must not start beside a terminating one with the same token
// (item 20); a manual selector or another controller would hide the pods the operator waits for
// (item 16). The CRD refuses these in new objects; buildJob also covers objects stored before.
func TestBuildJobRunsAtOnceOnePodAtATime(t *testing.T) {
	cases := map[string]struct {
		spec        batchv1.JobSpec
		replacement batchv1.PodReplacementPolicy
	}{
		"defaults": {batchv1.JobSpec{}, batchv1.Failed},
		"suspended, manual selector, other manager": {batchv1.JobSpec{
			Suspend:        ptr.To(true),
			ManualSelector: ptr.To(true),
			Selector:       &metav1.LabelSelector{MatchLabels: map[string]string{"a": "b"}},
			ManagedBy:      ptr.To("example.com/elsewhere"),
		}, batchv1.Failed},
		"replacement policy chosen by the template": {batchv1.JobSpec{
			PodReplacementPolicy: ptr.To(batchv1.TerminatingOrFailed),
		}, batchv1.TerminatingOrFailed},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			lj := lockedJob("n", "run", "uid", 0, time.Unix(0, 0))
			lj.Spec.JobTemplate.Spec = tc.spec
			job, err := buildJob(lj, "run-15", 41, "h", testSchemeForUnit(t))
			if err != nil {
				t.Fatal(err)
			}
			s := job.Spec
			if s.Suspend == nil || *s.Suspend {
				t.Errorf("suspend = %v, want false", s.Suspend)
			}
			if s.PodReplacementPolicy == nil || *s.PodReplacementPolicy != tc.replacement {
				t.Errorf("podReplacementPolicy = %v, want %s", s.PodReplacementPolicy, tc.replacement)
			}
			if s.ManualSelector != nil || s.Selector != nil || s.ManagedBy != nil {
				t.Errorf("manualSelector %v, selector %v, managedBy %v: want all unset", s.ManualSelector, s.Selector, s.ManagedBy)
			}
		})
	}
}
