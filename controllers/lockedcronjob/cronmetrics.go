package lockedcronjob

import "github.com/prometheus/client_golang/prometheus"

// cronRunsTotal counts the scheduled runs of LockedCronJobs by what became of them: created (the
// LockedJob was created; with onBusy Replace after the earlier ones were deleted) or skipped (onBusy
// Skip while the lock was busy). A dashboard shows how often schedules meet a busy lock.
var cronRunsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "lockedjob_cron_runs_total",
	Help: "Scheduled runs of LockedCronJobs by result: created, or skipped (onBusy Skip, the lock was busy).",
}, []string{"result"})

// cronReplacedTotal counts the unfinished LockedJobs that onBusy Replace deleted for a new run.
var cronReplacedTotal = prometheus.NewCounter(prometheus.CounterOpts{
	Name: "lockedjob_cron_replaced_total",
	Help: "Unfinished LockedJobs a LockedCronJob deleted for a new run (onBusy Replace).",
})

// Metrics are the LockedCronJob reconciler's own metrics, registered by controllers.Setup's package
// with the others.
var Metrics = []prometheus.Collector{cronRunsTotal, cronReplacedTotal}
