package lockedjob

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
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

// TestWaitersBehindTheHeadLearnTheirPlaceWithoutAskingRedis (#13): after a handoff, one lineup read
// tells every waiter whose shown place changed; their passes record it without a Redis call each,
// and only the head keeps re-checking on the short backoff.
func TestWaitersBehindTheHeadLearnTheirPlaceWithoutAskingRedis(t *testing.T) {
	ctx := context.Background()
	book, lockClient, rc := unit.Locks(t)
	id := locks.Identity{ClusterID: "c", TokenKey: []byte("0123456789abcdef")}
	const n = 13
	var objs []client.Object
	for i := range n {
		objs = append(objs, unit.LockedJob(fmt.Sprintf("lj%02d", i), types.UID(fmt.Sprintf("uid-%02d", i))))
	}
	api := withWakeupIndexes(fake.NewClientBuilder().WithScheme(unit.Scheme(t)).
		WithStatusSubresource(&batchv1alpha1.LockedJob{}).WithObjects(objs...), id).Build()
	r := &LockedJobReconciler{Client: api, APIReader: api, Scheme: api.Scheme(), Locks: book,
		Recorder: &unit.Events{}, Clock: clock.RealClock{}, Config: Config{Identity: id}}
	r.Config.defaults()
	get := func(name string) *batchv1alpha1.LockedJob {
		lj := &batchv1alpha1.LockedJob{}
		if err := api.Get(ctx, types.NamespacedName{Namespace: "ns", Name: name}, lj); err != nil {
			t.Fatal(err)
		}
		return lj
	}
	pass := func(name string) ctrl.Result {
		res, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: name}})
		if err != nil {
			t.Fatalf("reconcile %s: %v", name, err)
		}
		return res
	}

	var holder string
	waiters := map[string]string{} // queue member -> LockedJob
	for _, o := range objs {
		pass(o.GetName()) // the finalizer
		res := pass(o.GetName())
		lj := get(o.GetName())
		if lj.Status.FencingToken != nil {
			holder = lj.Name
			continue
		}
		waiters[id.Holder(locks.ClaimantOf(lj))] = lj.Name
		// Only the head re-checks soon: behind it, handoffs tell the place.
		pos := derefInt32(lj.Status.QueuePosition)
		if pos == 1 && res.RequeueAfter > r.Config.WaitBackoffMax {
			t.Fatalf("the head re-checks after %v, want within %v", res.RequeueAfter, r.Config.WaitBackoffMax)
		}
		if pos != 1 && res.RequeueAfter < r.Config.QueueRecheck/2 {
			t.Fatalf("waiter at %d re-checks after %v, want at least %v", pos, res.RequeueAfter, r.Config.QueueRecheck/2)
		}
		// The head's re-check must not starve behind a burst; the others' may.
		if want := map[bool]int{true: 0, false: handler.LowPriority}[pos == 1]; res.Priority == nil || *res.Priority != want {
			t.Fatalf("waiter at %d re-checks at priority %v, want %d", pos, res.Priority, want)
		}
	}
	if holder == "" || len(waiters) != n-1 {
		t.Fatalf("holder %q, waiters %v: want one holder and %d waiters", holder, waiters, n-1)
	}
	key := id.LockKey(locks.ClaimantOf(get(holder)))
	members, err := lockClient.Lineup(ctx, key, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12)
	if err != nil || len(members) != n-1 {
		t.Fatalf("lineup %v (%v)", members, err)
	}
	byPosition := map[int32]string{}
	blockedBy := map[string]string{} // as each waiter's last Redis answer said
	for i, m := range members {
		byPosition[int32(i+1)] = waiters[m]
		blockedBy[waiters[m]] = get(waiters[m]).Status.BlockedBy
	}

	head := get(byPosition[1])
	if err := lockClient.ReleaseToken(ctx, key, id.Token(locks.ClaimantOf(get(holder))), 0); err != nil {
		t.Fatal(err)
	}
	w := &releaseWaker{locks: unit.Book(t, lockClient), identity: id, reader: api, waiting: &r.waiting, timeout: time.Second,
		handed: make(chan event.GenericEvent, n), moved: make(chan event.GenericEvent, n)}
	drain := func(ch chan event.GenericEvent) []string {
		var names []string
		for len(ch) > 0 {
			names = append(names, (<-ch).Object.GetName())
		}
		slices.Sort(names)
		return names
	}
	before := unit.ScriptCalls(t, rc)
	w.wake(ctx, redislock.Released{Key: lockClient.RedisKey(key), HandedTo: id.Holder(locks.ClaimantOf(head))})
	if got := drain(w.handed); !slices.Equal(got, []string{head.Name}) {
		t.Fatalf("handed wakes %v, want [%s]", got, head.Name)
	}
	// Everyone moved up by one. Shown changes for those now at 1, 2 and 3 (exact), at 5 (">5" to
	// ">3") and at 10 (">10" to ">5"); the others' shown place stays, so they are not woken.
	told := map[int32]string{1: "", 2: "", 3: "", 5: "position >3 in queue", 10: "position >5 in queue"}
	var want []string
	for now := range told {
		want = append(want, byPosition[now+1])
	}
	slices.Sort(want)
	moved := drain(w.moved)
	if !slices.Equal(moved, want) {
		t.Fatalf("moved wakes %v, want %v", moved, want)
	}
	for now, message := range told {
		name := byPosition[now+1]
		pass(name)
		pass(name) // as its own status write triggers: nothing new to ask
		st := get(name).Status
		if message != "" {
			if st.QueuePosition != nil || !strings.Contains(st.Message, message) {
				t.Fatalf("%s: position %v, message %q; want %q", name, st.QueuePosition, st.Message, message)
			}
			continue
		}
		// The place is the lineup's; who blocks stays what Redis answered the waiter itself, since
		// the release message behind the hint may be forged.
		if got := derefInt32(st.QueuePosition); got != now || st.BlockedBy != blockedBy[name] {
			t.Fatalf("%s: position %d blocked by %q, want %d blocked by %q", name, got, st.BlockedBy, now, blockedBy[name])
		}
	}
	if calls := unit.ScriptCalls(t, rc) - before; calls != 1 {
		t.Fatalf("the handoff cost the waiters %d Redis scripts, want 1 (the lineup)", calls)
	}

	pass(head.Name)
	if got := get(head.Name); got.Status.FencingToken == nil || got.Status.JobName == "" {
		t.Fatalf("the head did not claim the lock handed to it: %+v", got.Status)
	}
}

