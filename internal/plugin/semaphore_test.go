package plugin

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/utils/ptr"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
)

// Semaphores (issue 11 part 1): a lock whose Lock declares spec.permits > 1 has up to that many
// holders, each in its own slot with a fencing token that rises within the slot.

func inSlot(slot int32) func(*batchv1alpha1.LockedJob) {
	return func(o *batchv1alpha1.LockedJob) { o.Status.Slot = ptr.To(slot) }
}

func TestDeriveLocksOfASemaphore(t *testing.T) {
	cases := map[string]struct {
		ljs  []batchv1alpha1.LockedJob
		want []Holder
	}{
		"every LockedJob whose LockAcquired is True holds it, lowest slot first": {
			ljs: []batchv1alpha1.LockedJob{
				lj("c", holding(4, -time.Second), inSlot(2)),
				lj("a", holding(12, -time.Hour), inSlot(0)),
				lj("b", holding(9, -time.Minute), inSlot(1)),
				lj("w", waitingAt(1, "c/ns/a/x")),
			},
			want: []Holder{
				{Kind: kindLockedJob, Namespace: "ns", Name: "a", Slot: ptr.To[int32](0), FencingToken: ptr.To[int64](12), AcquiredAt: at(t0.Add(-time.Hour))},
				{Kind: kindLockedJob, Namespace: "ns", Name: "b", Slot: ptr.To[int32](1), FencingToken: ptr.To[int64](9), AcquiredAt: at(t0.Add(-time.Minute))},
				{Kind: kindLockedJob, Namespace: "ns", Name: "c", Slot: ptr.To[int32](2), FencingToken: ptr.To[int64](4), AcquiredAt: at(t0.Add(-time.Second))},
			},
		},
		"two say they hold one slot for a moment: the higher fence of that slot is the later holder, whatever other slots' fences": {
			ljs: []batchv1alpha1.LockedJob{
				lj("old", holding(30, -time.Hour), inSlot(1)),
				lj("new", holding(31, -time.Second), inSlot(1)),
				lj("other", holding(2, -time.Minute), inSlot(0)),
			},
			want: []Holder{
				{Kind: kindLockedJob, Namespace: "ns", Name: "other", Slot: ptr.To[int32](0), FencingToken: ptr.To[int64](2), AcquiredAt: at(t0.Add(-time.Minute))},
				{Kind: kindLockedJob, Namespace: "ns", Name: "new", Slot: ptr.To[int32](1), FencingToken: ptr.To[int64](31), AcquiredAt: at(t0.Add(-time.Second))},
			},
		},
		"a plain holder (no slot) holds slot 0, which it shares with a semaphore's first slot": {
			ljs: []batchv1alpha1.LockedJob{
				lj("plain", holding(5, -time.Hour)),
				lj("first", holding(6, -time.Second), inSlot(0)),
				lj("second", holding(3, -time.Minute), inSlot(1)),
			},
			want: []Holder{
				{Kind: kindLockedJob, Namespace: "ns", Name: "first", Slot: ptr.To[int32](0), FencingToken: ptr.To[int64](6), AcquiredAt: at(t0.Add(-time.Second))},
				{Kind: kindLockedJob, Namespace: "ns", Name: "second", Slot: ptr.To[int32](1), FencingToken: ptr.To[int64](3), AcquiredAt: at(t0.Add(-time.Minute))},
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			views := DeriveLocks(tc.ljs, nil)
			if len(views) != 1 {
				t.Fatalf("want one lock, got %d: %+v", len(views), views)
			}
			v := views[0]
			if diff := cmp.Diff(tc.want, v.Holders); diff != "" {
				t.Errorf("holders (-want,+got):\n%s", diff)
			}
			if v.InUse != len(tc.want) || v.Permits != 1 {
				t.Errorf("in use %d of %d, want %d of 1 (nothing declares the lock)", v.InUse, v.Permits, len(tc.want))
			}
			if diff := cmp.Diff(&tc.want[0], v.Holder); diff != "" {
				t.Errorf("holder is the first of holders (-want,+got):\n%s", diff)
			}
		})
	}
}

