package lockedjob

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/event"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/controllers/internal/unit"
	"github.com/lockedjob/lockedjob/controllers/internal/waitbook"
	"github.com/lockedjob/lockedjob/internal/locks"
	"github.com/lockedjob/lockedjob/internal/redislock"
	"github.com/lockedjob/lockedjob/internal/testutil/redisserver"
)

// A release that handed the lock to a waiter wakes that waiter alone; a plain release wakes every
// waiter of the lock. Waking them all on every handoff cost a queue of D waiters D Redis calls and
// up to D status writes per release (issue 13).
func TestReleaseWakesOnlyTheWaiterItHandedTheLockTo(t *testing.T) {
	id := locks.Identity{ClusterID: "c", TokenKey: []byte("0123456789abcdef")}
	const key = "lockedjob:{ns/c/ns/db}"
	var objs []client.Object
	for _, name := range []string{"head", "second", "third"} {
		lj := unit.LockedJob(name, types.UID("uid-"+name))
		lj.Status.Phase, lj.Status.LockKey = batchv1alpha1.PhaseWaiting, key
		objs = append(objs, lj)
	}
	w, api := wakerOver(t, id, objs...)
	woken := func() []string {
		handed, moved := w.woken()
		return append(handed, moved...)
	}
	ctx := context.Background()

	w.wake(ctx, redislock.Released{Key: key, HandedTo: id.Holder(locks.ClaimantOf(objs[0].(*batchv1alpha1.LockedJob)))})
	if got := woken(); len(got) != 1 || got[0] != "head" {
		t.Fatalf("a handoff to head woke %v, want [head]", got)
	}
	// The cache may not show the member Waiting yet (its status write is on its way): the lock
	// waits for it all the same.
	head := objs[0].(*batchv1alpha1.LockedJob)
	head.Status.Phase = batchv1alpha1.PhasePending
	if err := api.Update(ctx, head); err != nil {
		t.Fatal(err)
	}
	w.wake(ctx, redislock.Released{Key: key, HandedTo: id.Holder(locks.ClaimantOf(head))})
	if got := woken(); len(got) != 1 || got[0] != "head" {
		t.Fatalf("a handoff to head not yet seen Waiting woke %v, want [head]", got)
	}
	head.Status.Phase = batchv1alpha1.PhaseWaiting
	if err := api.Update(ctx, head); err != nil {
		t.Fatal(err)
	}
	w.wake(ctx, redislock.Released{Key: key, HandedTo: "other-cluster/ns/x/123"})
	if got := woken(); len(got) != 0 {
		t.Fatalf("a handoff to another cluster's waiter woke %v, want nobody", got)
	}
	w.wake(ctx, redislock.Released{Key: key})
	if got := woken(); len(got) != 3 {
		t.Fatalf("a plain release woke %v, want all three waiters", got)
	}
	w.wake(ctx, redislock.Released{Missed: true})
	if got := woken(); len(got) != 3 {
		t.Fatalf("a gap in the announcements woke %v, want all three waiters", got)
	}
}

// wakerOver is a release waker over a fake cache holding objs, with the manager's indexes, and a
// real redis-server behind its lock book.
func wakerOver(t *testing.T, id locks.Identity, objs ...client.Object) (*releaseWaker, client.Client) {
	t.Helper()
	api := withWakeupIndexes(fake.NewClientBuilder().WithScheme(unit.Scheme(t)).WithObjects(objs...), id).Build()
	lockClient, err := redislock.New(redisserver.Start(t).Client(t))
	if err != nil {
		t.Fatal(err)
	}
	return &releaseWaker{locks: unit.Book(t, lockClient), identity: id, reader: api, waiting: &waitbook.Book{}, timeout: time.Second,
		handed: make(chan event.GenericEvent, 8), moved: make(chan event.GenericEvent, 8)}, api
}

// withWakeupIndexes gives a fake cache the indexes the manager's cache has.
func withWakeupIndexes(b *fake.ClientBuilder, id locks.Identity) *fake.ClientBuilder {
	for name, index := range wakeupIndexes(id) {
		b = b.WithIndex(&batchv1alpha1.LockedJob{}, name, index)
	}
	return b
}

// woken drains the names the waker sent, urgent (handed) and not (moved).
func (w *releaseWaker) woken() (handed, moved []string) {
	for len(w.handed) > 0 {
		handed = append(handed, (<-w.handed).Object.GetName())
	}
	for len(w.moved) > 0 {
		moved = append(moved, (<-w.moved).Object.GetName())
	}
	return handed, moved
}

func TestShownPosition(t *testing.T) {
	for _, c := range []struct {
		position, shown int
		exact           bool
	}{
		{1, 1, true}, {3, 3, true}, {4, 3, false}, {5, 3, false}, {6, 5, false}, {10, 5, false}, {11, 10, false},
		{20, 10, false}, {21, 20, false}, {50, 20, false}, {51, 50, false}, {100, 50, false}, {101, 100, false},
		{999, 500, false}, {1001, 1000, false}, {2001, 2000, false}, {5001, 5000, false},
	} {
		shown, exact := shownPosition(c.position)
		if shown != c.shown || exact != c.exact {
			t.Errorf("shownPosition(%d) = %d, %v; want %d, %v", c.position, shown, exact, c.shown, c.exact)
		}
	}
	// A waiter walking from the back of a queue of 1,000 to its head sees its status change a
	// bounded number of times, not 1,000.
	changes, last := 0, -1
	for p := 1000; p >= 1; p-- {
		if shown, _ := shownPosition(p); shown != last {
			changes, last = changes+1, shown
		}
	}
	if changes > 12 {
		t.Fatalf("%d shown positions over a queue of 1,000, want at most 12", changes)
	}
	// A handoff tells exactly the places whose shown value changes when everyone moves up by one.
	shown := func(p int) string { n, exact := shownPosition(p); return fmt.Sprint(n, exact) }
	for _, p := range placesTold {
		if shown(p+1) == shown(p) {
			t.Errorf("place %d is told, but moving there from %d changes nothing", p, p+1)
		}
	}
	told := 0
	for p := 1; p < 100_000; p++ {
		if shown(p+1) != shown(p) {
			told++
			if !slices.Contains(placesTold, p) {
				t.Errorf("moving from %d to %d changes the shown place, but %d is not told", p+1, p, p)
			}
		}
	}
	if told == 0 {
		t.Fatal("no place changes")
	}
}
