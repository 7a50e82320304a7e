package controllers

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/lockedjob/lockedjob/internal/redislock"
)

var (
	locksHeld = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "lockedjob_locks_held",
		Help: "Locks this operator holds now.",
	})
	lockedJobsWaiting = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "lockedjob_lockedjobs_waiting",
		Help: "LockedJobs waiting for their lock.",
	})
	locksAcquiredTotal = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "lockedjob_locks_acquired_total",
		Help: "Locks acquired (fresh acquisitions, not re-adoptions).",
	})
	lockWaitSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "lockedjob_lock_wait_seconds",
		Help:    "Time from a LockedJob's first attempt to acquiring its lock.",
		Buckets: prometheus.ExponentialBuckets(0.05, 2, 16),
	})
	lockRenewalsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "lockedjob_lock_renewals_total",
		Help: "Lock renewals by result: success, or error (a transport failure that will be retried).",
	}, []string{"result"})
	lockLostTotal = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "lockedjob_lock_lost_total",
		Help: "Locks lost while their Job ran.",
	})
)

func init() {
	metrics.Registry.MustRegister(locksHeld, lockedJobsWaiting, locksAcquiredTotal, lockWaitSeconds, lockRenewalsTotal, lockLostTotal)
}

func onRenewMetric(_ *redislock.Lock, err error) {
	if err != nil {
		lockRenewalsTotal.WithLabelValues("error").Inc()
		return
	}
	lockRenewalsTotal.WithLabelValues("success").Inc()
}
