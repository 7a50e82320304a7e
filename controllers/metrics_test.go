package controllers

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestEveryMetricHasAPanel: the Grafana dashboard generated from config/grafana/custom-metrics
// shows every metric the operator registers, so a new metric cannot be left off it (`make
// dashboards` regenerates the JSON from config.yaml; `make verify` checks it is current).
func TestEveryMetricHasAPanel(t *testing.T) {
	raw, err := os.ReadFile("../config/grafana/custom-metrics/custom-metrics-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dashboard struct {
		Panels []struct {
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dashboard); err != nil {
		t.Fatalf("parse the dashboard: %v", err)
	}
	var exprs []string
	for _, p := range dashboard.Panels {
		for _, target := range p.Targets {
			exprs = append(exprs, target.Expr)
		}
	}
	shown := strings.Join(exprs, "\n")
	for _, name := range metricNames(t) {
		// A histogram's panel queries its buckets.
		if !regexp.MustCompile(`\b` + name + `(_bucket)?\{`).MatchString(shown) {
			t.Errorf("metric %s has no panel in config/grafana/custom-metrics: add it to config.yaml and run make dashboards", name)
		}
	}
}

// metricNames returns the names of the operator's own metrics, from their descriptions.
func metricNames(t *testing.T) []string {
	t.Helper()
	fqName := regexp.MustCompile(`fqName: "([^"]+)"`)
	var names []string
	for _, c := range operatorMetrics {
		ch := make(chan *prometheus.Desc, 4)
		c.Describe(ch)
		close(ch)
		for d := range ch {
			m := fqName.FindStringSubmatch(d.String())
			if m == nil {
				t.Fatalf("no name in %s", d)
			}
			names = append(names, m[1])
		}
	}
	if len(names) < 7 {
		t.Fatalf("found only %v", names)
	}
	return names
}
