package lockedjob

import (
	"context"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"

	"github.com/lockedjob/lockedjob/controllers/internal/unit"
	"github.com/lockedjob/lockedjob/internal/locks"
	"github.com/lockedjob/lockedjob/internal/redislock"
)

// TestJoinBeforeTheFirstWrite (issue 27, the burst): a LockedJob first seen while its lock is held
// stands in the lock's queue with one script and no write, and leaves the rest of its first pass
// for later at low priority; the holder's release hands the lock straight to it, and its next pass
// adds the finalizer, claims the lock with the handoff's fence and creates the Job. One deleted
// before its first write leaves the queue. (A LockedJob whose lock is free goes on with its first
// pass at once: every other test's first pass.)
func TestJoinBeforeTheFirstWrite(t *testing.T) {
	ctx := context.Background()
	q := newQueueRig(t, unit.LockedJob("b", "uid-b"), unit.LockedJob("c", "uid-c"))
	api, lockClient, rc, id, get, pass := q.api, q.lockClient, q.rc, q.id, q.get, q.pass
	holderOf := func(name string) string { return id.Holder(locks.ClaimantOf(get(name))) }

	// The lock is held outside this operator, so no renewal of its own runs a script in between.
	key := id.LockKey(locks.ClaimantOf(get("b")))
	holder, err := lockClient.Acquire(ctx, key, time.Minute, redislock.WithQueue("elsewhere", 0, time.Minute), redislock.WithMetadata("elsewhere"))
	if err != nil {
		t.Fatal(err)
	}

	for i, name := range []string{"b", "c"} {
		before, version := unit.ScriptCalls(t, rc), get(name).ResourceVersion
		res := pass(name)
		if calls := unit.ScriptCalls(t, rc) - before; calls != 1 {
			t.Fatalf("%s's first pass behind a holder ran %d scripts, want 1 (the join)", name, calls)
		}
		if got := get(name); got.ResourceVersion != version {
			t.Fatalf("%s's first pass behind a holder wrote it (%+v, finalizers %v), want no write", name, got.Status, got.Finalizers)
		}
		if res.Priority == nil || *res.Priority != handler.LowPriority || res.RequeueAfter != joinRecheck {
			t.Fatalf("%s's first pass goes on after %v at priority %v, want %v at %d", name, res.RequeueAfter, res.Priority, joinRecheck, handler.LowPriority)
		}
		members, err := lockClient.Lineup(ctx, key, i+1)
		if err != nil || len(members) != 1 || members[0] != holderOf(name) {
			t.Fatalf("queue place %d: %v (%v), want %s", i+1, members, err, holderOf(name))
		}
	}

	// The holder's Job ends: its release hands the lock to b, who never wrote anything.
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := lockClient.Inspect(ctx, key)
	if err != nil || !st.Held || st.Metadata != holderOf("b") || st.Fence <= holder.Fence() {
		t.Fatalf("after the release: %+v (%v), want it handed to b above fence %d", st, err, holder.Fence())
	}
	pass("b")
	b := get("b")
	if !controllerutil.ContainsFinalizer(b, finalizer) || b.Status.JobName == "" || b.Status.FencingToken == nil || *b.Status.FencingToken != st.Fence {
		t.Fatalf("b after the handoff: %+v, finalizers %v; want its Job under the finalizer with fence %d", b.Status, b.Finalizers, st.Fence)
	}

	// c is deleted before its first write: nothing holds it back, and it leaves the queue.
	if err := api.Delete(ctx, get("c")); err != nil {
		t.Fatal(err)
	}
	pass("c")
	if members, err := lockClient.Lineup(ctx, key, 1); err != nil || len(members) != 0 {
		t.Fatalf("the queue after c was deleted: %v (%v), want it empty", members, err)
	}
}
