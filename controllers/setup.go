// Package controllers sets up the operator's reconcilers on a manager: the LockedJob reconciler
// (controllers/lockedjob), the per-lock view of Lock and ClusterLock (controllers/lockview), the
// LockedCronJob schedules (controllers/lockedcronjob), guarded Jobs (controllers/guardedjob), guarded
// Pods (controllers/guardedpod) and the Kueue AdmissionCheck (controllers/kueuecheck),
// over one lock book. cmd/manager and the
// envtest suite both set them up here, so the suite runs what the operator runs.
package controllers

import (
	"context"
	"fmt"
	"slices"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/lockedjob/lockedjob/controllers/guardedjob"
	"github.com/lockedjob/lockedjob/controllers/guardedpod"
	sreconcile "github.com/lockedjob/lockedjob/controllers/internal/reconcile"
	"github.com/lockedjob/lockedjob/controllers/kueuecheck"
	"github.com/lockedjob/lockedjob/controllers/lockedcronjob"
	"github.com/lockedjob/lockedjob/controllers/lockedjob"
	"github.com/lockedjob/lockedjob/controllers/lockview"
	"github.com/lockedjob/lockedjob/internal/lockbook"
	"github.com/lockedjob/lockedjob/internal/locks"
)

// The names of the reconcilers, for Options.Controllers.
const (
	LockedJob     = "lockedjob"
	LockView      = "lockview"
	LockedCronJob = "lockedcronjob"
	// GuardedJob acts only on Jobs labelled for a lock (batch.lockedjob.dev/lock), so it is on by
	// default with the others; without the admission gate of config/guard no such Job is suspended,
	// and it only marks them Unguarded.
	GuardedJob = "guardedjob"
	// GuardedPod acts only on Pods labelled for a lock that no Job controls, so it is on by default
	// as GuardedJob; without the admission gate no such Pod is gated, and it only marks them
	// Unguarded.
	GuardedPod = "guardedpod"
	// KueueCheck answers for Kueue's AdmissionChecks of controller batch.lockedjob.dev/lock, for
	// Jobs that carry both a Kueue queue and the lock label. It is on by default, and off while
	// Kueue's Workload and AdmissionCheck kinds are not served.
	KueueCheck = "kueuecheck"
)

// Options are what the reconcilers share, and each one's own tuning.
type Options struct {
	// Identity derives lock keys, holder names and tokens, the same for every reconciler.
	Identity locks.Identity
	// ClusterScopeNamespaces is the one scope gate of every reconciler that touches a lock for a
	// namespace.
	ClusterScopeNamespaces locks.ScopeGate
	// RedisTimeout bounds every Redis call of a pass (default 2s).
	RedisTimeout time.Duration
	// LockedJob tunes the LockedJob reconciler; its Identity, ClusterScopeNamespaces and
	// RedisTimeout are set from the fields above.
	LockedJob lockedjob.Config
	// GuardedJob tunes the guarded-Job reconciler; its Identity, ClusterScopeNamespaces and
	// RedisTimeout are set from the fields above.
	GuardedJob guardedjob.Config
	// GuardedPod tunes the guarded-Pod reconciler, as GuardedJob.
	GuardedPod guardedpod.Config
	// KueueCheck tunes the AdmissionCheck reconciler, as GuardedJob.
	KueueCheck kueuecheck.Config
	// View tunes how often the per-lock view writes, reads Redis again and announces (zero: its
	// defaults).
	View lockview.Timing
	// Controllers names the reconcilers to set up; empty sets up all of them, as the operator does.
	// A test that runs one of them on a clock of its own sets up the others here.
	Controllers []string
}

func (o Options) enabled(name string) bool {
	return len(o.Controllers) == 0 || slices.Contains(o.Controllers, name)
}

