package controllers

import (
	"slices"

	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/lockedjob/lockedjob/controllers/lockedcronjob"
	"github.com/lockedjob/lockedjob/controllers/lockedjob"
	"github.com/lockedjob/lockedjob/internal/lockbook"
)

// operatorMetrics are the operator's own metrics, the reconcilers' and the lock book's;
// config/grafana/custom-metrics/config.yaml has a panel for each (TestEveryMetricHasAPanel).
var operatorMetrics = slices.Concat(lockbook.Metrics, lockedjob.Metrics, lockedcronjob.Metrics)

func init() {
	metrics.Registry.MustRegister(operatorMetrics...)
}
