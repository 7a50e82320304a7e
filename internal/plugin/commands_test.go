package plugin

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
)

func rfc3339(t time.Time) string { return t.UTC().Format(time.RFC3339) }

var _ = Describe("kubectl lockedjob on one contended lock", Ordered, func() {
	// One lock, "nightly": old ran and handed off to a, which holds it (fence 7) since 3m; b
	// (priority 5) is next, c second, d far back (a bucket). A second lock, "reports", only has a
	// LockedJob that failed.
	var (
		ns                  string
		now                 time.Time
		old, a, b, c, d, r1 *batchv1alpha1.LockedJob
		holderOfNightly     string
	)

	BeforeAll(func() {
		now = time.Now().Truncate(time.Second)
		ns = newNamespace()
		old = createLockedJob(ns, "old", "nightly")
		a = createLockedJob(ns, "a", "nightly")
		b = createLockedJob(ns, "b", "nightly", withPriority(5))
		c = createLockedJob(ns, "c", "nightly")
		d = createLockedJob(ns, "d", "nightly")
		r1 = createLockedJob(ns, "r1", "reports")
		holderOfNightly = holderName(a)

		setStatus(old, endedStatus(batchv1alpha1.PhaseSucceeded, batchv1alpha1.ReasonJobComplete,
			"Job old-6 completed; lock released", 6, now.Add(-11*time.Minute), now.Add(-10*time.Minute), now.Add(-3*time.Minute)))
		setStatus(a, runningStatus(7, now.Add(-8*time.Minute), now.Add(-3*time.Minute), "a-7"))
		setStatus(b, waitingStatus("nightly", 1, holderOfNightly, now.Add(-2*time.Minute)))
		setStatus(c, waitingStatus("nightly", 2, holderOfNightly, now.Add(-time.Minute)))
		setStatus(d, bucketStatus("nightly", 3, now.Add(-30*time.Second)))
		setStatus(r1, endedStatus(batchv1alpha1.PhaseFailed, batchv1alpha1.ReasonJobFailed,
			"Job r1-3 failed: BackoffLimitExceeded; lock released", 3, now.Add(-20*time.Minute), now.Add(-19*time.Minute), now.Add(-5*time.Minute)))

		job := &batchv1.Job{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "a-7"},
			Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				Containers:    []corev1.Container{{Name: "work", Image: "busybox"}},
			}}},
		}
		Expect(k8sClient.Create(ctx, job)).To(Succeed())
		job.Status.Active, job.Status.StartTime = 1, &metav1.Time{Time: now.Add(-3 * time.Minute)}
		Expect(k8sClient.Status().Update(ctx, job)).To(Succeed())

		recordEvent(a, now.Add(-3*time.Minute), corev1.EventTypeNormal, batchv1alpha1.ReasonJobCreated,
			"Acquired lock nightly with fencing token 7 after waiting 5m0s; created Job a-7")
		recordEvent(c, now.Add(-time.Minute), corev1.EventTypeNormal, batchv1alpha1.ReasonWaiting,
			fmt.Sprintf("Waiting for lock nightly held by %s (position 3 in queue)", holderOfNightly))
		recordEvent(c, now.Add(-20*time.Second), corev1.EventTypeNormal, batchv1alpha1.ReasonWaiting,
			fmt.Sprintf("Waiting for lock nightly held by %s (position 2 in queue)", holderOfNightly))
		recordEvent(r1, now.Add(-5*time.Minute), corev1.EventTypeWarning, batchv1alpha1.ReasonJobFailed,
			"Job r1-3 failed: BackoffLimitExceeded; released lock reports (fencing token 3)")
	})

	It("lists one row per lock: holder with fence, held for, waiting, head, last handoff", func() {
		res := runPlugin(now, "locks", "-n", ns)
		Expect(res.code).To(Equal(ExitOK), res.stderr)
		Expect(parseTable(res.stdout)).To(Equal([]map[string]string{
			{"LOCK": "nightly", "SCOPE": "Namespace", "NAMESPACE": ns, "IN USE": "1/1", "HOLDERS": "a (fence 7)", "HELD FOR": "3m",
				"WAITING": "3", "HEAD": "b", "LAST HANDOFF": "3m ago (old -> a)"},
			{"LOCK": "reports", "SCOPE": "Namespace", "NAMESPACE": ns, "IN USE": "0/1", "HOLDERS": "<none>", "HELD FOR": "<none>",
				"WAITING": "0", "HEAD": "<none>", "LAST HANDOFF": "<none>"},
		}))
	})

	It("gives the same data as JSON, with absolute times and no token", func() {
		got, stdout := locksJSON(now, ns)
		Expect(got.Items).To(HaveLen(2))
		nightly := got.Items[0]
		Expect(nightly.Lock).To(Equal("nightly"))
		Expect(nightly.Holder).To(Equal(&Holder{Kind: kindLockedJob, Namespace: ns, Name: "a", FencingToken: ptr.To[int64](7), AcquiredAt: at(now.Add(-3 * time.Minute))}))
		Expect(nightly.Holders).To(Equal([]Holder{*nightly.Holder}), "a plain lock: holder is its one holder")
		Expect([]int{nightly.InUse, nightly.Permits}).To(Equal([]int{1, 1}))
		Expect(nightly.Waiting).To(Equal(3))
		Expect(nightly.Head).To(Equal(&Ref{Kind: kindLockedJob, Namespace: ns, Name: "b"}))
		Expect(nightly.LastHandoff).To(Equal(&Handoff{From: Ref{Kind: kindLockedJob, Namespace: ns, Name: "old"}, To: Ref{Kind: kindLockedJob, Namespace: ns, Name: "a"},
			ReleasedAt: metav1.NewTime(now.Add(-3 * time.Minute)), AcquiredAt: metav1.NewTime(now.Add(-3 * time.Minute))}))
		Expect(stdout).NotTo(ContainSubstring("token\""), "only fencingToken, never a lock token")

		yamlRes := runPlugin(now, "locks", "-n", ns, "-o", "yaml")
		Expect(yamlRes.code).To(Equal(ExitOK), yamlRes.stderr)
		Expect(yamlRes.stdout).To(ContainSubstring("lock: nightly"))
	})

	It("explains a waiter at place 2: the holder and how long it has held, who is ahead, the last Events", func() {
		res := runPlugin(now, "why", "c", "-n", ns)
		Expect(res.code).To(Equal(ExitOK), res.stderr)
		Expect(res.stdout).To(Equal(fmt.Sprintf(`LockedJob %[1]s/c runs under lock nightly (scope Namespace, priority 0).
It is Waiting. The lock is held by a (fence 7), which has held it for 3m (since %[2]s).
It is number 2 in line.
1 ahead of it, in the order the queue serves them (higher priority first, then older):
  1. b, priority 5, waiting for 2m
Last Events:
  AGE   TYPE     REASON    MESSAGE
  60s   Normal   Waiting   Waiting for lock nightly held by %[3]s (position 3 in queue)
  20s   Normal   Waiting   Waiting for lock nightly held by %[3]s (position 2 in queue)
`, ns, rfc3339(now.Add(-3*time.Minute)), holderOfNightly)))
	})

	It("explains the head of the line", func() {
		res := runPlugin(now, "why", "b", "-n", ns, "--events", "0")
		Expect(res.code).To(Equal(ExitOK), res.stderr)
		Expect(res.stdout).To(ContainSubstring("It is number 1 in line (next).\nNo waiter of this lock is ahead of it.\n"))
	})

	It("explains a waiter far back, whose place status shows only as a bucket", func() {
		res := runPlugin(now, "why", "d", "-n", ns, "--events", "0")
		Expect(res.code).To(Equal(ExitOK), res.stderr)
		Expect(res.stdout).To(Equal(fmt.Sprintf(`LockedJob %[1]s/d runs under lock nightly (scope Namespace, priority 0).
It is Waiting. The lock is held by a (fence 7), which has held it for 3m (since %[2]s).
It is further back than number 3 in line (exact places are shown for the first 3 only).
2 ahead of it, in the order the queue serves them (higher priority first, then older):
  1. b, priority 5, waiting for 2m
  2. c, priority 0, waiting for 60s
No Events (the API server keeps them for an hour by default).
`, ns, rfc3339(now.Add(-3*time.Minute)))))

		var e Explanation
		res = runPlugin(now, "why", "d", "-n", ns, "-o", "json")
		Expect(res.code).To(Equal(ExitOK), res.stderr)
		Expect(json.Unmarshal([]byte(res.stdout), &e)).To(Succeed())
		Expect(e.Place).To(Equal(&Place{MoreThan: 3}))
		Expect(e.Ahead).To(HaveLen(2))
		Expect(e.Behind).To(BeZero())
	})

	It("explains the holder: its fence, how long, its Job, the waiters after it", func() {
		res := runPlugin(now, "why", "a", "-n", ns)
		Expect(res.code).To(Equal(ExitOK), res.stderr)
		Expect(res.stdout).To(Equal(fmt.Sprintf(`LockedJob %[1]s/a runs under lock nightly (scope Namespace, priority 0).
It is Running: it holds the lock with fencing token 7 and has held it for 3m (since %[2]s).
Its Job a-7 has 1 active, 0 succeeded and 0 failed pods.
3 waiting for the lock after it.
Last Events:
  AGE   TYPE     REASON       MESSAGE
  3m    Normal   JobCreated   Acquired lock nightly with fencing token 7 after waiting 5m0s; created Job a-7
`, ns, rfc3339(now.Add(-3*time.Minute)))))
	})

	It("explains how a failed LockedJob ended, from condition Finished", func() {
		res := runPlugin(now, "why", "r1", "-n", ns)
		Expect(res.code).To(Equal(ExitOK), res.stderr)
		Expect(res.stdout).To(Equal(fmt.Sprintf(`LockedJob %[1]s/r1 runs under lock reports (scope Namespace, priority 0).
It ended Failed 5m ago (%[2]s), reason JobFailed: Job r1-3 failed: BackoffLimitExceeded; lock released.
It ran with fencing token 3.
Last Events:
  AGE   TYPE      REASON      MESSAGE
  5m    Warning   JobFailed   Job r1-3 failed: BackoffLimitExceeded; released lock reports (fencing token 3)
`, ns, rfc3339(now.Add(-5*time.Minute)))))
	})

	It("says a LockedJob it cannot find is not found, on stderr, with a non-zero exit", func() {
		res := runPlugin(now, "why", "nope", "-n", ns)
		Expect(res.code).To(Equal(ExitError))
		Expect(res.stdout).To(BeEmpty())
		Expect(res.stderr).To(Equal(fmt.Sprintf("error: lockedjob \"nope\" not found in namespace %s\n", ns)))
	})

	It("refuses an unknown output format before reading anything", func() {
		res := runPlugin(now, "locks", "-n", ns, "-o", "wide")
		Expect(res.code).To(Equal(ExitError))
		Expect(res.stderr).To(ContainSubstring(`unknown output format "wide"`))
	})
})

