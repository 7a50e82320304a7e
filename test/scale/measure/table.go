package measure

import (
	"fmt"
	"strings"
	"time"
)

// Result is what one scenario measured.
type Result struct {
	Scenario string
	Objects  int
	Locks    int // 0: plain Jobs, no lock
	// Kueue: the Jobs ran in Kueue's queues (one per lock) under Kueue's manager, which the
	// controller rows then measure instead of lockedjob's operator.
	Kueue bool
	// Goal names what Wall waited for: "Succeeded", or "Running" for a steady-state scenario.
	Goal     string
	Done     int // objects that reached the goal
	Failed   int // objects that ended otherwise (Failed, LockLost)
	Wall     time.Duration
	FirstJob []time.Duration // per lock (per Job for plain Jobs): start to first Job seen
	// StartDelays are, per Job, its object first seen to the Job able to run (StartDelays).
	StartDelays []time.Duration

	Usage      // from the first create to the goal
	Gaps       []time.Duration
	QueuedGaps []time.Duration // handoffs to a successor already Waiting (QueuedHandoffGaps)
	Violations []string
	// Versions counts, per LockedJob, the versions its watch saw (creation, metadata and
	// status writes): the spread shows writes that grow with a queue's depth.
	Versions []int

	// Noise names another heavy job seen running while the scenario ran ("" if none).
	Noise string

	Kills    int      // operator SIGKILLs while the scenario ran (-kill-every)
	LeftKeys []string // Redis keys of the scenario's locks left after deletion, beyond fences and permits

	Delete *Phase  // deleting every object until nothing is left
	Window *Window // steady state after the goal
}

// Usage is what a phase cost the API server, Redis and the processes.
type Usage struct {
	API          Requests
	Redis        CommandStats
	OperatorCPU  time.Duration
	OperatorRSS  int64 // the highest resident set sampled, bytes
	APIServerCPU time.Duration
	KCMCPU       time.Duration
}

// Phase is a timed part of a scenario.
type Phase struct {
	Wall time.Duration
	Usage
}

// Window is a fixed stretch of steady state.
type Window struct {
	Length time.Duration
	Usage
}

// row is one line of the table: a label and how to show it for one scenario ("" when the row does
// not apply).
type row struct {
	label string
	cell  func(r Result, plain *Result) string
}

func perObject(v float64, r Result) string {
	if r.Objects == 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f", v/float64(r.Objects))
}

func perSecond(v float64, d time.Duration) string {
	if d <= 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f", v/d.Seconds())
}

func seconds(d time.Duration) string { return fmt.Sprintf("%.1f s", d.Seconds()) }

func millis(d time.Duration) string {
	if d < 10*time.Millisecond {
		return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond))
}

func mib(b int64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }

const verbPatch = "PATCH"

func isStatusPatch(k RequestKey) bool {
	return k.Resource == "lockedjobs" && k.Subresource == "status" && k.Verb == verbPatch
}

func isEvent(k RequestKey) bool { return k.Resource == "events" }
func isJob(k RequestKey) bool   { return k.Resource == "jobs" }
func isPod(k RequestKey) bool   { return k.Resource == "pods" }
func isLease(k RequestKey) bool { return k.Resource == "leases" }
func isKueue(k RequestKey) bool {
	switch k.Resource {
	case "workloads", "clusterqueues", "localqueues", "resourceflavors":
		return true
	}
	return false
}
func isLocked(k RequestKey) bool { return k.Resource == "lockedjobs" }

// isJobPatch matches PATCHes of Jobs themselves, not their status: the operator's writes to a
// guarded Job (the unsuspend and the release), which the Job controller's status writes would hide
// in the jobs row.
func isJobPatch(k RequestKey) bool {
	return k.Resource == "jobs" && k.Subresource == "" && k.Verb == verbPatch
}

// writes counts r's write requests matching m, per object.
func writes(m func(RequestKey) bool) func(Result, *Result) string {
	return func(r Result, _ *Result) string { return perObject(r.API.Writes(m), r) }
}

