package lockedjob

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/controllers/internal/unit"
	"github.com/lockedjob/lockedjob/controllers/internal/waitbook"
	"github.com/lockedjob/lockedjob/internal/locks"
	"github.com/lockedjob/lockedjob/internal/redislock"
)

// TestWaiterRefusedItsScopeNamesNoHolder: a LockedJob that waited for a Cluster lock while its
// namespace was trusted, and is refused the scope after the operator restarted with fewer trusted
// namespaces, neither asks Redis nor keeps showing the holder or its place in that lock's queue.
func TestWaiterRefusedItsScopeNamesNoHolder(t *testing.T) {
	ctx := context.Background()
	book, lockClient, rc := unit.Locks(t)
	lj := unit.LockedJob("w", "uid-w")
	lj.Spec.Lock.Scope = batchv1alpha1.LockScopeCluster
	api := fake.NewClientBuilder().WithScheme(unit.Scheme(t)).
		WithStatusSubresource(&batchv1alpha1.LockedJob{}).WithObjects(lj).Build()
	r := &LockedJobReconciler{Client: api, APIReader: api, Scheme: api.Scheme(), Locks: book,
		Recorder: &unit.Events{}, Clock: clock.RealClock{},
		Config: Config{Identity: locks.Identity{ClusterID: "c", TokenKey: []byte("0123456789abcdef")}, ClusterScopeNamespaces: locks.ScopeGate{"*"}}}
	r.Config.defaults()
	u := &unitRig{t: t, api: api, r: r, lj: lj, req: ctrl.Request{NamespacedName: client.ObjectKeyFromObject(lj)}}
	const other = "c/trusted/holder/uid-hold"
	if _, err := lockClient.Acquire(ctx, r.Config.Identity.LockKey(locks.ClaimantOf(lj)), time.Minute, redislock.WithMetadata(other)); err != nil {
		t.Fatal(err)
	}
	u.reconcile() // the finalizer, then the first attempt
	if st := u.get().Status; st.Phase != batchv1alpha1.PhaseWaiting || st.BlockedBy != other {
		t.Fatalf("phase %s blocked by %q, want Waiting behind %s", st.Phase, st.BlockedBy, other)
	}

	// The restarted operator: a new gate, and nothing known of waiters.
	u.r.Config.ClusterScopeNamespaces, u.r.waiting = locks.ScopeGate{"trusted"}, waitbook.Book{}
	before := unit.ScriptCalls(t, rc)
	u.reconcile()
	if calls := unit.ScriptCalls(t, rc) - before; calls != 0 {
		t.Errorf("the pass ran %d Redis scripts, want 0", calls)
	}
	st := u.get().Status
	if st.BlockedBy != "" || st.QueuePosition != nil {
		t.Errorf("blocked by %q at place %d, want neither: the lock is not this namespace's to look at", st.BlockedBy, derefInt32(st.QueuePosition))
	}
	if c := meta.FindStatusCondition(u.get().Status.Conditions, batchv1alpha1.ConditionLockAcquired); c == nil || c.Reason != batchv1alpha1.ReasonScopeNotAllowed {
		t.Errorf("LockAcquired = %+v, want reason %s", c, batchv1alpha1.ReasonScopeNotAllowed)
	}
	if strings.Contains(st.Message, "trusted") {
		t.Errorf("message %q names the namespaces allowed Cluster scope: other tenants' business", st.Message)
	}
}