var _ = Describe("kubectl lockedjob on a lost lock", func() {
	It("explains how the lock was lost", func() {
		now := time.Now().Truncate(time.Second)
		ns := newNamespace()
		lost := createLockedJob(ns, "lost", "shared-store")
		msg := "Lock shared-store lost while the Job ran (renew: lock lost); policy Suspend applied"
		setStatus(lost, endedStatus(batchv1alpha1.PhaseLockLost, batchv1alpha1.ReasonLockLost, msg, 12,
			now.Add(-time.Hour), now.Add(-50*time.Minute), now.Add(-2*time.Minute)))
		lost.Status.JobName = "lost-c"
		Expect(k8sClient.Status().Update(ctx, lost)).To(Succeed())

		res := runPlugin(now, "why", "lost", "-n", ns, "--events", "0")
		Expect(res.code).To(Equal(ExitOK), res.stderr)
		Expect(res.stdout).To(Equal(fmt.Sprintf(`LockedJob %s/lost runs under lock shared-store (scope Namespace, priority 0).
It ended LockLost 2m ago (%s), reason LockLost: %s.
It ran with fencing token 12.
Its Job lost-c is gone.
No Events (the API server keeps them for an hour by default).
`, ns, rfc3339(now.Add(-2*time.Minute)), msg)))

		res = runPlugin(now, "locks", "-n", ns)
		Expect(res.code).To(Equal(ExitOK), res.stderr)
		Expect(parseTable(res.stdout)).To(ConsistOf(HaveKeyWithValue("LAST HANDOFF", "<none>")))
	})
})