var rows = []row{
	{"objects (locks)", func(r Result, _ *Result) string {
		switch {
		case r.Locks == 0:
			return fmt.Sprintf("%d (plain Jobs)", r.Objects)
		case r.Kueue:
			return fmt.Sprintf("%d (%d Kueue queues)", r.Objects, r.Locks)
		}
		return fmt.Sprintf("%d (%d)", r.Objects, r.Locks)
	}},
	{"machine shared with another job", func(r Result, _ *Result) string {
		if r.Noise == "" {
			return "no"
		}
		return "yes"
	}},
	{"done / failed", func(r Result, _ *Result) string { return fmt.Sprintf("%d / %d", r.Done, r.Failed) }},
	{"wall: first create to all at goal", func(r Result, _ *Result) string { return seconds(r.Wall) + " (" + r.Goal + ")" }},
	{"  × plain Jobs", func(r Result, plain *Result) string {
		if plain == nil || plain.Wall <= 0 || r.Goal != plain.Goal {
			return "—"
		}
		return fmt.Sprintf("%.2f×", r.Wall.Seconds()/plain.Wall.Seconds())
	}},
	{"first Job per lock: p50 / max", func(r Result, _ *Result) string {
		if len(r.FirstJob) == 0 {
			return "—"
		}
		return seconds(Percentile(r.FirstJob, 50)) + " / " + seconds(Percentile(r.FirstJob, 100))
	}},
	{"object to Job able to run: p50 / p99", func(r Result, _ *Result) string {
		if len(r.StartDelays) == 0 {
			return "—"
		}
		return seconds(Percentile(r.StartDelays, 50)) + " / " + seconds(Percentile(r.StartDelays, 99))
	}},
	{"API writes / object (all clients)", writes(nil)},
	{"  dry runs / object (not stored)", func(r Result, _ *Result) string { return perObject(r.API.DryRuns(), r) }},
	{"  lockedjobs (+status) / object", writes(isLocked)},
	{"  of which lockedjobs/status PATCH", writes(isStatusPatch)},
	{"  LockedJob versions seen: mean / max", func(r Result, _ *Result) string {
		if len(r.Versions) == 0 {
			return "—"
		}
		sum, most := 0, 0
		for _, v := range r.Versions {
			sum += v
			most = max(most, v)
		}
		return fmt.Sprintf("%.2f / %d", float64(sum)/float64(len(r.Versions)), most)
	}},
	{"  Kueue's objects (workloads, queues) / object", writes(isKueue)},
	{"  events / object", writes(isEvent)},
	{"  jobs (+status) / object", writes(isJob)},
	{"  of which jobs PATCH (not status)", writes(isJobPatch)},
	{"  pods (+status, binding) / object", writes(isPod)},
	{"  leases (background, total)", func(r Result, _ *Result) string { return fmt.Sprintf("%.0f", r.API.Writes(isLease)) }},
	{"Redis commands / object (scripts)", func(r Result, _ *Result) string {
		return perObject(float64(r.Redis.Operations()), r) + " (" + perObject(float64(r.Redis.Scripts()), r) + ")"
	}},
	// The calls the operator makes for a LockedJob, one script each (acquire, wait, release, ...),
	// without the keeper's renewals, which last as long as the Job runs.
	{"  scripts beyond renewals / object", func(r Result, _ *Result) string {
		return perObject(float64(r.Redis.Scripts()-r.Redis.Renewals()), r)
	}},
	{"controller CPU: operator, or Kueue (per object)", func(r Result, _ *Result) string {
		return seconds(r.OperatorCPU) + " (" + perObjectDuration(r.OperatorCPU, r) + ")"
	}},
	{"controller max RSS", func(r Result, _ *Result) string { return mib(r.OperatorRSS) }},
	{"kube-apiserver CPU / object", func(r Result, _ *Result) string { return perObjectDuration(r.APIServerCPU, r) }},
	{"kube-controller-manager CPU / object", func(r Result, _ *Result) string { return perObjectDuration(r.KCMCPU, r) }},
	{"handoff gap p50 / p90 / p99 (n)", func(r Result, _ *Result) string { return gapCell(r.Gaps) }},
	{"  to a successor already Waiting", func(r Result, _ *Result) string { return gapCell(r.QueuedGaps) }},
	{"exclusion violations", func(r Result, _ *Result) string {
		if r.Locks == 0 {
			return "—"
		}
		return fmt.Sprintf("%d", len(r.Violations))
	}},
	{"operator SIGKILLs", func(r Result, _ *Result) string { return fmt.Sprintf("%d", r.Kills) }},
	{"Redis keys left after deletion", func(r Result, _ *Result) string {
		if r.Locks == 0 || r.Kueue {
			return "—"
		}
		return fmt.Sprintf("%d", len(r.LeftKeys))
	}},
	{"delete all: wall", func(r Result, _ *Result) string {
		if r.Delete == nil {
			return "—"
		}
		return seconds(r.Delete.Wall)
	}},
	{"delete all: API writes / object", func(r Result, _ *Result) string {
		if r.Delete == nil {
			return "—"
		}
		return perObject(r.Delete.API.Writes(nil), r)
	}},
	{"steady window", func(r Result, _ *Result) string {
		if r.Window == nil {
			return "—"
		}
		return seconds(r.Window.Length)
	}},
	{"  lockedjobs/status PATCH / s", windowRate(func(w *Window) float64 { return w.API.Writes(isStatusPatch) })},
	{"  events / s", windowRate(func(w *Window) float64 { return w.API.Writes(isEvent) })},
	{"  API writes / s (all clients)", windowRate(func(w *Window) float64 { return w.API.Writes(nil) })},
	{"  Redis calls / s", windowRate(func(w *Window) float64 { return float64(w.Redis.Operations()) })},
	{"  operator CPU % of a core", func(r Result, _ *Result) string {
		if r.Window == nil || r.Window.Length <= 0 {
			return "—"
		}
		return fmt.Sprintf("%.2f %%", 100*r.Window.OperatorCPU.Seconds()/r.Window.Length.Seconds())
	}},
	{"  operator max RSS in the window", func(r Result, _ *Result) string {
		if r.Window == nil {
			return "—"
		}
		return mib(r.Window.OperatorRSS)
	}},
}

