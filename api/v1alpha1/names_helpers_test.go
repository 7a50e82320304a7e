package v1alpha1

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

// TestLockedJobLabelIsALabelValue: a LockedJob name may have 253 characters, a label value 63.
func TestLockedJobLabelIsALabelValue(t *testing.T) {
	if got := NameLabelValue("db.migrate-2"); got != "db.migrate-2" {
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
			a, b := NameLabelValue(tc.name), NameLabelValue(tc.twin)
			if errs := validation.IsValidLabelValue(a); len(errs) > 0 {
				t.Errorf("NameLabelValue(%q) = %q: %v", tc.name, a, errs)
			}
			if a == b {
				t.Errorf("NameLabelValue(%q) and NameLabelValue(%q) are both %q", tc.name, tc.twin, a)
			}
		})
	}
}