var _ = Describe("kubectl lockedjob on a Cluster-scoped lock", func() {
	It("shows the holder in another namespace, and an empty NAMESPACE column", func() {
		now := time.Now().Truncate(time.Second)
		ns1, ns2 := newNamespace(), newNamespace()
		holder := createLockedJob(ns2, "holder", "shared", withClusterScope)
		waiter := createLockedJob(ns1, "waiter", "shared", withClusterScope)
		setStatus(holder, runningStatus(11, now.Add(-time.Hour), now.Add(-90*time.Second), "holder-b"))
		setStatus(waiter, waitingStatus("shared", 1, holderName(holder), now.Add(-time.Minute)))

		res := runPlugin(now, "locks", "-n", ns1)
		Expect(res.code).To(Equal(ExitOK), res.stderr)
		Expect(parseTable(res.stdout)).To(Equal([]map[string]string{{
			"LOCK": "shared", "SCOPE": "Cluster", "NAMESPACE": "", "IN USE": "1/1", "HOLDERS": ns2 + "/holder (fence 11)",
			"HELD FOR": "90s", "WAITING": "1", "HEAD": ns1 + "/waiter", "LAST HANDOFF": "<none>",
		}}))

		res = runPlugin(now, "why", "waiter", "-n", ns1, "--events", "0")
		Expect(res.code).To(Equal(ExitOK), res.stderr)
		Expect(res.stdout).To(ContainSubstring(fmt.Sprintf("The lock is held by %s/holder (fence 11), which has held it for 90s", ns2)))
	})
})

var _ = Describe("kubectl lockedjob on a declared Lock", func() {
	It("takes holder, fence, waiting and head from the Lock's status, which the operator reads from Redis", func() {
		now := time.Now().Truncate(time.Second)
		ns := newNamespace()
		waiter := createLockedJob(ns, "waiter", "declared")
		remote := "other-cluster/" + ns + "/remote/abcd1234"
		setStatus(waiter, waitingStatus("declared", 2, remote, now.Add(-time.Minute)))

		lock := &batchv1alpha1.Lock{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "declared"}}
		Expect(k8sClient.Create(ctx, lock)).To(Succeed())
		res := runPlugin(now, "locks", "-n", ns, "-o", "json")
		Expect(res.code).To(Equal(ExitOK), res.stderr)
		Expect(res.stdout).To(ContainSubstring(`"source": "LockedJobs"`), "a Lock the operator has not read yet changes nothing")

		lock.Status = batchv1alpha1.LockViewStatus{
			Holders: []batchv1alpha1.LockHolder{{Holder: remote, FencingToken: 99}},
			InUse:   1, Permits: 1, Waiting: ptr.To[int32](2), Head: "other-cluster/" + ns + "/first/ffff0000",
			LastFencingToken: 99, ObservedAt: at(now),
		}
		Expect(k8sClient.Status().Update(ctx, lock)).To(Succeed())

		res = runPlugin(now, "locks", "-n", ns)
		Expect(res.code).To(Equal(ExitOK), res.stderr)
		Expect(parseTable(res.stdout)).To(Equal([]map[string]string{{
			"LOCK": "declared", "SCOPE": "Namespace", "NAMESPACE": ns, "IN USE": "1/1", "HOLDERS": remote, "HELD FOR": "<none>",
			"WAITING": "2", "HEAD": "other-cluster/" + ns + "/first/ffff0000", "LAST HANDOFF": "<none>",
		}}))
		res = runPlugin(now, "locks", "-n", ns, "-o", "json")
		Expect(res.stdout).To(ContainSubstring(`"source": "Lock"`))
	})
})

