package measure

import (
	"slices"
	"strings"
	"testing"
	"time"
)

const metricsText = `# HELP apiserver_request_total [STABLE] Counter of apiserver requests
# TYPE apiserver_request_total counter
apiserver_request_total{code="201",component="apiserver",dry_run="",group="batch",resource="jobs",scope="resource",subresource="",verb="POST",version="v1"} 10
apiserver_request_total{code="409",component="apiserver",dry_run="",group="batch",resource="jobs",scope="resource",subresource="",verb="POST",version="v1"} 2
apiserver_request_total{code="200",component="apiserver",dry_run="",group="batch.lockedjob.dev",resource="lockedjobs",scope="resource",subresource="status",verb="PATCH",version="v1alpha1"} 7
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="namespace",subresource="",verb="LIST",version="v1"} 99
apiserver_request_total{code="201",component="apiserver",dry_run="All",group="batch",resource="jobs",scope="resource",subresource="",verb="POST",version="v1"} 4
apiserver_request_total_other{verb="POST"} 5
`

func TestParseRequestsSumsCodesAndKeepsSubresources(t *testing.T) {
	r, err := ParseRequests(metricsText)
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Count("POST", "jobs", ""); got != 12 {
		t.Errorf("POST jobs = %v, want 12 (both codes)", got)
	}
	if got := r.Count("PATCH", "lockedjobs", "status"); got != 7 {
		t.Errorf("PATCH lockedjobs/status = %v, want 7", got)
	}
	if got := r.Writes(nil); got != 19 {
		t.Errorf("writes = %v, want 19 (LIST is not a write, a dry run is not stored, the other metric is not read)", got)
	}
	if got := r.DryRuns(); got != 4 {
		t.Errorf("dry runs = %v, want 4", got)
	}
}

func TestLinesSplitWritesFromReads(t *testing.T) {
	r, err := ParseRequests(metricsText)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"POST jobs", "PATCH lockedjobs/status", "POST jobs (dry run)"}
	if got := names(r.WriteLines()); !slices.Equal(got, want) {
		t.Errorf("write lines = %q, want %q (largest first; dry runs with the writes)", got, want)
	}
	if got := names(r.ReadLines()); !slices.Equal(got, []string{"LIST pods"}) {
		t.Errorf("read lines = %q, want only LIST pods", got)
	}
}

// names drops the counts from lines of WriteLines or ReadLines.
func names(lines []string) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = strings.TrimSpace(strings.TrimRightFunc(l, func(r rune) bool { return r >= '0' && r <= '9' }))
	}
	return out
}

func TestParseRequestsRefusesGarbage(t *testing.T) {
	for _, text := range []string{
		"",
		`apiserver_request_total{verb="POST",resource="jobs"} abc`,
		`apiserver_request_total{verb=POST} 1`,
		`apiserver_request_total{verb="POST} 1`,
	} {
		if _, err := ParseRequests(text); err == nil {
			t.Errorf("ParseRequests(%q) succeeded", text)
		}
	}
}

func TestRequestsSubKeepsOnlyChanges(t *testing.T) {
	before := Requests{{Verb: "POST", Resource: "jobs", Subresource: ""}: 10, {Verb: "PATCH", Resource: "leases", Subresource: ""}: 4}
	after := Requests{{Verb: "POST", Resource: "jobs", Subresource: ""}: 25, {Verb: "PATCH", Resource: "leases", Subresource: ""}: 4, {Verb: "DELETE", Resource: "pods", Subresource: ""}: 3}
	d := after.Sub(before)
	if len(d) != 2 || d.Count("POST", "jobs", "") != 15 || d.Count("DELETE", "pods", "") != 3 {
		t.Errorf("delta = %v", d)
	}
}

func TestParseCommandStats(t *testing.T) {
	info := "# Commandstats\r\ncmdstat_evalsha:calls=30,usec=900,usec_per_call=30.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_info:calls=4,usec=10\r\ncmdstat_publish:calls=5,usec=10\r\ncmdstat_eval:calls=2,usec=10\r\n"
	c, err := ParseCommandStats(info)
	if err != nil {
		t.Fatal(err)
	}
	before := CommandStats{"evalsha": 10, "info": 1}
	d := c.Sub(before)
	if d.Scripts() != 22 {
		t.Errorf("scripts = %d, want 22", d.Scripts())
	}
	if d.Operations() != 27 {
		t.Errorf("operations = %d, want 27 (INFO left out)", d.Operations())
	}
	if _, err := ParseCommandStats("cmdstat_get:usec=1"); err == nil {
		t.Error("a line without calls was accepted")
	}
}

func TestPercentileNearestRank(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	for p, want := range map[float64]time.Duration{50: 50 * time.Millisecond, 90: 90 * time.Millisecond,
		99: 99 * time.Millisecond, 100: 100 * time.Millisecond, 0: time.Millisecond} {
		if got := Percentile(ds, p); got != want {
			t.Errorf("p%v = %v, want %v", p, got, want)
		}
	}
	if Percentile(nil, 50) != 0 {
		t.Error("percentile of nothing is not 0")
	}
}

