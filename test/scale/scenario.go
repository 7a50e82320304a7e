//go:build scale

package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"strconv"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/internal/testutil/kueuerun"
	"github.com/lockedjob/lockedjob/internal/testutil/ports"
	"github.com/lockedjob/lockedjob/test/scale/measure"
	"github.com/lockedjob/lockedjob/test/testkit"
)

// scenario is one workload: objects created at once, each with one pod.
type scenario struct {
	name    string
	objects int
	locks   int                // 0: plain Jobs
	lockOf  func(i int) string // the lock of the i-th object
	// guarded: the objects are guarded Jobs (a plain Job with the lock label, created suspended by
	// the admission gate), not LockedJobs.
	guarded bool
	// kueue: the objects are plain Jobs in Kueue's queues, one ClusterQueue per lock admitting one
	// Job at a time (kueue.go), run by Kueue's manager instead of lockedjob's operator.
	kueue  bool
	run    time.Duration                // pod lifetime (kwok pod-complete delay)
	goal   batchv1alpha1.LockedJobPhase // Succeeded, or Running for a steady state
	window time.Duration                // steady state measured after the goal
}

// podTemplate gives every pod the same exact kwok timing (delay == jitter-delay turns the
// jitter off), plain, locked or guarded, so they differ only in the operator.
func podTemplate(run time.Duration) corev1.PodTemplateSpec {
	ms := func(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) + "ms" }
	annotations := map[string]string{}
	for stage, d := range map[string]time.Duration{
		"pod-create":   100 * time.Millisecond,
		"pod-ready":    100 * time.Millisecond,
		"pod-complete": run,
		"pod-delete":   100 * time.Millisecond,
	} {
		annotations[stage+".stage.kwok.x-k8s.io/delay"] = ms(d)
		annotations[stage+".stage.kwok.x-k8s.io/jitter-delay"] = ms(d)
	}
	grace := int64(1)
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "scale"}, Annotations: annotations},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			// kwok deletes a terminating pod within its grace period.
			TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{
				Name: "work", Image: testkit.JobImage,
				Command: []string{"sh", "-c", fmt.Sprintf("sleep %.0f", run.Seconds())},
			}},
		},
	}
}

func (s scenario) object(ns string, i int) client.Object {
	name := fmt.Sprintf("%s-%05d", s.name, i)
	zero := int32(0)
	spec := batchv1.JobSpec{BackoffLimit: &zero, Template: podTemplate(s.run)}
	switch {
	case s.locks == 0:
		return &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: spec}
	case s.kueue:
		// Not suspended by its author: Kueue's webhook suspends it, as for a user's Job.
		spec.Template = withKueueRequest(spec.Template)
		return &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns,
			Labels: map[string]string{kueuerun.QueueNameLabel: s.lockOf(i)}}, Spec: spec}
	case s.guarded:
		return &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns,
			Labels: map[string]string{batchv1alpha1.LabelGuardLock: s.lockOf(i)}}, Spec: spec}
	}
	return &batchv1alpha1.LockedJob{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: batchv1alpha1.LockedJobSpec{
			Lock:        batchv1alpha1.LockSpec{Name: s.lockOf(i)},
			JobTemplate: batchv1alpha1.JobTemplate{Spec: spec},
		},
	}
}

// lockNames is every lock of s, once each, in the order of its first object.
func (s scenario) lockNames() []string {
	var out []string
	seen := map[string]bool{}
	for i := range s.objects {
		if l := s.lockOf(i); !seen[l] {
			seen[l] = true
			out = append(out, l)
		}
	}
	return out
}

// namespaceLabels are the labels of the scenario's namespace: Kueue's webhooks act only in the
// Kueue scenarios'.
func (s scenario) namespaceLabels() map[string]string {
	if s.kueue {
		return map[string]string{kueueNamespaceLabel: "true"}
	}
	return nil
}

// parallel runs do(i) for i in [0,n) on workers goroutines and returns the first error.
func parallel(ctx context.Context, n, workers int, do func(context.Context, int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	next := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range next {
				if err := do(ctx, i); err != nil {
					cancel(err)
				}
			}
		})
	}