var _ = Describe("kubectl lockedjob on a semaphore", Ordered, func() {
	// Lock "pool" declares 2 permits: a holds slot 0 (fence 12) since 5m, b slot 1 (fence 9) since
	// 60s, w waits first in line. Lock "redlocked" declares 3 permits on an operator whose Redis is
	// Redlock: x waits with reason PermitsUnsupported, in no queue.
	var (
		ns      string
		now     time.Time
		a, b, w *batchv1alpha1.LockedJob
		pool    *batchv1alpha1.Lock
		inSlot  = func(st batchv1alpha1.LockedJobStatus, slot int32) batchv1alpha1.LockedJobStatus {
			st.Slot = ptr.To(slot)
			return st
		}
		redlockMsg = "Lock redlocked declares 3 permits, and the operator's Redis is Redlock, which admits one holder per lock: waiting until the Lock declares 1"
	)

	BeforeAll(func() {
		now = time.Now().Truncate(time.Second)
		ns = newNamespace()
		pool = &batchv1alpha1.Lock{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pool"}, Spec: batchv1alpha1.LockViewSpec{Permits: 2}}
		Expect(k8sClient.Create(ctx, pool)).To(Succeed())
		a = createLockedJob(ns, "a", "pool")
		b = createLockedJob(ns, "b", "pool")
		w = createLockedJob(ns, "w", "pool")
		setStatus(a, inSlot(runningStatus(12, now.Add(-6*time.Minute), now.Add(-5*time.Minute), "a-12"), 0))
		setStatus(b, inSlot(runningStatus(9, now.Add(-2*time.Minute), now.Add(-time.Minute), "b-9"), 1))
		setStatus(w, waitingStatus("pool", 1, holderName(a), now.Add(-30*time.Second)))

		Expect(k8sClient.Create(ctx, &batchv1alpha1.Lock{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "redlocked"},
			Spec: batchv1alpha1.LockViewSpec{Permits: 3}})).To(Succeed())
		x := createLockedJob(ns, "x", "redlocked")
		setStatus(x, batchv1alpha1.LockedJobStatus{
			Phase: batchv1alpha1.PhaseWaiting, WaitingSince: at(now.Add(-time.Minute)), Message: redlockMsg,
			Conditions: []metav1.Condition{
				cond(batchv1alpha1.ConditionLockAcquired, metav1.ConditionFalse, batchv1alpha1.ReasonPermitsUnsupported, redlockMsg, now.Add(-time.Minute)),
				cond(batchv1alpha1.ConditionFinished, metav1.ConditionFalse, batchv1alpha1.ReasonInProgress, "The LockedJob has not reached its end", now.Add(-time.Minute)),
			},
		})
	})

	It("lists permits in use of the Lock's spec.permits and every holder with its slot and fence", func() {
		res := runPlugin(now, "locks", "-n", ns)
		Expect(res.code).To(Equal(ExitOK), res.stderr)
		Expect(parseTable(res.stdout)).To(Equal([]map[string]string{
			{"LOCK": "pool", "SCOPE": "Namespace", "NAMESPACE": ns, "IN USE": "2/2", "HOLDERS": "a (slot 0, fence 12), b (slot 1, fence 9)",
				"HELD FOR": "5m, 60s", "WAITING": "1", "HEAD": "w", "LAST HANDOFF": "<none>"},
			{"LOCK": "redlocked", "SCOPE": "Namespace", "NAMESPACE": ns, "IN USE": "0/3", "HOLDERS": "<none>",
				"HELD FOR": "<none>", "WAITING": "1", "HEAD": "<none>", "LAST HANDOFF": "<none>"},
		}))
	})

	It("explains a waiter: how many of how many permits are in use, and who holds them", func() {
		res := runPlugin(now, "why", "w", "-n", ns, "--events", "0")
		Expect(res.code).To(Equal(ExitOK), res.stderr)
		Expect(res.stdout).To(Equal(fmt.Sprintf(`LockedJob %[1]s/w runs under lock pool (scope Namespace, priority 0).
It is Waiting. 2 of the lock's 2 permits are in use, by:
  slot 0: a (fence 12), holding for 5m (since %[2]s)
  slot 1: b (fence 9), holding for 60s (since %[3]s)
It is number 1 in line (next).
No waiter of this lock is ahead of it.
No Events (the API server keeps them for an hour by default).
`, ns, rfc3339(now.Add(-5*time.Minute)), rfc3339(now.Add(-time.Minute)))))

		var e Explanation
		res = runPlugin(now, "why", "w", "-n", ns, "-o", "json")
		Expect(res.code).To(Equal(ExitOK), res.stderr)
		Expect(json.Unmarshal([]byte(res.stdout), &e)).To(Succeed())
		Expect([]int{e.InUse, e.Permits}).To(Equal([]int{2, 2}))
		Expect(e.Holders).To(HaveLen(2))
		Expect(e.Holders[1]).To(Equal(Holder{Kind: kindLockedJob, Namespace: ns, Name: "b", Slot: ptr.To[int32](1), FencingToken: ptr.To[int64](9), AcquiredAt: at(now.Add(-time.Minute))}))
	})

	It("explains a holder: its slot and fence, and how many permits are in use", func() {
		res := runPlugin(now, "why", "b", "-n", ns, "--events", "0")
		Expect(res.code).To(Equal(ExitOK), res.stderr)
		Expect(res.stdout).To(Equal(fmt.Sprintf(`LockedJob %[1]s/b runs under lock pool (scope Namespace, priority 0).
It is Running: it holds the lock in slot 1 with fencing token 9 and has held it for 60s (since %[2]s).
2 of the lock's 2 permits are in use.
Its Job b-9 is gone.
1 waiting for the lock after it.
No Events (the API server keeps them for an hour by default).
`, ns, rfc3339(now.Add(-time.Minute)))))
	})

	It("says in plain words why a LockedJob waits on Redlock for a Lock of 3 permits", func() {
		res := runPlugin(now, "why", "x", "-n", ns, "--events", "0")
		Expect(res.code).To(Equal(ExitOK), res.stderr)
		Expect(res.stdout).To(Equal(fmt.Sprintf(`LockedJob %s/x runs under lock redlocked (scope Namespace, priority 0).
It is Waiting, and cannot acquire the lock as things stand: the Lock redlocked declares 3 permits (a semaphore), and the operator's Redis is Redlock, which admits one holder per lock.
It is not in the lock's queue. It waits until the Lock declares 1 permit (spec.permits), or the operator uses a Redis that is not Redlock (a single server, Sentinel or Redis Cluster).
No Events (the API server keeps them for an hour by default).
`, ns)))
	})

	It("takes the holders from the Lock's status once the operator read it from Redis after the last change", func() {
		pool.Status = batchv1alpha1.LockViewStatus{
			Holders: []batchv1alpha1.LockHolder{
				{Holder: holderName(b), LockedJob: "b", Slot: 1, FencingToken: 9},
				{Holder: holderName(a), LockedJob: "a", Slot: 0, FencingToken: 12},
			},
			InUse: 2, Permits: 2, Waiting: ptr.To[int32](3), Head: holderName(w), LastFencingToken: 12, ObservedAt: at(now),
		}
		Expect(k8sClient.Status().Update(ctx, pool)).To(Succeed())

		got, _ := locksJSON(now, ns)
		Expect(got.Items).To(HaveLen(2))
		view := got.Items[0]
		Expect(view.Source).To(Equal("Lock"))
		Expect(view.Waiting).To(Equal(3), "two more waiters in another cluster, as Redis counts them")
		Expect(view.Holders).To(Equal([]Holder{
			{Kind: kindLockedJob, Namespace: ns, Name: "a", Slot: ptr.To[int32](0), FencingToken: ptr.To[int64](12), AcquiredAt: at(now.Add(-5 * time.Minute))},
			{Kind: kindLockedJob, Namespace: ns, Name: "b", Slot: ptr.To[int32](1), FencingToken: ptr.To[int64](9), AcquiredAt: at(now.Add(-time.Minute))},
		}))
		Expect(view.Holder).To(Equal(&view.Holders[0]))
	})
})

