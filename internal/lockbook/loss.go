package lockbook

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/event"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/internal/redislock"
)

// A lost lock, or one whose lease is at risk: the keeper's callbacks, the Job stop and the wake-up.

// maxConcurrentStops bounds the Job stops that run outside the reconcile queue at once, so a Redis
// outage that loses every lock does not start thousands of API calls in one burst.
const maxConcurrentStops = 16

// onRenew runs on the keeper's goroutine: count, and report the start of a run of failures.
func (b *Book) onRenew(l *redislock.Lock, err error) {
	onRenewMetric(l, err)
	b.mu.Lock()
	e, ok := b.byLk[l]
	first := ok && err != nil && !e.failing
	if ok {
		e.failing = err != nil
	}
	var w Workload
	var onRenewFailed func(Workload, error)
	if first {
		w, onRenewFailed = e.Workload, b.handlers[e.Kind].OnRenewFailed
	}
	// The keeper retries a failed renewal; only the leader tells the user (an Event is a write).
	leading := b.term != 0
	b.mu.Unlock()
	if first && leading && onRenewFailed != nil {
		onRenewFailed(w, err)
	}
}

// onShortLease runs on the keeper's goroutine: a held lock whose lease is too short for the round
// trip the keeper measures is told to the user through OnRenewFailed, once per lock (the keeper
// calls once), by the leader only.
func (b *Book) onShortLease(l *redislock.Lock, err error) {
	b.mu.Lock()
	e, ok := b.byLk[l]
	var w Workload
	var tell func(Workload, error)
	if ok {
		w, tell = e.Workload, b.handlers[e.Kind].OnRenewFailed
	}
	leading := b.term != 0
	b.mu.Unlock()
	if ok && leading && tell != nil {
		tell(w, err)
	}
}

// object names the entry's workload in the event that wakes its reconciler: metadata alone, which
// is all a reconciler's queue reads of it, whatever the kind.
func (e *bookEntry) object() *metav1.PartialObjectMetadata {
	obj := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{Kind: string(e.Kind)}}
	obj.Namespace, obj.Name, obj.UID = e.Object.Namespace, e.Object.Name, e.UID
	return obj
}

// onLost runs on the keeper's goroutine when a lock is gone (or could not be renewed before its
// validity ended): record it, stop the Job, and wake the reconciler, without blocking the renewal of
// the other locks.
//
// While the book does not lead, the loss is dropped quietly instead: most often the new leader
// released a lock whose Job ended, and this process's compare-and-expire found another value.
func (b *Book) onLost(l *redislock.Lock, err error) {
	b.mu.Lock()
	e, ok := b.byLk[l]
	leading := b.term != 0
	switch {
	case ok && !leading:
		b.dropQuietly(e, "lost", err) // the keeper has dropped it already
	case ok:
		b.detach(e) // the keeper has dropped it already
	}
	b.mu.Unlock()
	switch {
	case ok && leading && redislock.FoundGone(err):
		go b.lossOrOwnRelease(e, l, err)
	case ok && leading:
		b.reportLoss(e, err)
	}
}

// markReadTimeout bounds the read of a release mark before a loss is reported.
const markReadTimeout = time.Second

// lossOrOwnRelease reports a lock the keeper found gone as lost, unless the release mark says its
// own token released it under its fence: another process of this operator's did (a successor's pass,
// while this one, deposed in a pause, did not know it yet; found by the operator model), so the
// acquisition ended by a release, not a loss, and the reconciler finds it released. The mark is
// written only by a release that found the lock the token's, under that fence, so no other holder
// was granted it in between. It runs off the keeper's goroutine; until it is done the workload's
// lock is neither held nor lost in the book, which a reconciler takes for a lock to re-adopt, and
// re-adoption reads the same mark.
func (b *Book) lossOrOwnRelease(e *bookEntry, l *redislock.Lock, cause error) {
	ctx, cancel := context.WithTimeout(context.Background(), markReadTimeout)
	released, err := b.redis.ReleasedBefore(ctx, l.Key(), l.Slot(), l.Token(), l.Fence())
	cancel()
	if err != nil || !released {
		b.reportLoss(e, cause)
		return
	}
	b.mu.Lock()
	e.released = true
	events := b.eventsOf(e.Kind)
	obj := e.object()
	b.mu.Unlock()
	ctrl.Log.WithName("lockbook").Info("A lock found gone was released under its fencing token by another process of this operator",
		"kind", e.Kind, "workload", klog.KRef(e.Object.Namespace, e.Object.Name), "fencingToken", l.Fence())
	events <- event.GenericEvent{Object: obj}
}

// onAtRisk runs on the keeper's goroutine when renewals keep failing and the lease will end soon:
// the Job is stopped now, while the lock is still ours, so its pods are gone before anyone else can
// acquire the lock. The keeper goes on renewing: if Redis comes back, the lock covers the pods until
// they are gone and the reconciler releases it.
//
// While the book does not lead it cannot stop the Job: it drops the lock quietly, and the leader
// finds it lost (or re-adopts it, if Redis came back in time) when it re-observes the workload.
func (b *Book) onAtRisk(l *redislock.Lock, err error) {
	b.mu.Lock()
	e, ok := b.byLk[l]
	leading := b.term != 0
	var dropped *Lock
	if ok && !leading {
		dropped = b.dropQuietly(e, "lease at risk", err)
	}
	b.mu.Unlock()
	b.stopRenewing(dropped)
	if ok && leading {
		b.reportLoss(e, fmt.Errorf("renewals failing and the lease ends in less than its at-risk margin, so the Job is stopped while the lock still covers it: %w", err))
	}
}

// reportLoss records the first loss of an entry, stops its Job and wakes the reconciler of its kind.
func (b *Book) reportLoss(e *bookEntry, cause error) {
	b.mu.Lock()
	first := e.lost == nil
	if first {
		e.lost = cause
	}
	w := e.Workload
	obj := e.object()
	stopWorkload := b.handlers[w.Kind].StopWorkload
	events := b.eventsOf(w.Kind)
	b.mu.Unlock()
	if !first {
		return
	}
	LockLostTotal.Inc()
	go func() {
		if stopWorkload != nil && w.Job != "" && w.Policy != batchv1alpha1.LockLostIgnore {
			b.stops <- struct{}{}
			ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
			stopWorkload(ctx, w, cause)
			cancel()
			<-b.stops
		}
		events <- event.GenericEvent{Object: obj}
	}()
}

// stopTimeout bounds one out-of-queue Job stop; the reconciler retries what it did not finish.
const stopTimeout = 10 * time.Second
