package lockedjob

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/controllers/internal/unit"
	"github.com/lockedjob/lockedjob/internal/locks"
	"github.com/lockedjob/lockedjob/internal/redislock"
)

// TestJoinAtCreate (issue 27, the burst): a LockedJob created while its lock is held stands in the
// lock's queue from its create event, with one script and no write, before any pass of it; its
// first pass waits for that join and then goes at low priority. The holder's release hands the
// lock straight to it, and its next pass adds the finalizer, claims the lock with the handoff's
// fence and creates the Job. One deleted before its first pass leaves the queue, and one whose lock
// is free has its first pass at the default priority, which takes the lock.
func TestJoinAtCreate(t *testing.T) {
	ctx := context.Background()
	free := unit.LockedJob("free", "uid-free")
	free.Spec.Lock.Name = "another"
	rig := newQueueRig(t, unit.LockedJob("b", "uid-b"), unit.LockedJob("c", "uid-c"), free)
	r, api, lockClient, rc, id, get, pass := rig.r, rig.api, rig.lockClient, rig.rc, rig.id, rig.get, rig.pass
	r.joins = newJoiner(r)
	q := priorityqueue.New[reconcile.Request]("test")
	defer q.ShutDown()
	holderOf := func(name string) string { return id.Holder(locks.ClaimantOf(get(name))) }
	created := func(name string) {
		t.Helper()
		r.joins.onCreate().Create(ctx, event.CreateEvent{Object: get(name)}, q)
		if !r.joins.joining(types.NamespacedName{Namespace: "ns", Name: name}) {
			t.Fatalf("%s: not handed to the joiner", name)
		}
	}
	next := func(want string, wantPriority int) {
		t.Helper()
		req, priority, _ := q.GetWithPriority()
		q.Done(req)
		if req.Name != want || priority != wantPriority {
			t.Fatalf("enqueued %s at priority %d, want %s at %d", req.Name, priority, want, wantPriority)
		}
	}

	// The lock is held outside this operator, so no renewal of its own runs a script in between.
	key := id.LockKey(locks.ClaimantOf(get("b")))
	holder, err := lockClient.Acquire(ctx, key, time.Minute, redislock.WithQueue("elsewhere", 0, time.Minute), redislock.WithMetadata("elsewhere"))
	if err != nil {
		t.Fatal(err)
	}

	for i, name := range []string{"b", "c"} {
		created(name)
		before, version := unit.ScriptCalls(t, rc), get(name).ResourceVersion
		pass(name) // an event before the join answered: the pass waits for it
		if calls := unit.ScriptCalls(t, rc) - before; calls != 0 || get(name).ResourceVersion != version {
			t.Fatalf("%s: a pass before its join ran %d scripts and wrote %v, want nothing", name, calls, get(name).ResourceVersion != version)
		}
		r.joins.serve(ctx, <-r.joins.in)
		if calls := unit.ScriptCalls(t, rc) - before; calls != 1 {
			t.Fatalf("%s's join behind a holder ran %d scripts, want 1", name, calls)
		}
		if got := get(name); got.ResourceVersion != version {
			t.Fatalf("%s's join wrote it (%+v, finalizers %v), want no write", name, got.Status, got.Finalizers)
		}
		next(name, handler.LowPriority)
		members, err := lockClient.Lineup(ctx, key, i+1)
		if err != nil || len(members) != 1 || members[0] != holderOf(name) {
			t.Fatalf("queue place %d: %v (%v), want %s", i+1, members, err, holderOf(name))
		}
	}

	// The holder's Job ends: its release hands the lock to b, whose first pass has not run.
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

	// c is deleted before its first pass: nothing holds it back, and it leaves the queue.
	if err := api.Delete(ctx, get("c")); err != nil {
		t.Fatal(err)
	}
	pass("c")
	if members, err := lockClient.Lineup(ctx, key, 1); err != nil || len(members) != 0 {
		t.Fatalf("the queue after c was deleted: %v (%v), want it empty", members, err)
	}

	// A LockedJob whose lock (another one) is free joins as well (the answer says free) and goes first.
	created("free")
	r.joins.serve(ctx, <-r.joins.in)
	next("free", 0)
	pass("free")
	if lj := get("free"); lj.Status.Phase != batchv1alpha1.PhaseRunning {
		t.Fatalf("free after its first pass: %+v, want Running", lj.Status)
	}
}

// TestJoinable: only a LockedJob that never asked for its lock joins, and only where the lock
// library hands locks over and its namespace may take the lock.
func TestJoinable(t *testing.T) {
	rig := newQueueRig(t)
	r := rig.r
	fresh := func() *batchv1alpha1.LockedJob { return unit.LockedJob("x", "uid-x") }
	if !r.joinable(fresh()) {
		t.Fatal("a fresh LockedJob does not join")
	}
	for name, lj := range map[string]*batchv1alpha1.LockedJob{
		"with the finalizer": func() *batchv1alpha1.LockedJob {
			lj := fresh()
			controllerutil.AddFinalizer(lj, finalizer)
			return lj
		}(),
		"with a phase": func() *batchv1alpha1.LockedJob {
			lj := fresh()
			lj.Status.Phase = batchv1alpha1.PhaseWaiting
			return lj
		}(),
		"being deleted": func() *batchv1alpha1.LockedJob {
			lj := fresh()
			lj.DeletionTimestamp = &metav1.Time{Time: time.Now()}
			return lj
		}(),
		"of a cluster lock its namespace may not take": func() *batchv1alpha1.LockedJob {
			lj := fresh()
			lj.Spec.Lock.Scope = batchv1alpha1.LockScopeCluster
			return lj
		}(),
	} {
		if r.joinable(lj) {
			t.Errorf("a LockedJob %s joins", name)
		}
	}
}