var _ = Describe("kubectl lockedjob for a user who may read one namespace only", func() {
	It("warns that a Cluster-scoped lock shows only that namespace, and names the holder as Redis does", func() {
		now := time.Now().Truncate(time.Second)
		ns1, ns2 := newNamespace(), newNamespace()
		holder := createLockedJob(ns2, "holder", "shared-ro", withClusterScope)
		waiter := createLockedJob(ns1, "waiter", "shared-ro", withClusterScope)
		setStatus(holder, runningStatus(21, now.Add(-time.Hour), now.Add(-time.Minute), "holder-l"))
		setStatus(waiter, waitingStatus("shared-ro", 1, holderName(holder), now.Add(-time.Minute)))

		role := &rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns1, Name: "lockedjob-viewer"},
			Rules: []rbacv1.PolicyRule{
				{APIGroups: []string{batchv1alpha1.GroupVersion.Group}, Resources: []string{"lockedjobs"}, Verbs: []string{"get", "list", "watch"}},
				{APIGroups: []string{"events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"list"}},
				{APIGroups: []string{"batch"}, Resources: []string{"jobs"}, Verbs: []string{"get", "list"}},
			},
		}
		Expect(k8sClient.Create(ctx, role)).To(Succeed())
		binding := &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns1, Name: "lockedjob-viewer"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "viewer-" + ns1}},
		}
		Expect(k8sClient.Create(ctx, binding)).To(Succeed())
		viewer, err := testEnv.AddUser(envtest.User{Name: "viewer-" + ns1}, nil)
		Expect(err).NotTo(HaveOccurred())
		viewerKubeconfig := writeKubeconfig(viewer)

		var res result
		// RBAC takes effect once the API server's informers saw the binding.
		Eventually(func(g Gomega) {
			res = runPluginAs(viewerKubeconfig, now, "locks", "-n", ns1)
			g.Expect(res.code).To(Equal(ExitOK), res.stderr)
		}).Should(Succeed())
		warnings := strings.Split(strings.TrimSuffix(res.stderr, "\n"), "\n")
		Expect(warnings).To(HaveLen(4))
		Expect(warnings[0]).To(HavePrefix(fmt.Sprintf("Warning: cannot list LockedJobs in all namespaces, so Cluster-scoped locks show only namespace %s: ", ns1)))
		Expect(warnings[1]).To(HavePrefix(fmt.Sprintf("Warning: cannot list Jobs in all namespaces, so Cluster-scoped locks show only the guarded Jobs of namespace %s: ", ns1)))
		Expect(warnings[2]).To(HavePrefix("Warning: cannot read Locks, so locks show what their LockedJobs say: "))
		Expect(warnings[3]).To(HavePrefix("Warning: cannot read ClusterLocks, so locks show what their LockedJobs say: "))
		Expect(parseTable(res.stdout)).To(Equal([]map[string]string{{
			"LOCK": "shared-ro", "SCOPE": "Cluster", "NAMESPACE": "", "IN USE": "1/1", "HOLDERS": holderName(holder),
			"HELD FOR": "<none>", "WAITING": "1", "HEAD": ns1 + "/waiter", "LAST HANDOFF": "<none>",
		}}))

		res = runPluginAs(viewerKubeconfig, now, "why", "waiter", "-n", ns1)
		Expect(res.code).To(Equal(ExitOK), res.stderr)
		Expect(res.stdout).To(ContainSubstring(fmt.Sprintf("It is Waiting. The lock is held by %s (no LockedJob you can read).\n", holderName(holder))))

		res = runPluginAs(viewerKubeconfig, now, "locks", "-A")
		Expect(res.code).To(Equal(ExitError))
		Expect(res.stderr).To(ContainSubstring("forbidden"))
	})
})

