package lockedjob

import "github.com/prometheus/client_golang/prometheus"

var (
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
	handoffSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "lockedjob_handoff_seconds",
		Help: "Time from a release that handed the lock to one of this operator's waiters to that waiter's acquisition, whose pass creates the Job (handoffs announced on the release channel only).",
		// From a millisecond (a quiet operator) to a minute (a work queue under a burst).
		Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 14),
	})
)

// Metrics are the LockedJob reconciler's own metrics, registered by controllers.Setup's package
// with the others.
var Metrics = []prometheus.Collector{lockedJobsWaiting, locksAcquiredTotal, lockWaitSeconds, handoffSeconds}