// TestJobEndedPassesGoFirst: the pass of a LockedJob whose Job just finished leaves the queue
// before passes that were waiting longer, through the owner handler controller-runtime builds (it
// wraps the queue again, which once dropped the priority).
func TestJobEndedPassesGoFirst(t *testing.T) {
	q := priorityqueue.New[reconcile.Request]("test")
	defer q.ShutDown()
	scheme := unit.Scheme(t)
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(batchv1alpha1.GroupVersion.WithKind("LockedJob"), meta.RESTScopeNamespace)
	h := jobEndedFirst(handler.EnqueueRequestForOwner(scheme, mapper, &batchv1alpha1.LockedJob{}, handler.OnlyControllerOwner()))
	ctx := context.Background()
	for _, name := range []string{"busy-1", "busy-2"} {
		q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: name}})
	}
	owner := unit.LockedJob("ended", "uid-ended")
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "ended-1", ResourceVersion: "1"}}
	if err := controllerutil.SetControllerReference(owner, job, scheme); err != nil {
		t.Fatal(err)
	}
	done := job.DeepCopy()
	done.ResourceVersion = "2"
	done.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}
	h.Update(ctx, event.UpdateEvent{ObjectOld: job, ObjectNew: done}, q)

	req, priority, _ := q.GetWithPriority()
	if req.Name != "ended" || priority != priorityJobEnded {
		t.Fatalf("first out: %s at priority %d, want ended at %d", req.Name, priority, priorityJobEnded)
	}
}