var _ = Describe("kubectl lockedjob why and Events", func() {
	It("shows only the Events about this LockedJob: not its Job's, not a predecessor's of the same name", func() {
		now := time.Now().Truncate(time.Second)
		ns := newNamespace()
		first := createLockedJob(ns, "same", "l")
		recordEvent(first, now.Add(-10*time.Minute), corev1.EventTypeNormal, batchv1alpha1.ReasonJobCreated, "the first LockedJob named same")
		Expect(k8sClient.Delete(ctx, first)).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKeyFromObject(first), &batchv1alpha1.LockedJob{}))
		}).Should(BeTrue())

		second := createLockedJob(ns, "same", "l")
		setStatus(second, waitingStatus("l", 1, "envtest/x/y/z", now.Add(-time.Minute)))
		recordEvent(second, now.Add(-time.Minute), corev1.EventTypeNormal, batchv1alpha1.ReasonWaiting, "about the second")
		ev := &eventsv1.Event{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "same-job-"},
			EventTime:  metav1.NewMicroTime(now),
			Regarding:  corev1.ObjectReference{APIVersion: "batch/v1", Kind: "Job", Namespace: ns, Name: "same", UID: "job-uid"},
			Type:       corev1.EventTypeNormal, Reason: "SuccessfulCreate", Action: "Create", Note: "a Job named same",
			ReportingController: "job-controller", ReportingInstance: "job-controller-envtest",
		}
		Expect(k8sClient.Create(ctx, ev)).To(Succeed())

		res := runPlugin(now, "why", "same", "-n", ns, "-o", "json")
		Expect(res.code).To(Equal(ExitOK), res.stderr)
		var e Explanation
		Expect(json.Unmarshal([]byte(res.stdout), &e)).To(Succeed())
		Expect(e.Events).To(Equal([]EventView{{At: metav1.NewTime(now.Add(-time.Minute)), Type: "Normal", Reason: "Waiting", Note: "about the second"}}))
	})
})

