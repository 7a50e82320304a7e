package lockedjob

import (
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
)

// lockedJob is a LockedJob called name in namespace n, on lock db.
func lockedJob(name, uid string) *batchv1alpha1.LockedJob {
	return &batchv1alpha1.LockedJob{
		ObjectMeta: metav1.ObjectMeta{Namespace: "n", Name: name, UID: types.UID(uid), CreationTimestamp: metav1.NewTime(time.Unix(0, 0))},
		Spec:       batchv1alpha1.LockedJobSpec{Lock: batchv1alpha1.LockSpec{Name: "db"}},
	}
}

func TestJobNameFitsAndChangesWithFence(t *testing.T) {
	long := lockedJob(strings.Repeat("a", 253), "u")
	name := jobName(long, 1796078263000000)
	if len(name) > 63 {
		t.Fatalf("job name %q is %d characters; Job names allow 63", name, len(name))
	}
	short := lockedJob("nightly", "u")
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
				a := jobName(lockedJob(tc.name, "u"), f)
				b := jobName(lockedJob(tc.twin, "u"), f)
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