// Setup sets up the reconcilers of o on mgr, over book. ctx bounds the goroutines the LockedJob
// reconciler starts beside the manager's runnables.
func Setup(ctx context.Context, mgr ctrl.Manager, book *lockbook.Book, o Options) error {
	// The book acts on losses only while this manager leads; before the election and after a lost
	// one it only renews (a process that builds a new manager keeps its book). One runnable for the
	// book, whichever reconcilers use it: each Leadership call begins a term of its own.
	if err := mgr.Add(book.Leadership()); err != nil {
		return fmt.Errorf("add lock book leadership: %w", err)
	}
	// One cache of guarded Jobs, for their reconciler, the AdmissionCheck's and the view of their
	// locks.
	var guardedJobs cache.Cache
	if o.enabled(GuardedJob) || o.enabled(KueueCheck) {
		jobs, err := guardedjob.NewCache(mgr)
		if err != nil {
			return err
		}
		if err := mgr.Add(jobs); err != nil {
			return fmt.Errorf("add guarded job cache: %w", err)
		}
		guardedJobs = jobs
	}
	if o.enabled(LockedJob) {
		c := o.LockedJob
		c.Identity, c.ClusterScopeNamespaces, c.RedisTimeout = o.Identity, o.ClusterScopeNamespaces, o.RedisTimeout
		r := &lockedjob.LockedJobReconciler{
			Client:   mgr.GetClient(),
			Scheme:   mgr.GetScheme(),
			Recorder: mgr.GetEventRecorder("lockedjob"),
			Locks:    book,
			Config:   c,
		}
		if err := r.SetupWithManager(ctx, mgr); err != nil {
			return fmt.Errorf("set up lockedjob controller: %w", err)
		}
	}
	if o.enabled(LockView) {
		view := &lockview.LockViewReconciler{Client: mgr.GetClient(), Locks: book, Identity: o.Identity, RedisTimeout: o.RedisTimeout,
			Timing: o.View, GuardedJobs: guardedJobs}
		if err := view.SetupWithManager(mgr); err != nil {
			return fmt.Errorf("set up lock view controller: %w", err)
		}
	}
	if o.enabled(LockedCronJob) {
		cron := &lockedcronjob.LockedCronJobReconciler{
			Client:                 mgr.GetClient(),
			Scheme:                 mgr.GetScheme(),
			Recorder:               mgr.GetEventRecorder("lockedcronjob"),
			Locks:                  book,
			Identity:               o.Identity,
			ClusterScopeNamespaces: o.ClusterScopeNamespaces,
			RedisTimeout:           o.RedisTimeout,
		}
		if err := cron.SetupWithManager(mgr); err != nil {
			return fmt.Errorf("set up lockedcronjob controller: %w", err)
		}
	}
	if o.enabled(GuardedJob) {
		c := o.GuardedJob
		c.Identity, c.ClusterScopeNamespaces, c.RedisTimeout = o.Identity, o.ClusterScopeNamespaces, o.RedisTimeout
		guarded := &guardedjob.GuardedJobReconciler{
			Client:   mgr.GetClient(),
			Recorder: mgr.GetEventRecorder("guardedjob"),
			Locks:    book,
			Config:   c,
			Jobs:     guardedJobs,
		}
		if err := guarded.SetupWithManager(ctx, mgr); err != nil {
			return fmt.Errorf("set up guardedjob controller: %w", err)
		}
	}
	if o.enabled(GuardedPod) {
		c := o.GuardedPod
		c.Identity, c.ClusterScopeNamespaces, c.RedisTimeout = o.Identity, o.ClusterScopeNamespaces, o.RedisTimeout
		pods := &guardedpod.GuardedPodReconciler{
			Client:   mgr.GetClient(),
			Recorder: mgr.GetEventRecorder("guardedpod"),
			Locks:    book,
			Config:   c,
		}
		if err := pods.SetupWithManager(ctx, mgr); err != nil {
			return fmt.Errorf("set up guardedpod controller: %w", err)
		}
	}
	if o.enabled(KueueCheck) {
		if kind := sreconcile.UnservedKindOf(mgr, kueuecheck.GroupVersion, kueuecheck.KindWorkload, kueuecheck.KindAdmissionCheck); kind != "" {
			sreconcile.SkipUnserved("the Kueue AdmissionCheck", kind)
		} else {
			c := o.KueueCheck
			c.Identity, c.ClusterScopeNamespaces, c.RedisTimeout = o.Identity, o.ClusterScopeNamespaces, o.RedisTimeout
			check := &kueuecheck.KueueCheckReconciler{
				Client:   mgr.GetClient(),
				Recorder: mgr.GetEventRecorder("kueuecheck"),
				Locks:    book,
				Config:   c,
				Jobs:     guardedJobs,
			}
			if err := check.SetupWithManager(ctx, mgr); err != nil {
				return fmt.Errorf("set up kueuecheck controller: %w", err)
			}
		}
	}
	// +kubebuilder:scaffold:builder
	return nil
}

// CacheOptions are the settings of the manager's cache that the reconcilers are written for.
// Only the LockedJob reconciler narrows it today (to the Jobs it created; see
// lockedjob.CacheOptions); the guarded-Job reconciler reads labelled Jobs from a cache of its own
// (guardedjob.NewCache), so this one never holds the cluster's other Jobs.
func CacheOptions() cache.Options { return lockedjob.CacheOptions() }
