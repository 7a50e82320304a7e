package v1alpha1

import (
	"math/big"
	"regexp"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

var durationRE = regexp.MustCompile(DurationPattern)

// checkDurationPattern fails when DurationPattern and time.ParseDuration disagree on s. The one
// allowed disagreement is a value too large for time.Duration, which the pattern cannot see and the
// CRD's CEL rules refuse (their duration() is time.ParseDuration).
func checkDurationPattern(t *testing.T, s string) {
	t.Helper()
	_, err := time.ParseDuration(s)
	matches := durationRE.MatchString(s)
	switch {
	case matches && err != nil && !beyondInt64(s):
		t.Errorf("pattern accepts %q, time.ParseDuration refuses it: %v", s, err)
	case !matches && err == nil:
		t.Errorf("pattern refuses %q, time.ParseDuration accepts it", s)
	}
}

// beyondInt64 reports whether s, read as a sum of numbers with units the way time.ParseDuration
// reads it, is at least 2^62 nanoseconds: time.ParseDuration refuses only sums past 2^63-1, and any
// element past it makes the sum past it too, so a legitimate refusal is never under 2^62.
func beyondInt64(s string) bool {
	units := map[string]int64{"ns": 1, "us": 1e3, "\u00b5s": 1e3, "\u03bcs": 1e3, "ms": 1e6, "s": 1e9, "m": 60e9, "h": 3600e9}
	elem := regexp.MustCompile(`([0-9]*\.?[0-9]*)([^0-9.]+)`)
	sum := new(big.Rat)
	for _, m := range elem.FindAllStringSubmatch(strings.TrimLeft(s, "+-"), -1) {
		num := m[1]
		if strings.HasSuffix(num, ".") {
			num += "0"
		}
		if strings.HasPrefix(num, ".") {
			num = "0" + num
		}
		v, ok := new(big.Rat).SetString(num)
		if !ok {
			return false
		}
		sum.Add(sum, v.Mul(v, new(big.Rat).SetInt64(units[m[2]])))
	}
	return sum.Cmp(new(big.Rat).SetInt(new(big.Int).Lsh(big.NewInt(1), 62))) >= 0
}

func TestDurationPatternMatchesParseDuration(t *testing.T) {
	for _, s := range []string{
		"", "0", "+0", "-0", "00", "0.0", "1", "1s", "-1s", "+1s", "1.5h", ".5h", "5.s", ".s", "1..5s", "1.5.5s",
		"1h30m", "1h 30m", " 1s", "1s ", "1d", "2 weeks", "1w", "1S", "1H", "1sec", "1hm", "1mh", "1ns1us1µs1μs1ms1s1m1h",
		"1µ", "1μ", "1u", "+-1s", "--1s", "1s-1s", "1e3s", "0x10s", "１s", "1\u00b5s", "1\u03bcs", "-.5s", "+5.s",
		"9223372036854775807ns", "9223372036854775808ns", "-9223372036854775808ns", "2562047h47m16.854775807s",
		"2562047h47m16.854775808s", "2562048h", "9999999999999999999h", "99999999999999999999999999ns",
		"0.000000000000000000000000001s", "1.000000000000000000000000001h", "3m3m3m3m3m3m3m", "1h\n",
	} {
		checkDurationPattern(t, s)
	}
}

// TestDurationPatternExhaustive compares the two on every string of up to five characters over the
// alphabet the grammar uses (with a few strangers), about 300,000 strings.
func TestDurationPatternExhaustive(t *testing.T) {
	alphabet := []string{"0", "7", ".", "-", "+", "n", "u", "\u00b5", "m", "s", "h", "d"}
	var walk func(prefix string, depth int)
	walk = func(prefix string, depth int) {
		checkDurationPattern(t, prefix)
		if depth == 0 || t.Failed() {
			return
		}
		for _, c := range alphabet {
			walk(prefix+c, depth-1)
		}
	}
	walk("", 5)
}

func FuzzDurationPattern(f *testing.F) {
	for _, s := range []string{"1h30m", "1d", "2 weeks", ".5s", "5.s", "1µs", "9223372036854775808ns", "-0", "1h-1m"} {
		f.Add(s)
	}
	f.Fuzz(checkDurationPattern)
}

// TestCRDUsesDurationPattern keeps the CRD's patterns in step with the tested one.
func TestCRDUsesDurationPattern(t *testing.T) {
	lock := crdLockSchema(t)
	for _, field := range []string{"ttl", "renewInterval", "acquireTimeout"} {
		prop := lock.Properties[field]
		if prop.Pattern != DurationPattern {
			t.Errorf("spec.lock.%s has pattern %q, want DurationPattern %q", field, prop.Pattern, DurationPattern)
		}
		if prop.Format != "" {
			t.Errorf("spec.lock.%s has format %q: CEL would then parse it with the API server's lenient parser", field, prop.Format)
		}
		checkGuardedRules(t, "spec.lock."+field, prop.XValidations, 1)
	}
	checkGuardedRules(t, "spec.lock", lock.XValidations, 2)
}

// checkGuardedRules: a CEL rule may call duration() only behind a match of DurationPattern, once
// per duration it parses, or it fails on every update of an object stored before the pattern.
func checkGuardedRules(t *testing.T, where string, rules apiextensionsv1.ValidationRules, durations int) {
	t.Helper()
	guard := ".matches('" + DurationPattern + "')"
	for _, r := range rules {
		if strings.Contains(r.Rule, "duration(self") && strings.Count(r.Rule, guard) < durations {
			t.Errorf("%s: rule %q calls duration() on a string it has not matched against DurationPattern", where, r.Rule)
		}
	}
}