feed:
	for i := range n {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	return context.Cause(ctx)
}

// createWorkers is how many creates run at once: enough that the benchmark's own client never
// paces the burst.
const createWorkers = 32

func (b *bench) runScenario(ctx context.Context, s scenario) (measure.Result, error) {
	res := measure.Result{Scenario: s.name, Objects: s.objects, Locks: s.locks, Goal: string(s.goal), Kueue: s.kueue}
	ns := "scale-" + s.name
	rec, stopWatches, err := b.record(ctx, s, ns, nil)
	if err != nil {
		return res, err
	}
	defer stopWatches()

	op, err := b.startController(ctx, s, ns)
	if err != nil {
		return res, err
	}
	defer op.stop()

	before, err := b.probes.snapshot(ctx, op)
	if err != nil {
		return res, err
	}
	_ = op.takeMaxRSS()
	profiled := b.probes.profileAPIServer(ctx, b.opts.profile, fmt.Sprintf("%s/apiserver-%s.pprof", b.work, s.name))
	defer profiled()
	controllerProfiled := profileController(ctx, b.opts.profile, op.pprofAddr, controllerName(s), fmt.Sprintf("%s/controller-%s.pprof", b.work, s.name))
	defer controllerProfiled()
	start := time.Now()
	if err := parallel(ctx, s.objects, createWorkers, func(ctx context.Context, i int) error {
		return b.k8s.Create(ctx, s.object(ns, i))
	}); err != nil {
		return res, fmt.Errorf("create %s objects: %w", s.name, err)
	}
	log.Printf("%s: %d objects created in %s", s.name, s.objects, time.Since(start).Round(time.Millisecond))

	reached := func() (done, failed int, last time.Time) {
		switch {
		case s.locks == 0 || s.kueue:
			return rec.plainDone()
		case s.guarded:
			return rec.guardedDone()
		}
		return rec.reached(s.goal)
	}
	lastLog := time.Now()
	err = poll(ctx, b.timeout, 500*time.Millisecond, func() (bool, error) {
		if err := op.failed(); err != nil {
			return false, err
		}
		if pid, found := findProcess(b.opts.pauseWhile, os.Getpid()); found && res.Noise == "" {
			res.Noise = fmt.Sprintf("pid %d (%s) ran meanwhile", pid, b.opts.pauseWhile)
			log.Printf("%s: %s: the numbers of this scenario are noisy", s.name, res.Noise)
		}
		done, failed, _ := reached()
		if time.Since(lastLog) >= 15*time.Second {
			log.Printf("%s: %d/%d %s, %d failed, %s", s.name, done, s.objects, s.goal, failed, time.Since(start).Round(time.Second))
			lastLog = time.Now()
		}
		if s.goal == batchv1alpha1.PhaseSucceeded {
			return done+failed >= s.objects, nil
		}
		return done >= s.objects, nil
	})
	if err != nil {
		return res, fmt.Errorf("%s: waiting for %s: %w", s.name, s.goal, err)
	}
	after, err := b.probes.snapshot(ctx, op)
	if err != nil {
		return res, err
	}
	var last time.Time
	res.Done, res.Failed, last = reached()
	res.Wall = last.Sub(start)
	res.Usage = usage(before, after, op.takeMaxRSS())
	// Counted at the goal, so the steady window and the deletion do not blur the lifecycle.
	res.Versions = rec.lockedJobVersions()
	log.Printf("%s: all %s after %s", s.name, s.goal, res.Wall.Round(time.Millisecond))

	if s.window > 0 {
		// Steady means nothing changes: the Job controller still records the pods' readiness
		// just after the LockedJobs turn Running, so the window opens once every pod is ready.
		err := poll(ctx, b.timeout, 500*time.Millisecond, func() (bool, error) { return rec.jobsReady() >= s.objects, nil })
		if err != nil {
			return res, fmt.Errorf("%s: waiting for every pod to be ready: %w", s.name, err)
		}
		if res.Window, err = b.measureWindow(ctx, op, s.window, &res.Noise); err != nil {
			return res, err
		}
	}
	if res.Delete, err = b.deleteAll(ctx, op, s, ns); err != nil {
		return res, err
	}
	log.Printf("%s: deleted in %s", s.name, res.Delete.Wall.Round(time.Millisecond))
	if s.kueue {
		if err := b.deleteKueueQueues(ctx, s, ns); err != nil {
			return res, fmt.Errorf("%s: %w", s.name, err)
		}
	}
	return res, b.conclude(ctx, s, ns, op, rec, stopWatches, start, &res)
}

