package lockbook

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockedjob/lockedjob/internal/redislock"
)

// The book's metrics. The operator registers them with its own (controllers, operatorMetrics), so
// config/grafana has a panel for each.
var (
	// LocksHeld is the number of locks the book holds now.
	LocksHeld = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "lockedjob_locks_held",
		Help: "Locks this operator holds now.",
	})
	// LockRenewalsTotal counts the keeper's renewals by result.
	LockRenewalsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "lockedjob_lock_renewals_total",
		Help: "Lock renewals by result: success, or error (a transport failure that will be retried).",
	}, []string{"result"})
	// LockLostTotal counts the locks lost (or put at risk) while their Job ran.
	LockLostTotal = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "lockedjob_lock_lost_total",
		Help: "Locks lost while their Job ran.",
	})
)

// Metrics are the book's metrics, for the operator to register with its own.
var Metrics = []prometheus.Collector{LocksHeld, LockRenewalsTotal, LockLostTotal}

func onRenewMetric(_ *redislock.Lock, err error) {
	if err != nil {
		LockRenewalsTotal.WithLabelValues("error").Inc()
		return
	}
	LockRenewalsTotal.WithLabelValues("success").Inc()
}
