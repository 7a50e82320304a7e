package lockbook

import (
	"context"
	"testing"
	"time"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
)

// TestLostLockStopsTheJobOutsideTheQueue (#26): the book stops the Job of a lost lock itself,
// before the reconciler runs, so a loss never waits for a free reconcile worker.
func TestLostLockStopsTheJobOutsideTheQueue(t *testing.T) {
	book, lockClient, rdb := unitLocks(t)
	stopped := make(chan Workload, 1)
	book.StopWorkload = func(_ context.Context, w Workload, _ error) { stopped <- w }

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
	case <-book.Events():
	case <-time.After(10 * time.Second):
		t.Fatal("the reconciler was not woken after the stop")
	}
	if book.Lost("u") == nil || book.Holding("u") != nil {
		t.Fatal("the book must remember the loss until the status shows it")
	}
}