func TestOverlayDeclaredSemaphore(t *testing.T) {
	observed := at(t0)
	a := lj("a", holding(12, -time.Hour), inSlot(0))
	b := lj("b", holding(9, -time.Minute), inSlot(1))
	w := lj("w", waitingAt(1, "c/ns/a/x"))
	cases := map[string]struct {
		ljs      []batchv1alpha1.LockedJob
		declared Declared
		want     LockView
	}{
		"fresh: all of status.holders by slot, with another cluster's; acquiredAt from the LockedJob in view": {
			ljs: []batchv1alpha1.LockedJob{a, b, w},
			declared: Declared{Scope: "Namespace", Namespace: "ns", Name: "l", Permits: 3, Status: batchv1alpha1.LockViewStatus{
				ObservedAt: observed, InUse: 3, Permits: 3, Waiting: ptr.To[int32](1), Head: "c/ns/w/w-uid",
				Holders: []batchv1alpha1.LockHolder{
					{Holder: "far/ns/r/99", Slot: 2, FencingToken: 40},
					{Holder: "c/ns/a/x", LockedJob: "a", Slot: 0, FencingToken: 12},
					{Holder: "c/ns/b/y", LockedJob: "b", Slot: 1, FencingToken: 9, AcquiredAt: at(t0.Add(-50 * time.Second))},
				},
			}},
			want: LockView{Lock: "l", Scope: "Namespace", Namespace: "ns", Source: "Lock", Permits: 3, InUse: 3, Waiting: 1,
				Holders: []Holder{
					{Kind: kindLockedJob, Namespace: "ns", Name: "a", Slot: ptr.To[int32](0), FencingToken: ptr.To[int64](12), AcquiredAt: at(t0.Add(-time.Hour))},
					{Kind: kindLockedJob, Namespace: "ns", Name: "b", Slot: ptr.To[int32](1), FencingToken: ptr.To[int64](9), AcquiredAt: at(t0.Add(-50 * time.Second))},
					{Kind: kindLockedJob, Identity: "far/ns/r/99", Slot: ptr.To[int32](2), FencingToken: ptr.To[int64](40)},
				},
				Holder: &Holder{Kind: kindLockedJob, Namespace: "ns", Name: "a", Slot: ptr.To[int32](0), FencingToken: ptr.To[int64](12), AcquiredAt: at(t0.Add(-time.Hour))},
				Head:   &Ref{Kind: kindLockedJob, Namespace: "ns", Name: "w"}},
		},
		"stale (never read from Redis): holders stay derived, permits come from spec all the same": {
			ljs:      []batchv1alpha1.LockedJob{a, b, w},
			declared: Declared{Scope: "Namespace", Namespace: "ns", Name: "l", Permits: 2},
			want: LockView{Lock: "l", Scope: "Namespace", Namespace: "ns", Source: "LockedJobs", Permits: 2, InUse: 2, Waiting: 1,
				Holders: []Holder{
					{Kind: kindLockedJob, Namespace: "ns", Name: "a", Slot: ptr.To[int32](0), FencingToken: ptr.To[int64](12), AcquiredAt: at(t0.Add(-time.Hour))},
					{Kind: kindLockedJob, Namespace: "ns", Name: "b", Slot: ptr.To[int32](1), FencingToken: ptr.To[int64](9), AcquiredAt: at(t0.Add(-time.Minute))},
				},
				Holder: &Holder{Kind: kindLockedJob, Namespace: "ns", Name: "a", Slot: ptr.To[int32](0), FencingToken: ptr.To[int64](12), AcquiredAt: at(t0.Add(-time.Hour))},
				Head:   &Ref{Kind: kindLockedJob, Namespace: "ns", Name: "w"}},
		},
		"permits lowered to 1 under a holder of slot 1: it keeps its slot, and the view shows slots": {
			ljs: []batchv1alpha1.LockedJob{b},
			declared: Declared{Scope: "Namespace", Namespace: "ns", Name: "l", Permits: 1, Status: batchv1alpha1.LockViewStatus{
				ObservedAt: observed, InUse: 1, Permits: 1, Waiting: ptr.To[int32](0),
				Holders: []batchv1alpha1.LockHolder{{Holder: "c/ns/b/y", LockedJob: "b", Slot: 1, FencingToken: 9}},
			}},
			want: LockView{Lock: "l", Scope: "Namespace", Namespace: "ns", Source: "Lock", Permits: 1, InUse: 1,
				Holders: []Holder{{Kind: kindLockedJob, Namespace: "ns", Name: "b", Slot: ptr.To[int32](1), FencingToken: ptr.To[int64](9), AcquiredAt: at(t0.Add(-time.Minute))}},
				Holder:  &Holder{Kind: kindLockedJob, Namespace: "ns", Name: "b", Slot: ptr.To[int32](1), FencingToken: ptr.To[int64](9), AcquiredAt: at(t0.Add(-time.Minute))}},
		},
		"a Lock of one permit: its holder is a plain lock's, without a slot, although status says slot 0": {
			ljs: []batchv1alpha1.LockedJob{lj("h", holding(3, -time.Minute))},
			declared: Declared{Scope: "Namespace", Namespace: "ns", Name: "l", Permits: 1, Status: batchv1alpha1.LockViewStatus{
				ObservedAt: observed, InUse: 1, Permits: 1, Waiting: ptr.To[int32](0),
				Holders: []batchv1alpha1.LockHolder{{Holder: "c/ns/h/x", LockedJob: "h", FencingToken: 3}},
			}},
			want: LockView{Lock: "l", Scope: "Namespace", Namespace: "ns", Source: "Lock", Permits: 1, InUse: 1,
				Holders: []Holder{{Kind: kindLockedJob, Namespace: "ns", Name: "h", FencingToken: ptr.To[int64](3), AcquiredAt: at(t0.Add(-time.Minute))}},
				Holder:  &Holder{Kind: kindLockedJob, Namespace: "ns", Name: "h", FencingToken: ptr.To[int64](3), AcquiredAt: at(t0.Add(-time.Minute))}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := OverlayDeclared(DeriveLocks(tc.ljs, nil), tc.ljs, nil, []Declared{tc.declared})
			if diff := cmp.Diff([]LockView{tc.want}, got); diff != "" {
				t.Errorf("OverlayDeclared (-want,+got):\n%s", diff)
			}
		})
	}
}