// controllerName is what runs scenario s, as the output names it.
func controllerName(s scenario) string {
	if s.kueue {
		return "kueue"
	}
	return "operator"
}

// startController starts what runs scenario s: Kueue's manager with the scenario's queues, or
// lockedjob's operator.
func (b *bench) startController(ctx context.Context, s scenario, ns string) (*supervisor, error) {
	if !s.kueue {
		args, pprofAddr := b.operatorArgs(), ""
		if b.opts.profile > 0 {
			addr, err := ports.FreeAddr()
			if err != nil {
				return nil, err
			}
			args, pprofAddr = append(args, "--pprof-bind-address", addr), addr
		}
		op, err := startSupervisor(ctx, b.operatorBin, args, nil, fmt.Sprintf("%s/operator-%s", b.work, s.name), b.opts.killEvery)
		if err != nil {
			return nil, err
		}
		op.pprofAddr = pprofAddr
		log.Printf("%s: operator pid %d up; load average %s", s.name, op.pid(), loadAvg())
		return op, nil
	}
	op, err := b.startKueue(ctx, s)
	if err != nil {
		return nil, err
	}
	log.Printf("%s: kueue pid %d up; load average %s", s.name, op.pid(), loadAvg())
	if err := b.createKueueQueues(ctx, s, ns); err != nil {
		op.stop()
		return nil, err
	}
	return op, nil
}

// record creates the scenario's namespace ns and starts the watches that record its Jobs, their
// pods and, for LockedJobs, the LockedJobs (each also handed to also, if set), until stop is called.
func (b *bench) record(ctx context.Context, s scenario, ns string, also func(*batchv1alpha1.LockedJob)) (rec *recorder, stop func(), err error) {
	if err := b.k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: s.namespaceLabels()}}); err != nil {
		return nil, nil, fmt.Errorf("create namespace %s: %w", ns, err)
	}
	rec = newRecorder()
	wctx, stop := context.WithCancel(ctx)
	if err := startWatch(wctx, b.k8s, &batchv1.JobList{}, ns, rec, func(o client.Object, now time.Time) {
		rec.job(o.(*batchv1.Job), now)
	}); err != nil {
		stop()
		return nil, nil, err
	}
	// Pods for when each Job's work ended (measure.Run.Ended), for every system alike.
	if err := startWatch(wctx, b.k8s, &corev1.PodList{}, ns, rec, func(o client.Object, now time.Time) {
		rec.pod(o.(*corev1.Pod), now)
	}); err != nil {
		stop()
		return nil, nil, err
	}
	if s.locks == 0 || s.guarded || s.kueue {
		return rec, stop, nil
	}
	if err := startWatch(wctx, b.k8s, &batchv1alpha1.LockedJobList{}, ns, rec, func(o client.Object, now time.Time) {
		lj := o.(*batchv1alpha1.LockedJob)
		rec.lockedJob(lj, now)
		if also != nil {
			also(lj)
		}
	}); err != nil {
		stop()
		return nil, nil, err
	}
	return rec, stop, nil
}

