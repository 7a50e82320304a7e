package lockbook

import (
	"context"
	"testing"
	"time"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/internal/locks"
	"github.com/lockedjob/lockedjob/internal/redislock"
	"k8s.io/apimachinery/pkg/types"
)

// TestLostLockStopsTheJobOutsideTheQueue (#26): the book stops the Job of a lost lock itself,
// before the reconciler runs, so a loss never waits for a free reconcile worker.
func TestLostLockStopsTheJobOutsideTheQueue(t *testing.T) {
	book, lockClient, rdb := unitLocks(t)
	stopped := make(chan Workload, 1)
	book.SetHandlers(locks.KindLockedJob, Handlers{StopWorkload: func(_ context.Context, w Workload, _ error) { stopped <- w }})

	ctx := context.Background()
	lock := trackedLock(t, book, lockClient, 3*time.Second)
	if err := rdb.Del(ctx, lock.RedisKey()).Err(); err != nil {
		t.Fatal(err)
	}
	var w Workload
	select {
	case w = <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("the Job of the lost lock was not stopped")
	}
	if w.Job != "n-1" || w.Policy != batchv1alpha1.LockLostSuspend {
		t.Fatalf("stopped %+v, want Job n-1 with the default policy Suspend", w)
	}
	select {
	case <-book.Events(locks.KindLockedJob):
	case <-time.After(10 * time.Second):
		t.Fatal("the reconciler was not woken after the stop")
	}
	if book.Lost("u") == nil || book.Holding("u") != nil {
		t.Fatal("the book must remember the loss until the status shows it")
	}
}

// TestLossWakesTheReconcilerOfItsKind: a lost lock of a Job is stopped by the Job reconciler's
// handler and wakes that reconciler alone, on its own channel, so a loss never waits behind the
// losses of another kind, and the LockedJob reconciler hears nothing of it.
func TestLossWakesTheReconcilerOfItsKind(t *testing.T) {
	book, lockClient, rdb := unitLocks(t)
	byKind := map[locks.Kind]chan Workload{locks.KindLockedJob: make(chan Workload, 1), locks.KindJob: make(chan Workload, 1)}
	for kind, ch := range byKind {
		book.SetHandlers(kind, Handlers{StopWorkload: func(_ context.Context, w Workload, _ error) { ch <- w }})
	}
	ctx := t.Context()
	lock, err := lockClient.Acquire(ctx, "k", 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	w := Workload{Kind: locks.KindJob, Object: types.NamespacedName{Namespace: "ns", Name: "n"}, UID: "u", Job: "n", Policy: batchv1alpha1.LockLostSuspend}
	if err := book.Track(w, &Lock{l: lock}, 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Del(ctx, lock.RedisKey()).Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-byKind[locks.KindJob]:
		if got != w {
			t.Fatalf("stopped %+v, want %+v", got, w)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the Job of the lost lock was not stopped")
	}
	select {
	case ev := <-book.Events(locks.KindJob):
		if ev.Object.GetNamespace() != "ns" || ev.Object.GetName() != "n" || ev.Object.GetUID() != "u" {
			t.Fatalf("woke the Job reconciler for %s/%s (%s), want ns/n (u)", ev.Object.GetNamespace(), ev.Object.GetName(), ev.Object.GetUID())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the Job reconciler was not woken after the stop")
	}
	select {
	case <-book.Events(locks.KindLockedJob):
		t.Fatal("a Job's loss woke the LockedJob reconciler")
	case <-byKind[locks.KindLockedJob]:
		t.Fatal("a Job's loss went to the LockedJob reconciler's handler")
	case <-time.After(200 * time.Millisecond):
	}
}

// TestALockReleasedByAnotherProcessOfOursIsNoLoss: a successor operator released the lock with this
// LockedJob's token (at its pod's outcome) while this book, a deposed leader's, still renewed it;
// the keeper finds it gone, and the release mark tells the book it was released: the Job is not
// stopped, the book says released, not lost, and the reconciler is woken to go on to the end. A
// lock taken away without a release is still a loss (TestLostLockStopsTheJobOutsideTheQueue).
func TestALockReleasedByAnotherProcessOfOursIsNoLoss(t *testing.T) {
	book, lockClient, _ := unitLocks(t, redislock.WithReleaseMarkRetention(ReleaseMarkRetention))
	stopped := make(chan Workload, 1)
	book.SetHandlers(locks.KindLockedJob, Handlers{StopWorkload: func(_ context.Context, w Workload, _ error) { stopped <- w }})
	lock := trackedLock(t, book, lockClient, 3*time.Second)
	// The successor's release: the same token, the recorded fence.
	if err := lockClient.ReleaseToken(t.Context(), lock.Key(), lock.Token(), lock.Fence()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-book.Events(locks.KindLockedJob):
	case w := <-stopped:
		t.Fatalf("the Job of a lock released by its own token was stopped: %+v", w)
	case <-time.After(10 * time.Second):
		t.Fatal("the reconciler was not woken once the keeper found the lock gone")
	}
	rec := book.RecordOf("u")
	if rec.Lost != nil || !rec.Released || rec.Lock != nil {
		t.Fatalf("the book's record %+v, want released, not lost, nothing held", rec)
	}
}
