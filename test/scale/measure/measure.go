// Package measure holds the arithmetic of the scale benchmark (test/scale): parsing the API
// server's request counters and Redis' command statistics, deltas and percentiles, the exclusion
// check over the Jobs a watch saw, and the table the benchmark prints. It has no cluster
// dependencies, so its unit tests run in `make test`.
package measure

import (
	"bufio"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// RequestKey names one series of apiserver_request_total, summed over codes, scopes and versions.
type RequestKey struct {
	Verb        string
	Resource    string
	Subresource string
	// DryRun marks requests with ?dryRun: validated and admitted, never stored. The operator
	// dry-runs every Job before it acquires the lock for it.
	DryRun bool
}

func (k RequestKey) String() string {
	s := k.Verb + " " + k.Resource
	if k.Subresource != "" {
		s += "/" + k.Subresource
	}
	if k.DryRun {
		s += " (dry run)"
	}
	return s
}

// Requests counts API requests by verb and resource.
type Requests map[RequestKey]float64

// writeVerbs are the verbs that change state: the API server reports server-side apply as APPLY
// and a collection delete as DELETECOLLECTION.
var writeVerbs = map[string]bool{
	"POST": true, "PUT": true, "PATCH": true, "DELETE": true, "APPLY": true, "DELETECOLLECTION": true,
}

// IsWrite reports whether verb changes state.
func IsWrite(verb string) bool { return writeVerbs[verb] }

// ParseRequests reads apiserver_request_total from the API server's /metrics text.
func ParseRequests(text string) (Requests, error) {
	const metric = "apiserver_request_total{"
	out := Requests{}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, metric) {
			continue
		}
		end := strings.LastIndexByte(line, '}')
		if end < 0 {
			return nil, fmt.Errorf("malformed metric line %q", line)
		}
		labels, err := parseLabels(line[len(metric):end])
		if err != nil {
			return nil, fmt.Errorf("metric line %q: %w", line, err)
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(line[end+1:]), 64)
		if err != nil {
			return nil, fmt.Errorf("metric line %q: value: %w", line, err)
		}
		key := RequestKey{Verb: labels["verb"], Resource: labels["resource"], Subresource: labels["subresource"],
			DryRun: labels["dry_run"] != ""}
		out[key] += v
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read metrics: %w", err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no apiserver_request_total series in the metrics")
	}
	return out, nil
}

// parseLabels reads `a="x",b="y"`; label values in these series never hold escaped quotes, but
// the parser honours backslash escapes anyway so a surprise fails loudly instead of shifting
// labels.
func parseLabels(s string) (map[string]string, error) {
	out := map[string]string{}
	for len(s) > 0 {
		eq := strings.IndexByte(s, '=')
		if eq < 0 || eq+1 >= len(s) || s[eq+1] != '"' {
			return nil, fmt.Errorf("bad label list near %q", s)
		}
		name := s[:eq]
		var val strings.Builder
		i := eq + 2
		for ; i < len(s) && s[i] != '"'; i++ {
			if s[i] == '\\' && i+1 < len(s) {
				i++
			}
			val.WriteByte(s[i])
		}
		if i >= len(s) {
			return nil, fmt.Errorf("unterminated label %s", name)
		}
		out[name] = val.String()
		s = strings.TrimPrefix(s[i+1:], ",")
	}
	return out, nil
}

// Sub returns r - before, dropping series that did not change.
func (r Requests) Sub(before Requests) Requests { return diff(r, before) }

// diff returns now - before per key, dropping the keys that did not change.
func diff[M ~map[K]V, K comparable, V int64 | float64](now, before M) M {
	out := M{}
	for k, v := range now {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

// Writes sums the write requests that were stored (not dry runs); match, if not nil, narrows
// them.
func (r Requests) Writes(match func(RequestKey) bool) float64 {
	var sum float64
	for k, v := range r {
		if IsWrite(k.Verb) && !k.DryRun && (match == nil || match(k)) {
			sum += v
		}
	}
	return sum
}

// DryRuns sums the dry-run requests.
func (r Requests) DryRuns() float64 {
	var sum float64
	for k, v := range r {
		if k.DryRun {
			sum += v
		}
	}
	return sum
}

// Count returns one stored series' value.
func (r Requests) Count(verb, resource, subresource string) float64 {
	return r[RequestKey{Verb: verb, Resource: resource, Subresource: subresource}]
}

// WriteLines lists the write series, largest first, as "VERB resource[/sub] count".
func (r Requests) WriteLines() []string {
	return r.lines(func(k RequestKey) bool { return IsWrite(k.Verb) || k.DryRun })
}

// ReadLines lists the read series (GET, LIST, WATCH), largest first, as WriteLines does: who reads
// what the informers should already have.
func (r Requests) ReadLines() []string {
	return r.lines(func(k RequestKey) bool { return !IsWrite(k.Verb) && !k.DryRun })
}

func (r Requests) lines(keep func(RequestKey) bool) []string {
	keys := make([]RequestKey, 0, len(r))
	for k, v := range r {
		if keep(k) && v != 0 {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(a, b RequestKey) int {
		if r[a] != r[b] {
			if r[a] > r[b] {
				return -1
			}
			return 1
		}
		return strings.Compare(a.String(), b.String())
	})
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = fmt.Sprintf("%-42s %8.0f", k, r[k])
	}
	return out
}

// CommandStats counts Redis calls by command, from INFO commandstats.
type CommandStats map[string]int64

// ParseCommandStats reads lines like `cmdstat_evalsha:calls=12,usec=34,...`.
func ParseCommandStats(info string) (CommandStats, error) {
	out := CommandStats{}
	for line := range strings.SplitSeq(info, "\n") {
		line = strings.TrimSpace(line)
		rest, ok := strings.CutPrefix(line, "cmdstat_")
		if !ok {
			continue
		}
		name, fields, ok := strings.Cut(rest, ":")
		if !ok {
			return nil, fmt.Errorf("malformed commandstats line %q", line)
		}
		calls, found := int64(0), false
		for f := range strings.SplitSeq(fields, ",") {
			if v, ok := strings.CutPrefix(f, "calls="); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					return nil, fmt.Errorf("commandstats line %q: %w", line, err)
				}
				calls, found = n, true
			}
		}
		if !found {
			return nil, fmt.Errorf("commandstats line %q has no calls", line)
		}
		out[name] = calls
	}
	return out, nil
}

// Sub returns c - before, dropping commands that were not called in between.
func (c CommandStats) Sub(before CommandStats) CommandStats { return diff(c, before) }

// Operations sums the calls a workload made: everything but the benchmark's own INFO.
func (c CommandStats) Operations() int64 {
	var sum int64
	for k, v := range c {
		if k != "info" {
			sum += v
		}
	}
	return sum
}

// Scripts sums the Lua script calls (EVAL, EVALSHA and their read-only forms, FCALL).
func (c CommandStats) Scripts() int64 {
	var sum int64
	for k, v := range c {
		if strings.HasPrefix(k, "eval") || strings.HasPrefix(k, "fcall") {
			sum += v
		}
	}
	return sum
}

// Renewals counts the keeper's renewals: renew.lua is the only script that runs PEXPIRE, twice
// (the lock and its metadata).
func (c CommandStats) Renewals() int64 { return c["pexpire"] / 2 }

// Percentile returns the p-th percentile (0..100) of ds by nearest rank, 0 for none.
func Percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := int(math.Ceil(p / 100 * float64(len(s))))
	rank = min(max(rank, 1), len(s))
	return s[rank-1]
}