// printTable prints views as `locks` does, at t0.
func printTable(t *testing.T, views []LockView) string {
	t.Helper()
	var out bytes.Buffer
	s := &session{streams: genericiooptions.IOStreams{Out: &out}, now: func() time.Time { return t0 }}
	if err := printLocksTable(s, views); err != nil {
		t.Fatal(err)
	}
	return out.String()
}

func TestLocksTable(t *testing.T) {
	acquired := func(d time.Duration) *metav1.Time { return at(t0.Add(-d)) }
	views := []LockView{
		{Lock: "free", Scope: "Namespace", Namespace: "ns", Permits: 1},
		{Lock: "mutex", Scope: "Namespace", Namespace: "ns", Permits: 1, InUse: 1, Waiting: 2, Head: &Ref{Kind: kindLockedJob, Namespace: "ns", Name: "w"},
			Holders: []Holder{{Kind: kindLockedJob, Namespace: "ns", Name: "h", FencingToken: ptr.To[int64](7), AcquiredAt: acquired(3 * time.Minute)}}},
		{Lock: "pool", Scope: "Namespace", Namespace: "ns", Permits: 3, InUse: 2, Holders: []Holder{
			{Kind: kindLockedJob, Namespace: "ns", Name: "a", Slot: ptr.To[int32](0), FencingToken: ptr.To[int64](12), AcquiredAt: acquired(time.Hour)},
			{Kind: kindLockedJob, Identity: "far/ns/r/99", Slot: ptr.To[int32](2), FencingToken: ptr.To[int64](40)},
		}},
		{Lock: "shared", Scope: "Cluster", Permits: 2, InUse: 2, Waiting: 1, Head: &Ref{Kind: kindLockedJob, Namespace: "ns2", Name: "w"}, Holders: []Holder{
			{Kind: kindLockedJob, Namespace: "ns1", Name: "a", Slot: ptr.To[int32](0), FencingToken: ptr.To[int64](5), AcquiredAt: acquired(90 * time.Second)},
			{Kind: kindLockedJob, Namespace: "ns2", Name: "b", Slot: ptr.To[int32](1), FencingToken: ptr.To[int64](3), AcquiredAt: acquired(20 * time.Second)},
		}},
	}
	want := strings.Join([]string{
		"LOCK     SCOPE       NAMESPACE   IN USE   HOLDERS                                                HELD FOR      WAITING   HEAD     LAST HANDOFF",
		"free     Namespace   ns          0/1      <none>                                                 <none>        0         <none>   <none>",
		"mutex    Namespace   ns          1/1      h (fence 7)                                            3m            2         w        <none>",
		"pool     Namespace   ns          2/3      a (slot 0, fence 12), far/ns/r/99 (slot 2, fence 40)   60m, <none>   0         <none>   <none>",
		"shared   Cluster                 2/2      ns1/a (slot 0, fence 5), ns2/b (slot 1, fence 3)       90s, 20s      1         ns2/w    <none>",
		"",
	}, "\n")
	if diff := cmp.Diff(want, printTable(t, views)); diff != "" {
		t.Errorf("table (-want,+got):\n%s", diff)
	}
}

