package controllers

import (
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/lockedjob/lockedjob/controllers/lockedcronjob"
	"github.com/lockedjob/lockedjob/controllers/lockedjob"
	"github.com/lockedjob/lockedjob/internal/lockbook"
	"github.com/lockedjob/lockedjob/internal/version"
)

// operatorMetrics are the operator's own metrics, the reconcilers' and the lock book's;
// config/grafana/custom-metrics/config.yaml has a panel for each (TestEveryMetricHasAPanel).
var operatorMetrics = slices.Concat(lockbook.Metrics, lockedjob.Metrics, lockedcronjob.Metrics, []prometheus.Collector{buildInfo})

// buildInfo says which build of the operator runs (internal/version), as a constant 1 with the
// build in its labels, the Prometheus convention for a version.
var buildInfo = func() prometheus.Collector {
	info := version.Get()
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "lockedjob_build_info",
		Help:        "A constant 1 whose labels name the running build of the operator: version, commit, build date and Go version.",
		ConstLabels: prometheus.Labels{"version": info.Version, "commit": info.Commit, "date": info.Date, "goversion": info.GoVersion},
	})
	g.Set(1)
	return g
}()

func init() {
	metrics.Registry.MustRegister(operatorMetrics...)
}