func perObjectDuration(d time.Duration, r Result) string {
	if r.Objects == 0 {
		return "—"
	}
	return millis(d / time.Duration(r.Objects))
}

func windowRate(v func(*Window) float64) func(Result, *Result) string {
	return func(r Result, _ *Result) string {
		if r.Window == nil {
			return "—"
		}
		return perSecond(v(r.Window), r.Window.Length)
	}
}

// Table renders results as a Markdown table, one column per scenario. The plain-Job scenario, if
// present, is the baseline of the "× plain Jobs" row.
func Table(results []Result) string {
	var plain *Result
	for i := range results {
		if results[i].Locks == 0 {
			plain = &results[i]
		}
	}
	cells := make([][]string, 0, 1+len(rows))
	cells = append(cells, append([]string{"per scenario"}, scenarioNames(results)...))
	for _, rw := range rows {
		line := make([]string, 0, 1+len(results))
		line = append(line, rw.label)
		for _, r := range results {
			line = append(line, rw.cell(r, plain))
		}
		cells = append(cells, line)
	}
	return Markdown(cells)
}

func scenarioNames(results []Result) []string {
	out := make([]string, len(results))
	for i, r := range results {
		out[i] = r.Scenario
	}
	return out
}

// Markdown renders cells (the first line the header) as a Markdown table. It pads every column to its widest cell, so the table reads in a terminal too.
func Markdown(cells [][]string) string {
	width := make([]int, len(cells[0]))
	for _, line := range cells {
		for i, c := range line {
			width[i] = max(width[i], len([]rune(c)))
		}
	}
	var b strings.Builder
	writeLine := func(line []string) {
		b.WriteString("|")
		for i, c := range line {
			b.WriteString(" " + c + strings.Repeat(" ", width[i]-len([]rune(c))) + " |")
		}
		b.WriteString("\n")
	}
	writeLine(cells[0])
	sep := make([]string, len(width))
	for i, w := range width {
		sep[i] = strings.Repeat("-", w)
	}
	writeLine(sep)
	for _, line := range cells[1:] {
		writeLine(line)
	}
	return b.String()
}

func gapCell(gaps []time.Duration) string {
	if len(gaps) == 0 {
		return "—"
	}
	return fmt.Sprintf("%s / %s / %s (%d)", millis(Percentile(gaps, 50)), millis(Percentile(gaps, 90)),
		millis(Percentile(gaps, 99)), len(gaps))
}