var t0 = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

func TestCheckExclusionAcceptsCleanChains(t *testing.T) {
	runs := []Run{
		{Lock: "a", Job: "a2", Fence: 5, Created: at(2.1), Completed: at(3)},
		{Lock: "a", Job: "a1", Fence: 3, Created: at(0), Completed: at(2)},
		{Lock: "b", Job: "b1", Fence: 1, Created: at(0.5), Completed: at(1.5)},
		{Lock: "a", Job: "a3", Fence: 6, Created: at(3), Completed: time.Time{}}, // the last may still run
	}
	if v := CheckExclusion(runs); len(v) != 0 {
		t.Fatalf("violations in a clean history: %v", v)
	}
	gaps := HandoffGaps(runs)
	if len(gaps) != 2 || Percentile(gaps, 100) != 100*time.Millisecond || Percentile(gaps, 0) != 0 {
		t.Errorf("gaps = %v, want [100ms 0s]", gaps)
	}
	if q := QueuedHandoffGaps(runs); len(q) != 0 {
		t.Errorf("queued gaps = %v, want none: no successor was seen Waiting", q)
	}
	runs[0].Queued = at(1) // a2 waited before a1 finished; a3 did not
	if q := QueuedHandoffGaps(runs); len(q) != 1 || q[0] != 100*time.Millisecond {
		t.Errorf("queued gaps = %v, want [100ms]", q)
	}
	first := FirstJobDelays(runs, at(0))
	if len(first) != 2 || Percentile(first, 100) != 500*time.Millisecond {
		t.Errorf("first Job delays = %v, want 0s and 500ms", first)
	}
}

// TestExclusionFromThePodsOutcome: a Job's work ends when its pod succeeds, before its Complete; a
// successor between the two is a handoff, not a breach, and its gap counts from the pod.
func TestExclusionFromThePodsOutcome(t *testing.T) {
	runs := []Run{
		{Lock: "a", Job: "a1", Fence: 3, Created: at(0), PodSucceeded: at(1), Completed: at(2)},
		{Lock: "a", Job: "a2", Fence: 4, Created: at(1.2), Completed: at(3)}, // its pod was never seen
	}
	if v := CheckExclusion(runs); len(v) != 0 {
		t.Fatalf("violations: %v", v)
	}
	if gaps := HandoffGaps(runs); len(gaps) != 1 || gaps[0] != 200*time.Millisecond {
		t.Errorf("gaps = %v, want [200ms] from the pod's success", gaps)
	}
	if e := runs[1].Ended(); !e.Equal(at(3)) {
		t.Errorf("a run without its pod seen ended %v, want its Complete", e)
	}
	runs[1].Created = at(0.9) // before a1's pod succeeded
	if v := CheckExclusion(runs); len(v) != 1 {
		t.Errorf("violations = %v, want the one before the pod's outcome", v)
	}
}

// TestExclusionByResourceVersion: where the writes' resource versions are known they decide the
// order, not the watches' arrival times, in both directions.
func TestExclusionByResourceVersion(t *testing.T) {
	runs := []Run{
		{Lock: "a", Job: "a1", Fence: 3, Created: at(0), CreatedRV: 10, PodSucceeded: at(1.0001), PodSucceededRV: 20},
		// Seen 100µs before a1's pod, written after it.
		{Lock: "a", Job: "a2", Fence: 4, Created: at(1), CreatedRV: 21, Completed: at(3), CompletedRV: 30},
	}
	if v := CheckExclusion(runs); len(v) != 0 {
		t.Errorf("violations = %v: the writes were in order", v)
	}
	if gaps := HandoffGaps(runs); len(gaps) != 1 || gaps[0] != 0 {
		t.Errorf("gaps = %v, want [0]: in order, seen a moment out of it", gaps)
	}
	runs[1].Created, runs[1].CreatedRV = at(1.5), 19 // seen after, written before
	if v := CheckExclusion(runs); len(v) != 1 {
		t.Errorf("violations = %v, want the one written before a1's pod succeeded", v)
	}
	runs[0].PodSucceededRV = 0 // unknown: the times decide
	if v := CheckExclusion(runs); len(v) != 0 {
		t.Errorf("violations = %v, want none by the times", v)
	}
}

func TestCheckExclusionFindsEveryBreach(t *testing.T) {
	cases := map[string][]Run{
		"fence not increasing": {
			{Lock: "a", Job: "a1", Fence: 3, Created: at(0), Completed: at(1)},
			{Lock: "a", Job: "a2", Fence: 3, Created: at(2), Completed: at(3)},
		},
		"overlap": {
			{Lock: "a", Job: "a1", Fence: 3, Created: at(0), Completed: at(2)},
			{Lock: "a", Job: "a2", Fence: 4, Created: at(1), Completed: at(3)},
		},
		"predecessor never finished": {
			{Lock: "a", Job: "a1", Fence: 3, Created: at(0)},
			{Lock: "a", Job: "a2", Fence: 4, Created: at(5), Completed: at(6)},
		},
	}
	for name, runs := range cases {
		v := CheckExclusion(runs)
		if len(v) != 1 || !strings.Contains(v[0], "lock a") {
			t.Errorf("%s: violations = %v, want one about lock a", name, v)
		}
		if len(HandoffGaps(runs)) != 0 {
			t.Errorf("%s: a breach counted as a handoff gap", name)
		}
	}
}

