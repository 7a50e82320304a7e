package guard

import (
	"context"
	"errors"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/controllers/internal/unit"
	"github.com/lockedjob/lockedjob/controllers/internal/waitbook"
	"github.com/lockedjob/lockedjob/internal/lockbook"
	"github.com/lockedjob/lockedjob/internal/locks"
)

// TestGuardedWaitersBehindTheHeadWaitForAWakeUp: on a real Redis, the head of the queue re-checks
// on its backoff, the waiter behind it only at the queue re-check, and neither asks Redis again
// until then unless a release wakes it: the one a handoff names, or the lock's waiters after a
// plain release or a broken subscription. A waiter that got the lock leaves the book.
func TestGuardedWaitersBehindTheHeadWaitForAWakeUp(t *testing.T) {
	ctx := context.Background()
	book, _, _ := unit.Locks(t)
	cfg := &Config{Identity: locks.Identity{ClusterID: "c", TokenKey: []byte("0123456789abcdef")}}
	cfg.Defaults()
	waiting := &waitbook.Book{}
	ro := Holdings{Locks: book, Permits: locks.PermitReader{}, Config: cfg, Waiting: waiting}

	type claimant struct {
		job   *batchv1.Job
		c     locks.Claimant
		claim lockbook.Claim
	}
	claimants := map[string]*claimant{}
	created := time.Now().Add(-time.Minute)
	for i, name := range []string{"holder", "head", "behind"} {
		// The queue orders by priority, then age.
		job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name),
			CreationTimestamp: metav1.NewTime(created.Add(time.Duration(i) * time.Second)),
			Labels:            map[string]string{batchv1alpha1.LabelGuardLock: "db"}}}
		c, err := locks.ClaimantOfJob(job)
		if err != nil {
			t.Fatal(err)
		}
		id := cfg.Identity
		claimants[name] = &claimant{job: job, c: c,
			claim: lockbook.Claim{Key: id.LockKey(c), Token: id.Token(c), Holder: id.Holder(c)}}
	}
	acquire := func(name string) (*lockbook.Lock, error) {
		cl := claimants[name]
		return ro.Acquire(ctx, &cl.claim, cl.c, lockbook.WorkloadOf(cl.c, name))
	}
	wait := func(name string) (res ctrlResult) {
		t.Helper()
		_, err := acquire(name)
		if !errors.Is(err, lockbook.ErrNotAcquired) {
			t.Fatalf("%s: acquire = %v, want it to wait", name, err)
		}
		cl := claimants[name]
		r := ro.Wait(cl.claim, lockbook.WorkloadOf(cl.c, name), err, time.Now(), 0)
		return ctrlResult{after: r.RequeueAfter.Seconds(), priority: *r.Priority}
	}
	asks := func(name string) bool {
		_, ask := ro.Asks(claimants[name].claim, time.Now())
		return ask
	}

	if _, err := acquire("holder"); err != nil {
		t.Fatal(err)
	}
	if head := wait("head"); head.after > cfg.WaitBackoffMax.Seconds() || head.priority != 0 {
		t.Fatalf("the head re-checks after %vs at priority %d, want within %v at 0", head.after, head.priority, cfg.WaitBackoffMax)
	}
	if behind := wait("behind"); behind.after < cfg.QueueRecheck.Seconds()/2 || behind.priority != handler.LowPriority {
		t.Fatalf("the waiter behind the head re-checks after %vs at priority %d, want the queue re-check (%v) at low priority",
			behind.after, behind.priority, cfg.QueueRecheck)
	}
	if asks("head") || asks("behind") {
		t.Fatal("a waiter asks Redis again before anything woke it or its re-check fell due")
	}

	wake := make(chan event.GenericEvent, 8)
	waker := &ReleaseWaker{Locks: book, Identity: cfg.Identity, Kind: locks.KindJob, Waiting: waiting, Wake: wake,
		Named: func(namespace, name string) client.Object { return claimants[name].job },
		Waiters: func(context.Context, string) []client.Object {
			return []client.Object{claimants["behind"].job}
		}}
	waker.wakeFor(ctx, lockbook.Released{Key: "k", HandedTo: claimants["head"].claim.Holder})
	if !asks("head") || asks("behind") {
		t.Fatal("a handoff to the head did not wake the head alone")
	}
	if len(wake) != 1 || (<-wake).Object.GetName() != "head" {
		t.Fatal("the head was not sent a wake-up")
	}

	waker.wakeFor(ctx, lockbook.Released{Key: "k"})
	if !asks("behind") {
		t.Fatal("a plain release did not wake the lock's waiters")
	}
	wait("behind")
	waker.wakeFor(ctx, lockbook.Released{Missed: true})
	if !asks("behind") {
		t.Fatal("a broken subscription did not wake every waiter")
	}

	if err := ro.Release(ctx, claimants["holder"].claim, lockbook.WorkloadOf(claimants["holder"].c, "holder")); err != nil {
		t.Fatal(err)
	}
	if _, err := acquire("head"); err != nil {
		t.Fatalf("the head was not handed the lock: %v", err)
	}
	if _, known := waiting.ByLock()[claimants["head"].claim.Key][claimants["head"].claim.Holder]; known {
		t.Fatal("the wait book still counts a waiter that got the lock")
	}
}

type ctrlResult struct {
	after    float64
	priority int
}