// conclude ends a scenario once everything is deleted: the operator's kills, the lock keys left in
// Redis, and what the watches' history says (first Jobs, handoff gaps, exclusion).
func (b *bench) conclude(ctx context.Context, s scenario, ns string, op *supervisor, rec *recorder,
	stopWatches func(), start time.Time, res *measure.Result) error {
	res.Kills = op.kills()
	if s.locks > 0 && !s.kueue {
		var err error
		if res.LeftKeys, err = leftKeys(ctx, b.probes.rdb, clusterID, ns, time.Minute); err != nil {
			return fmt.Errorf("%s: lock keys left in Redis: %w", s.name, err)
		}
	}
	stopWatches()
	if err := rec.err(); err != nil {
		return fmt.Errorf("%s: the watches' history is incomplete: %w", s.name, err)
	}
	runs := rec.allRuns()
	res.FirstJob = measure.FirstJobDelays(runs, start)
	res.StartDelays = measure.StartDelays(runs)
	if s.locks > 0 {
		res.Gaps = measure.HandoffGaps(runs)
		res.QueuedGaps = measure.QueuedHandoffGaps(runs)
		res.Violations = measure.CheckExclusion(runs)
	}
	return nil
}

// measureWindow measures a fixed stretch of steady state. Waiting out the window is the
// measurement itself, not a synchronisation.
func (b *bench) measureWindow(ctx context.Context, op *supervisor, length time.Duration, noise *string) (*measure.Window, error) {
	before, err := b.probes.snapshot(ctx, op)
	if err != nil {
		return nil, err
	}
	_ = op.takeMaxRSS()
	start := time.Now()
	end := time.After(length)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
wait:
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-end:
			break wait
		case <-tick.C:
			if pid, found := findProcess(b.opts.pauseWhile, os.Getpid()); found && *noise == "" {
				*noise = fmt.Sprintf("pid %d (%s) ran during the steady window", pid, b.opts.pauseWhile)
				log.Printf("%s: the steady window is noisy", *noise)
			}
		}
	}
	after, err := b.probes.snapshot(ctx, op)
	if err != nil {
		return nil, err
	}
	if err := op.failed(); err != nil {
		return nil, fmt.Errorf("during the steady window: %w", err)
	}
	return &measure.Window{Length: time.Since(start), Usage: usage(before, after, op.takeMaxRSS())}, nil
}

// deleteAll deletes every object of the scenario and waits until no LockedJob, Job or pod is
// left in its namespace. A guarded Job that still carries the operator's finalizer is listed until
// the operator lets it go, so the wait covers it too.
func (b *bench) deleteAll(ctx context.Context, op *supervisor, s scenario, ns string) (*measure.Phase, error) {
	before, err := b.probes.snapshot(ctx, op)
	if err != nil {
		return nil, err
	}
	_ = op.takeMaxRSS()
	start := time.Now()
	if err := parallel(ctx, s.objects, createWorkers, func(ctx context.Context, i int) error {
		return client.IgnoreNotFound(b.k8s.Delete(ctx, s.object(ns, i), client.PropagationPolicy(metav1.DeletePropagationBackground)))
	}); err != nil {
		return nil, fmt.Errorf("delete %s objects: %w", s.name, err)
	}
	if err := b.waitNamespaceEmpty(ctx, ns); err != nil {
		return nil, fmt.Errorf("%s: %w", s.name, err)
	}
	wall := time.Since(start)
	after, err := b.probes.snapshot(ctx, op)
	if err != nil {
		return nil, err
	}
	return &measure.Phase{Wall: wall, Usage: usage(before, after, op.takeMaxRSS())}, nil
}

// waitNamespaceEmpty waits until no LockedJob, Job or pod is left in namespace ns. A guarded Job
// that still carries the operator's finalizer is listed until the operator lets it go.
func (b *bench) waitNamespaceEmpty(ctx context.Context, ns string) error {
	lists := []client.ObjectList{&batchv1alpha1.LockedJobList{}, &batchv1.JobList{}, &corev1.PodList{}}
	err := poll(ctx, b.timeout, 500*time.Millisecond, func() (bool, error) {
		for _, l := range lists {
			if err := b.k8s.List(ctx, l, client.InNamespace(ns), client.Limit(1)); err != nil {
				return false, fmt.Errorf("list %T: %w", l, err)
			}
			if meta.LenList(l) > 0 {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for namespace %s to empty: %w", ns, err)
	}
	return nil
}