var _ = Describe("kubectl lockedjob wait", func() {
	var (
		ns  string
		now time.Time
	)
	BeforeEach(func() {
		ns, now = newNamespace(), time.Now().Truncate(time.Second)
	})

	// waitInBackground starts `wait` and returns the channel its result arrives on.
	waitInBackground := func(args ...string) <-chan result {
		done := make(chan result, 1)
		go func() {
			defer GinkgoRecover()
			done <- runPlugin(now, append([]string{"wait", "-n", ns}, args...)...)
		}()
		return done
	}

	endWhileWaiting := func(lj *batchv1alpha1.LockedJob, phase batchv1alpha1.LockedJobPhase, reason, msg string) <-chan result {
		setStatus(lj, runningStatus(4, now.Add(-time.Minute), now.Add(-30*time.Second), lj.Name+"-4"))
		done := waitInBackground(lj.Name, "--timeout=1m")
		// It watches: nothing comes back while the LockedJob runs.
		Consistently(done).WithTimeout(500 * time.Millisecond).ShouldNot(Receive())
		setStatus(lj, endedStatus(phase, reason, msg, 4, now.Add(-time.Minute), now.Add(-30*time.Second), now))
		return done
	}

	It("exits 0 when the LockedJob it watches succeeds", func() {
		lj := createLockedJob(ns, "ok", "l")
		done := endWhileWaiting(lj, batchv1alpha1.PhaseSucceeded, batchv1alpha1.ReasonJobComplete, "Job ok-4 completed; lock released")
		var res result
		Eventually(done).Should(Receive(&res))
		Expect(res).To(Equal(result{code: ExitOK, stdout: "lockedjob/ok Succeeded (JobComplete): Job ok-4 completed; lock released\n"}))
	})

	It("exits 1 when the LockedJob it watches fails", func() {
		lj := createLockedJob(ns, "bad", "l")
		done := endWhileWaiting(lj, batchv1alpha1.PhaseFailed, batchv1alpha1.ReasonJobFailed, "Job bad-4 failed: BackoffLimitExceeded; lock released")
		var res result
		Eventually(done).Should(Receive(&res))
		Expect(res).To(Equal(result{code: ExitError, stdout: "lockedjob/bad Failed (JobFailed): Job bad-4 failed: BackoffLimitExceeded; lock released\n"}))
	})

	It("exits 1 when the LockedJob it watches loses its lock", func() {
		lj := createLockedJob(ns, "lost", "l")
		done := endWhileWaiting(lj, batchv1alpha1.PhaseLockLost, batchv1alpha1.ReasonLockLost, "Lock l lost while the Job ran; policy Suspend applied")
		var res result
		Eventually(done).Should(Receive(&res))
		Expect(res.code).To(Equal(ExitError))
		Expect(res.stdout).To(Equal("lockedjob/lost LockLost (LockLost): Lock l lost while the Job ran; policy Suspend applied\n"))
	})

	It("answers at once for a LockedJob that already finished", func() {
		lj := createLockedJob(ns, "done", "l")
		setStatus(lj, endedStatus(batchv1alpha1.PhaseSucceeded, batchv1alpha1.ReasonJobComplete, "Job done-1 completed; lock released", 1, now, now, now))
		res := runPlugin(now, "wait", "done", "-n", ns, "--timeout=0")
		Expect(res).To(Equal(result{code: ExitOK, stdout: "lockedjob/done Succeeded (JobComplete): Job done-1 completed; lock released\n"}))
	})

	It("exits 2 with one line on stderr when the timeout passes first", func() {
		lj := createLockedJob(ns, "slow", "l")
		setStatus(lj, waitingStatus("l", 2, "envtest/x/y/z", now))
		start := time.Now()
		res := runPlugin(now, "wait", "slow", "-n", ns, "--timeout=1s")
		Expect(time.Since(start)).To(BeNumerically(">=", time.Second))
		Expect(res.code).To(Equal(ExitTimeout))
		Expect(res.stdout).To(BeEmpty())
		Expect(res.stderr).To(Equal("error: timed out after 1s waiting for lockedjob/slow to finish (phase Waiting: Waiting for lock l held by envtest/x/y/z (position 2 in queue))\n"))

		res = runPlugin(now, "wait", "slow", "-n", ns, "--timeout=0")
		Expect(res.code).To(Equal(ExitTimeout))
	})

	It("exits 3 when the LockedJob does not exist, is deleted while it waits, or the call is wrong", func() {
		res := runPlugin(now, "wait", "ghost", "-n", ns)
		Expect(res.code).To(Equal(ExitWaitError))
		Expect(res.stderr).To(Equal(fmt.Sprintf("error: lockedjob \"ghost\" not found in namespace %s\n", ns)))

		lj := createLockedJob(ns, "doomed", "l")
		done := waitInBackground("doomed")
		Consistently(done).WithTimeout(300 * time.Millisecond).ShouldNot(Receive())
		Expect(k8sClient.Delete(ctx, lj)).To(Succeed())
		Eventually(done).Should(Receive(&res))
		Expect(res.code).To(Equal(ExitWaitError))
		Expect(res.stderr).To(Equal("error: lockedjob doomed was deleted before it finished\n"))

		Expect(runPlugin(now, "wait", "-n", ns).code).To(Equal(ExitWaitError))
		Expect(runPlugin(now, "wait", "x", "-n", ns, "--timeout=soon").code).To(Equal(ExitWaitError))
	})
})