func TestTableArithmetic(t *testing.T) {
	plain := Result{Scenario: "plain", Objects: 100, Goal: "Succeeded", Done: 100, Wall: 20 * time.Second,
		Usage: Usage{API: Requests{{Verb: "POST", Resource: "jobs", Subresource: ""}: 100, {Verb: "POST", Resource: "pods", Subresource: ""}: 100, {Verb: "GET", Resource: "jobs", Subresource: ""}: 5000}}}
	locked := Result{Scenario: "shared", Objects: 100, Locks: 10, Goal: "Succeeded", Done: 100, Wall: 50 * time.Second,
		Usage: Usage{
			API: Requests{{Verb: "POST", Resource: "lockedjobs", Subresource: ""}: 100, {Verb: "PATCH", Resource: "lockedjobs", Subresource: "status"}: 350,
				{Verb: "POST", Resource: "events", Subresource: ""}: 250, {Verb: "PATCH", Resource: "leases", Subresource: ""}: 40},
			Redis:        CommandStats{"evalsha": 900, "pexpire": 400, "publish": 100, "info": 7},
			OperatorCPU:  3 * time.Second,
			APIServerCPU: 14 * time.Second,
		},
		Gaps:     []time.Duration{10 * time.Millisecond, 20 * time.Millisecond, 30 * time.Millisecond},
		Versions: []int{3, 4, 11},
		Delete:   &Phase{Wall: 4 * time.Second, Usage: Usage{API: Requests{{Verb: "DELETE", Resource: "lockedjobs", Subresource: ""}: 100, {Verb: "PATCH", Resource: "lockedjobs", Subresource: ""}: 100}}},
		Window: &Window{Length: 10 * time.Second, Usage: Usage{API: Requests{{Verb: "PATCH", Resource: "lockedjobs", Subresource: "status"}: 25},
			OperatorCPU: 500 * time.Millisecond}},
	}
	// A guarded Job's writes are a plain Job's plus the operator's PATCHes of the Job itself, which
	// the Job controller's status writes must not hide.
	guarded := Result{Scenario: "guarded-shared", Objects: 100, Locks: 10, Goal: "Succeeded", Done: 100, Wall: 40 * time.Second,
		Usage: Usage{API: Requests{{Verb: "POST", Resource: "jobs", Subresource: ""}: 100, {Verb: "PATCH", Resource: "jobs", Subresource: ""}: 200,
			{Verb: "PUT", Resource: "jobs", Subresource: "status"}: 400, {Verb: "PATCH", Resource: "jobs", Subresource: "status"}: 50}}}
	table := Table([]Result{plain, locked, guarded})
	for label, want := range map[string][]string{
		"× plain Jobs":                        {"1.00×", "2.50×", "2.00×"},
		"jobs (+status) / object":             {"1.00", "0.00", "7.50"},
		"of which jobs PATCH (not status)":    {"0.00", "0.00", "2.00"},
		"exclusion violations":                {"—", "0", "0"},
		"API writes / object (all clients)":   {"2.00", "7.40", "7.50"},
		"of which lockedjobs/status PATCH":    {"0.00", "3.50", "0.00"},
		"Redis commands / object (scripts)":   {"0.00 (0.00)", "14.00 (9.00)", "0.00 (0.00)"}, // INFO left out
		"scripts beyond renewals / object":    {"0.00", "7.00", "0.00"},
		"kube-apiserver CPU / object":         {"0.0 ms", "140 ms", "0.0 ms"},
		"LockedJob versions seen: mean / max": {"—", "6.00 / 11", "—"},
		"handoff gap p50 / p90 / p99 (n)":     {"—", "20 ms / 30 ms / 30 ms (3)", "—"},
		"delete all: API writes / object":     {"—", "2.00", "—"},
		"lockedjobs/status PATCH / s":         {"—", "2.50", "—"},
		"operator CPU % of a core":            {"—", "5.00 %", "—"},
	} {
		if got := cellsOf(table, label); !slices.Equal(got, want) {
			t.Errorf("row %q = %q, want %q\n%s", label, got, want, table)
		}
	}
	lines := strings.Split(strings.TrimSpace(table), "\n")
	for _, l := range lines {
		if len([]rune(l)) != len([]rune(lines[0])) {
			t.Fatalf("ragged table line %q", l)
		}
	}
}

// cellsOf returns the cells after the label of the table row whose label is label.
func cellsOf(table, label string) []string {
	for line := range strings.SplitSeq(table, "\n") {
		parts := strings.Split(strings.Trim(line, "|"), "|")
		if len(parts) < 2 || strings.TrimSpace(parts[0]) != label {
			continue
		}
		var out []string
		for _, c := range parts[1:] {
			out = append(out, strings.TrimSpace(c))
		}
		return out
	}
	return nil
}