func TestWhyOfASemaphoreWaiter(t *testing.T) {
	base := Explanation{Namespace: "ns", Name: "w", Lock: "pool", Scope: "Namespace", Phase: batchv1alpha1.PhaseWaiting, Place: &Place{Exact: 2}}
	cases := map[string]struct {
		permits int
		holders []Holder
		want    string
	}{
		"one permit of three in use, by a holder in a slot above 0": {
			permits: 3,
			holders: []Holder{{Kind: kindLockedJob, Namespace: "ns", Name: "a", Slot: ptr.To[int32](2), FencingToken: ptr.To[int64](8), AcquiredAt: at(t0.Add(-time.Minute))}},
			want: "It is Waiting. 1 of the lock's 3 permits is in use, by:\n" +
				"  slot 2: a (fence 8), holding for 60s (since 2026-12-01T11:59:00Z)\n",
		},
		"only Redis names a holder: one of them, not a count": {
			permits: 3,
			holders: []Holder{{Kind: kindLockedJob, Identity: "far/ns/r/99"}},
			want:    "It is Waiting. The lock has 3 permits; at its last attempt Redis named far/ns/r/99 (no LockedJob you can read) as a holder.\n",
		},
		"its Lock could not be read, the slots show a semaphore": {
			holders: []Holder{
				{Kind: kindLockedJob, Namespace: "ns", Name: "a", Slot: ptr.To[int32](0), FencingToken: ptr.To[int64](8)},
				{Kind: kindLockedJob, Namespace: "ns", Name: "b", Slot: ptr.To[int32](1), FencingToken: ptr.To[int64](3)},
			},
			want: "It is Waiting. 2 of the lock's permits (how many it has is not known: its Lock could not be read) are in use, by:\n" +
				"  slot 0: a (fence 8)\n  slot 1: b (fence 3)\n",
		},
		"a plain lock reads as before semaphores": {
			permits: 1,
			holders: []Holder{{Kind: kindLockedJob, Namespace: "ns", Name: "a", FencingToken: ptr.To[int64](8)}},
			want:    "It is Waiting. The lock is held by a (fence 8).\n",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			e := base
			e.Permits = tc.permits
			e.setHolders(tc.holders)
			e.Holder = firstOf(tc.holders)
			var b strings.Builder
			e.writeWaiting(&b, t0)
			want := tc.want + "It is number 2 in line.\nNo waiter of this lock is ahead of it.\n"
			if diff := cmp.Diff(want, b.String()); diff != "" {
				t.Errorf("why (-want,+got):\n%s", diff)
			}
		})
	}
}