var _ = Describe("kubectl lockedjob run", func() {
	var (
		ns  string
		now time.Time
	)
	BeforeEach(func() {
		ns, now = newNamespace(), time.Now().Truncate(time.Second)
	})

	It("creates a LockedJob like kubectl create job creates a Job", func() {
		res := runPlugin(now, "run", "migrate", "-n", ns, "--lock", "nightly", "--image", "busybox:1.36",
			"--ttl", "45s", "--priority", "7", "--acquire-timeout", "10m", "--on-lock-lost", "Delete",
			"--", "sh", "-c", "echo $LOCKEDJOB_FENCING_TOKEN")
		Expect(res).To(Equal(result{code: ExitOK, stdout: "lockedjob.batch.lockedjob.dev/migrate created\n"}))

		var lj batchv1alpha1.LockedJob
		Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "migrate"}, &lj)).To(Succeed())
		Expect(lj.Spec.Lock).To(Equal(batchv1alpha1.LockSpec{
			Name: "nightly", Scope: batchv1alpha1.LockScopeNamespace, TTL: &metav1.Duration{Duration: 45 * time.Second},
			AcquireTimeout: &metav1.Duration{Duration: 10 * time.Minute}, Priority: 7, OnLockLost: batchv1alpha1.LockLostDelete,
		}))
		pod := lj.Spec.JobTemplate.Spec.Template.Spec
		Expect(pod.RestartPolicy).To(Equal(corev1.RestartPolicyNever))
		Expect(pod.Containers).To(HaveLen(1))
		Expect(pod.Containers[0].Name).To(Equal("migrate"))
		Expect(pod.Containers[0].Image).To(Equal("busybox:1.36"))
		Expect(pod.Containers[0].Command).To(Equal([]string{"sh", "-c", "echo $LOCKEDJOB_FENCING_TOKEN"}))
	})

	It("prints the object and creates nothing with --dry-run=client or server", func() {
		res := runPlugin(now, "run", "preview", "-n", ns, "--lock", "l", "--image", "busybox", "--scope", "Cluster",
			"--dry-run=client", "-o", "yaml", "--", "date")
		Expect(res.code).To(Equal(ExitOK), res.stderr)
		Expect(res.stdout).To(Equal(fmt.Sprintf(`apiVersion: batch.lockedjob.dev/v1alpha1
kind: LockedJob
metadata:
  name: preview
  namespace: %s
spec:
  jobTemplate:
    metadata: {}
    spec:
      template:
        metadata: {}
        spec:
          containers:
          - command:
            - date
            image: busybox
            name: preview
            resources: {}
          restartPolicy: Never
  lock:
    name: l
    scope: Cluster
`, ns)))

		res = runPlugin(now, "run", "preview", "-n", ns, "--lock", "l", "--image", "busybox", "--dry-run=server")
		Expect(res).To(Equal(result{code: ExitOK, stdout: "lockedjob.batch.lockedjob.dev/preview created (server dry run)\n"}))

		err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "preview"}, &batchv1alpha1.LockedJob{})
		Expect(apierrors.IsNotFound(err)).To(BeTrue(), "a dry run stores nothing")
	})

	It("says what is wrong, on stderr with exit 1, for bad input and for what the API server refuses", func() {
		for _, tc := range []struct {
			args []string
			want string
		}{
			{[]string{"run", "x", "--image", "busybox"}, "error: --lock is required\n"},
			{[]string{"run", "x", "--lock", "l"}, "error: --image is required\n"},
			{[]string{"run", "x", "--lock", "l", "--image", "i", "--scope", "Everywhere"}, "error: --scope must be Namespace or Cluster, not \"Everywhere\"\n"},
			{[]string{"run", "x", "y", "--lock", "l", "--image", "i"}, "error: run takes one NAME before --, got 2 ([x y]); put the command after --\n"},
		} {
			res := runPlugin(now, append(tc.args, "-n", ns)...)
			Expect(res.code).To(Equal(ExitError), "%v", tc.args)
			Expect(res.stderr).To(Equal(tc.want), "%v", tc.args)
		}

		res := runPlugin(now, "run", "x", "-n", ns, "--lock", "l", "--image", "i", "--priority", "5000")
		Expect(res.code).To(Equal(ExitError))
		Expect(res.stderr).To(ContainSubstring("spec.lock.priority"))
	})
})

// locksJSON runs `locks -n ns -o json` at now and decodes what it printed, which it returns too.
func locksJSON(now time.Time, ns string) (got struct{ Items []LockView }, stdout string) {
	GinkgoHelper()
	res := runPlugin(now, "locks", "-n", ns, "-o", "json")
	Expect(res.code).To(Equal(ExitOK), res.stderr)
	Expect(json.Unmarshal([]byte(res.stdout), &got)).To(Succeed())
	return got, res.stdout
}

var _ = Describe("kubectl lockedjob why, after a release at the pod's outcome", func() {
	It("says the LockedJob released its lock while its phase waits for the Job's condition", func() {
		now := time.Now().Truncate(time.Second)
		ns := newNamespace()
		lj := createLockedJob(ns, "done", "outcome")
		st := runningStatus(4, now.Add(-time.Minute), now.Add(-30*time.Second), "done-4")
		st.ReleasedAt = at(now.Add(-2 * time.Second))
		st.Conditions[0] = cond(batchv1alpha1.ConditionLockAcquired, metav1.ConditionFalse, batchv1alpha1.ReasonReleased, "Lock released", now.Add(-2*time.Second))
		setStatus(lj, st)

		res := runPlugin(now, "why", "done", "-n", ns, "--events", "0")
		Expect(res.code).To(Equal(ExitOK), res.stderr)
		Expect(res.stdout).To(ContainSubstring(fmt.Sprintf(
			"It is Running: its pod succeeded and it released the lock 2s ago (%s); its phase follows when its Job finishes.\n", rfc3339(now.Add(-2*time.Second)))))
		Expect(res.stderr).To(BeEmpty(), "no warning that status and Redis disagree")
	})
})
