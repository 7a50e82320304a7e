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
	guardedJobs, err := guardedJobCache(mgr, o)
	if err != nil {
		return err
	}
	s := setup{ctx: ctx, mgr: mgr, book: book, o: o, guardedJobs: guardedJobs}
	for _, r := range []struct {
		name  string
		setup func() error
	}{
		{LockedJob, s.lockedJob},
		{LockView, s.lockView},
		{LockedCronJob, s.lockedCronJob},
		{GuardedJob, s.guardedJob},
		{GuardedPod, s.guardedPod},
		{KueueCheck, s.kueueCheck},
	} {
		if !o.enabled(r.name) {
			continue
		}
		if err := r.setup(); err != nil {
			return fmt.Errorf("set up %s controller: %w", r.name, err)
		}
	}
	// +kubebuilder:scaffold:builder
	return nil
}

// guardedJobCache is the one cache of guarded Jobs, for their reconciler, the AdmissionCheck's and
// the view of their locks; nil when neither of the first two is set up.
func guardedJobCache(mgr ctrl.Manager, o Options) (cache.Cache, error) {
	if !o.enabled(GuardedJob) && !o.enabled(KueueCheck) {
		return nil, nil
	}
	jobs, err := guardedjob.NewCache(mgr)
	if err != nil {
		return nil, err
	}
	if err := mgr.Add(jobs); err != nil {
		return nil, fmt.Errorf("add guarded job cache: %w", err)
	}
	return jobs, nil
}

// setup holds what every reconciler's setup reads; one method per reconciler.
type setup struct {
	ctx         context.Context
	mgr         ctrl.Manager
	book        *lockbook.Book
	o           Options
	guardedJobs cache.Cache
}

func (s setup) lockedJob() error {
	c := s.o.LockedJob
	c.Identity, c.ClusterScopeNamespaces, c.RedisTimeout = s.o.Identity, s.o.ClusterScopeNamespaces, s.o.RedisTimeout
	r := &lockedjob.LockedJobReconciler{
		Client:   s.mgr.GetClient(),
		Scheme:   s.mgr.GetScheme(),
		Recorder: s.mgr.GetEventRecorder("lockedjob"),
		Locks:    s.book,
		Config:   c,
	}
	return r.SetupWithManager(s.ctx, s.mgr)
}

func (s setup) lockView() error {
	view := &lockview.LockViewReconciler{Client: s.mgr.GetClient(), Locks: s.book, Identity: s.o.Identity,
		RedisTimeout: s.o.RedisTimeout, Timing: s.o.View, GuardedJobs: s.guardedJobs}
	return view.SetupWithManager(s.mgr)
}

func (s setup) lockedCronJob() error {
	cron := &lockedcronjob.LockedCronJobReconciler{
		Client:                 s.mgr.GetClient(),
		Scheme:                 s.mgr.GetScheme(),
		Recorder:               s.mgr.GetEventRecorder("lockedcronjob"),
		Locks:                  s.book,
		Identity:               s.o.Identity,
		ClusterScopeNamespaces: s.o.ClusterScopeNamespaces,
		RedisTimeout:           s.o.RedisTimeout,
	}
	return cron.SetupWithManager(s.mgr)
}

func (s setup) guardedJob() error {
	c := s.o.GuardedJob
	c.Identity, c.ClusterScopeNamespaces, c.RedisTimeout = s.o.Identity, s.o.ClusterScopeNamespaces, s.o.RedisTimeout
	guarded := &guardedjob.GuardedJobReconciler{
		Client:   s.mgr.GetClient(),
		Recorder: s.mgr.GetEventRecorder("guardedjob"),
		Locks:    s.book,
		Config:   c,
		Jobs:     s.guardedJobs,
	}
	return guarded.SetupWithManager(s.ctx, s.mgr)
}

func (s setup) guardedPod() error {
	c := s.o.GuardedPod
	c.Identity, c.ClusterScopeNamespaces, c.RedisTimeout = s.o.Identity, s.o.ClusterScopeNamespaces, s.o.RedisTimeout
	pods := &guardedpod.GuardedPodReconciler{
		Client:   s.mgr.GetClient(),
		Recorder: s.mgr.GetEventRecorder("guardedpod"),
		Locks:    s.book,
		Config:   c,
	}
	return pods.SetupWithManager(s.ctx, s.mgr)
}

// kueueCheck sets up the AdmissionCheck reconciler only where Kueue's kinds are served: the
// operator runs as well on clusters without Kueue.
func (s setup) kueueCheck() error {
	if kind := sreconcile.UnservedKindOf(s.mgr, kueuecheck.GroupVersion, kueuecheck.KindWorkload, kueuecheck.KindAdmissionCheck); kind != "" {
		sreconcile.SkipUnserved("the Kueue AdmissionCheck", kind)
		return nil
	}
	c := s.o.KueueCheck
	c.Identity, c.ClusterScopeNamespaces, c.RedisTimeout = s.o.Identity, s.o.ClusterScopeNamespaces, s.o.RedisTimeout
	check := &kueuecheck.KueueCheckReconciler{
		Client:   s.mgr.GetClient(),
		Recorder: s.mgr.GetEventRecorder("kueuecheck"),
		Locks:    s.book,
		Config:   c,
		Jobs:     s.guardedJobs,
	}
	return check.SetupWithManager(s.ctx, s.mgr)
}

// CacheOptions are the settings of the manager's cache that the reconcilers are written for.
// Only the LockedJob reconciler narrows it today (to the Jobs it created; see
// lockedjob.CacheOptions); the guarded-Job reconciler reads labelled Jobs from a cache of its own
// (guardedjob.NewCache), so this one never holds the cluster's other Jobs.
func CacheOptions() cache.Options { return lockedjob.CacheOptions() }
