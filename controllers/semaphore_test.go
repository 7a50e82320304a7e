package controllers

import (
	"strconv"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/internal/locks"
	"github.com/lockedjob/lockedjob/internal/testutil/redisserver"
)

var _ = Describe("Semaphores", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	declare := func(name string, permits int32) *batchv1alpha1.Lock {
		GinkgoHelper()
		l := &batchv1alpha1.Lock{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: batchv1alpha1.LockViewSpec{Permits: permits}}
		Expect(k8sClient.Create(ctx, l)).To(Succeed())
		return l
	}
	setPermits := func(l *batchv1alpha1.Lock, permits int32) {
		GinkgoHelper()
		Eventually(func() error {
			if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(l), l); err != nil {
				return err
			}
			l.Spec.Permits = permits
			return k8sClient.Update(ctx, l)
		}).Should(Succeed())
	}
	// slotOf checks what a holder's Job carries and returns its slot.
	slotOf := func(lj *batchv1alpha1.LockedJob) int32 {
		GinkgoHelper()
		Expect(lj.Status.Slot).NotTo(BeNil(), "a semaphore's holder records its slot")
		job := jobOf(lj)
		env := map[string]string{}
		for _, e := range job.Spec.Template.Spec.Containers[0].Env {
			env[e.Name] = e.Value
		}
		Expect(env).To(HaveKeyWithValue(batchv1alpha1.EnvSlot, strconv.Itoa(int(*lj.Status.Slot))))
		Expect(env).To(HaveKeyWithValue(batchv1alpha1.EnvFencingToken, strconv.FormatInt(*lj.Status.FencingToken, 10)))
		Expect(job.Spec.Template.Annotations).To(HaveKeyWithValue(batchv1alpha1.AnnotationSlot, strconv.Itoa(int(*lj.Status.Slot))))
		return *lj.Status.Slot
	}

	It("admits spec.permits holders in distinct slots, hands a freed slot on, and follows permits changed at run time", func() {
		l := declare("pool", 2)
		a := waitPhase(create(newLockedJob(ns, "a", "pool")), batchv1alpha1.PhaseRunning)
		b := waitPhase(create(newLockedJob(ns, "b", "pool")), batchv1alpha1.PhaseRunning)
		Expect([]int32{slotOf(a), slotOf(b)}).To(ConsistOf(int32(0), int32(1)))
		c := waitPhase(create(newLockedJob(ns, "c", "pool")), batchv1alpha1.PhaseWaiting)
		Expect(c.Status.QueuePosition).To(Equal(ptrTo(int32(1))))

		By("showing both holders, by slot, in the view")
		Eventually(func(g Gomega) {
			var seen batchv1alpha1.Lock
			g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(l), &seen)).To(Succeed())
			g.Expect(seen.Status.Permits).To(Equal(int32(2)))
			g.Expect(seen.Status.InUse).To(Equal(int32(2)))
			g.Expect(seen.Status.Holders).To(ConsistOf(
				And(HaveField("LockedJob", "a"), HaveField("Slot", *a.Status.Slot), HaveField("FencingToken", *a.Status.FencingToken)),
				And(HaveField("LockedJob", "b"), HaveField("Slot", *b.Status.Slot), HaveField("FencingToken", *b.Status.FencingToken))))
			g.Expect(meta.IsStatusConditionTrue(seen.Status.Conditions, batchv1alpha1.ConditionPermitsSupported)).To(BeTrue())
		}).Should(Succeed())

		By("handing the freed slot to the waiter, with a fence above the slot's last")
		finishJob(a, true)
		c = waitPhase(c, batchv1alpha1.PhaseRunning)
		Expect(slotOf(c)).To(Equal(*a.Status.Slot))
		Expect(*c.Status.FencingToken).To(BeNumerically(">", *a.Status.FencingToken))

		By("letting a waiter in at once when permits are raised (its own re-check is 30s away)")
		d := waitPhase(create(newLockedJob(ns, "d", "pool")), batchv1alpha1.PhaseWaiting)
		setPermits(l, 3)
		d = waitPhase(d, batchv1alpha1.PhaseRunning)
		Expect(slotOf(d)).To(Equal(int32(2)))

		By("keeping the holders above a lowered number, and admitting nobody until fewer hold it")
		setPermits(l, 1)
		e := waitPhase(create(newLockedJob(ns, "e", "pool")), batchv1alpha1.PhaseWaiting)
		finishJob(b, true)
		waitPhase(b, batchv1alpha1.PhaseSucceeded)
		finishJob(d, true)
		waitPhase(d, batchv1alpha1.PhaseSucceeded)
		Consistently(func() batchv1alpha1.LockedJobPhase { return fetch(e).Status.Phase }).
			WithTimeout(time.Second).WithPolling(100 * time.Millisecond).Should(Equal(batchv1alpha1.PhaseWaiting))
		finishJob(c, true)
		e = waitPhase(e, batchv1alpha1.PhaseRunning)
		permitsKey := e.Status.LockKey + ":permits"
		Expect(e.Status.Slot).To(BeNil(), "with the upper slots drained, a Lock of one permit is the plain lock")
		Expect(rdb.Exists(ctx, permitsKey).Val()).To(BeZero())

		By("making the lock plain again when its Lock is deleted")
		setPermits(l, 2)
		Eventually(func() (string, error) { return rdb.Get(ctx, permitsKey).Result() }).Should(Equal("2"))
		Expect(k8sClient.Delete(ctx, l)).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKeyFromObject(l), &batchv1alpha1.Lock{}))
		}).Should(BeTrue())
		Expect(rdb.Exists(ctx, permitsKey).Val()).To(BeZero(), "with slot 0 alone held, one permit is the plain lock: no permits are kept")
		finishJob(e, true)
		waitPhase(e, batchv1alpha1.PhaseSucceeded)
		Expect(rdb.Exists(ctx, e.Status.LockKey).Val()).To(BeZero(), "the last holder released its slot")
	})

	It("records the lock's key for a holder of any slot, which names the lock again (#23)", func() {
		l := declare("keys", 2)
		a := waitPhase(create(newLockedJob(ns, "a", "keys")), batchv1alpha1.PhaseRunning)
		b := waitPhase(create(newLockedJob(ns, "b", "keys")), batchv1alpha1.PhaseRunning)
		Expect([]int32{slotOf(a), slotOf(b)}).To(ConsistOf(int32(0), int32(1)))
		key := testIdentity.LockKey(locks.ClaimantOf(a))
		for _, holder := range []*batchv1alpha1.LockedJob{a, b} {
			Expect(holder.Status.LockKey).To(Equal(op.book.RedisKey(key)), "slot %d", *holder.Status.Slot)
			name, ok := op.book.LibraryKey(holder.Status.LockKey)
			Expect(ok).To(BeTrue(), "slot %d: %s names no lock", *holder.Status.Slot, holder.Status.LockKey)
			Expect(name).To(Equal(key))
		}
		Eventually(func(g Gomega) {
			var seen batchv1alpha1.Lock
			g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(l), &seen)).To(Succeed())
			g.Expect(seen.Status.LockKey).To(Equal(b.Status.LockKey), "the view and its holders name one key")
		}).Should(Succeed())
	})

	It("keeps a deleted Lock until no holder is left above slot 0, then leaves the lock plain", func() {
		l := declare("draining", 2)
		a := waitPhase(create(newLockedJob(ns, "a", "draining")), batchv1alpha1.PhaseRunning)
		b := waitPhase(create(newLockedJob(ns, "b", "draining")), batchv1alpha1.PhaseRunning)
		lower, upper := a, b
		if slotOf(a) == 1 {
			lower, upper = b, a
		}
		permitsKey := a.Status.LockKey + ":permits"
		Eventually(func() (string, error) { return rdb.Get(ctx, permitsKey).Result() }).Should(Equal("2"))

		Expect(k8sClient.Delete(ctx, l)).To(Succeed())
		Eventually(func() (string, error) { return rdb.Get(ctx, permitsKey).Result() }).Should(Equal("1"))
		c := waitPhase(create(newLockedJob(ns, "c", "draining")), batchv1alpha1.PhaseWaiting)

		By("admitting nobody to the freed slot 0 while slot 1 is held: the deleted Lock's lock has one permit")
		finishJob(lower, true)
		waitPhase(lower, batchv1alpha1.PhaseSucceeded)
		Consistently(func(g Gomega) {
			g.Expect(fetch(c).Status.Phase).To(Equal(batchv1alpha1.PhaseWaiting))
			g.Expect(rdb.Get(ctx, permitsKey).Val()).To(Equal("1"))
			g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(l), &batchv1alpha1.Lock{})).To(Succeed(), "the Lock stays while slot 1 is held")
		}).WithTimeout(time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())

		By("letting the Lock go and the lock be plain once slot 1 drained")
		finishJob(upper, true)
		waitPhase(c, batchv1alpha1.PhaseRunning)
		Eventually(func() bool {
			return apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKeyFromObject(l), &batchv1alpha1.Lock{}))
		}).Should(BeTrue())
		Expect(rdb.Exists(ctx, permitsKey).Val()).To(BeZero(), "plain again once slot 1 drained")
	})

	// Only the view writes a lock's permits, and only while its object holds the finalizer; a number
	// Redis keeps for a lock that nothing declares would admit its LockedJobs side by side for good.
	It("sets the lock of a Lock that went without its retire back to one permit: a finalizer taken away, or a number an older operator stored", func() {
		oneAtATime := func(lock string) {
			GinkgoHelper()
			a := waitPhase(create(newLockedJob(ns, "a-"+lock, lock)), batchv1alpha1.PhaseRunning)
			b := waitPhase(create(newLockedJob(ns, "b-"+lock, lock)), batchv1alpha1.PhaseWaiting)
			Consistently(func() batchv1alpha1.LockedJobPhase { return fetch(b).Status.Phase }).
				WithTimeout(time.Second).WithPolling(100 * time.Millisecond).Should(Equal(batchv1alpha1.PhaseWaiting))
			finishJob(a, true)
			waitPhase(b, batchv1alpha1.PhaseRunning)
		}

		By("deleting a Lock whose finalizer someone took away")
		l := declare("stripped", 3)
		permitsKey := op.book.RedisKey(testIdentity.KeyOf(batchv1alpha1.LockScopeNamespace, ns, "stripped")) + ":permits"
		Eventually(func() (string, error) { return rdb.Get(ctx, permitsKey).Result() }).Should(Equal("3"))
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(l), l)).To(Succeed())
		l.Finalizers = nil
		Expect(k8sClient.Update(ctx, l)).To(Succeed())
		Expect(k8sClient.Delete(ctx, l)).To(Succeed())
		Eventually(func() int64 { return rdb.Exists(ctx, permitsKey).Val() }).Should(BeZero())
		oneAtATime("stripped")

		By("finding a number stored for a lock that no Lock declares")
		orphanKey := op.book.RedisKey(testIdentity.KeyOf(batchv1alpha1.LockScopeNamespace, ns, "orphan")) + ":permits"
		Expect(rdb.Set(ctx, orphanKey, "3", 0).Err()).To(Succeed())
		Eventually(func() int64 { return rdb.Exists(ctx, orphanKey).Val() }).Should(BeZero())
		oneAtATime("orphan")
	})

	// An operator of an older lock protocol would grant slot 0 with its plain scripts while the
	// permits are held; while one announces itself, the lock admits one holder and says why.
	It("admits one holder while an operator of an older lock protocol shares the Redis, and the permits once it is gone", func() {
		const clients, older = "lockedjob:clients", "old-cluster/old-pod"
		far := strconv.FormatInt(time.Now().Add(time.Hour).UnixMilli(), 10)
		Expect(rdb.HSet(ctx, clients, older, "1 "+far).Err()).To(Succeed())
		DeferCleanup(func() { rdb.HDel(ctx, clients, older) })

		l := declare("mixed", 2)
		Eventually(func(g Gomega) {
			var seen batchv1alpha1.Lock
			g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(l), &seen)).To(Succeed())
			cond := meta.FindStatusCondition(seen.Status.Conditions, batchv1alpha1.ConditionPermitsSupported)
			g.Expect(cond).NotTo(BeNil())
			g.Expect(cond.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(cond.Reason).To(Equal(batchv1alpha1.ReasonOlderOperators))
			g.Expect(cond.Message).To(ContainSubstring(older))
		}).Should(Succeed())
		a := waitPhase(create(newLockedJob(ns, "a", "mixed")), batchv1alpha1.PhaseRunning)
		b := waitPhase(create(newLockedJob(ns, "b", "mixed")), batchv1alpha1.PhaseWaiting)
		permitsKey := a.Status.LockKey + ":permits"
		Consistently(func(g Gomega) {
			g.Expect(fetch(b).Status.Phase).To(Equal(batchv1alpha1.PhaseWaiting))
			g.Expect(rdb.Get(ctx, permitsKey).Val()).NotTo(Equal("2"))
		}).WithTimeout(time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())

		By("storing the permits once the older operator's announcement is gone")
		Expect(rdb.HDel(ctx, clients, older).Err()).To(Succeed())
		Eventually(func() (string, error) { return rdb.Get(ctx, permitsKey).Result() }).Should(Equal("2"))
		waitPhase(b, batchv1alpha1.PhaseRunning)
	})

	It("serves waiters by priority, then age, and re-adopts every holder in its slot after a restart", func() {
		declare("ranked", 2)
		a := waitPhase(create(newLockedJob(ns, "a", "ranked")), batchv1alpha1.PhaseRunning)
		b := waitPhase(create(newLockedJob(ns, "b", "ranked")), batchv1alpha1.PhaseRunning)
		low := waitPhase(create(newLockedJob(ns, "low", "ranked")), batchv1alpha1.PhaseWaiting)
		high := waitPhase(create(newLockedJob(ns, "high", "ranked", func(lj *batchv1alpha1.LockedJob) {
			lj.Spec.Lock.Priority = 10
		})), batchv1alpha1.PhaseWaiting)

		By("restarting the operator while both slots are held")
		op.stop()
		op = startOperator()
		for _, holder := range []*batchv1alpha1.LockedJob{a, b} {
			Eventually(func() []string { return eventReasons(holder) }).Should(ContainElement(batchv1alpha1.ReasonReadopted))
			now := fetch(holder)
			Expect(now.Status.Phase).To(Equal(batchv1alpha1.PhaseRunning))
			Expect(now.Status.Slot).To(Equal(holder.Status.Slot))
			Expect(now.Status.FencingToken).To(Equal(holder.Status.FencingToken))
		}

		By("handing the first freed slot to the higher priority, although it came later")
		finishJob(a, true)
		high = waitPhase(high, batchv1alpha1.PhaseRunning)
		Expect(slotOf(high)).To(Equal(*a.Status.Slot))
		Expect(fetch(low).Status.Phase).To(Equal(batchv1alpha1.PhaseWaiting))
		finishJob(b, true)
		low = waitPhase(low, batchv1alpha1.PhaseRunning)
		Expect(slotOf(low)).To(Equal(*b.Status.Slot))
	})

	It("shares a Lock's permits between guarded Jobs and LockedJobs, each holder in a slot of its own, and hands a freed slot to a guarded waiter", func() {
		declare("pool", 2)
		lj := waitPhase(create(newLockedJob(ns, "a", "pool")), batchv1alpha1.PhaseRunning)
		job, fence := waitHeld(createJob(newGuardedJob(ns, "b", "pool")))
		jobSlot := job.Annotations[batchv1alpha1.AnnotationSlot]
		Expect([]string{strconv.Itoa(int(slotOf(lj))), jobSlot}).To(ConsistOf("0", "1"))
		Expect(job.Spec.Template.Annotations).To(HaveKeyWithValue(batchv1alpha1.AnnotationSlot, jobSlot))
		Expect(job.Annotations).To(HaveKeyWithValue(batchv1alpha1.AnnotationGuardLockKey, lj.Status.LockKey),
			"a holder of any slot records the lock's key")

		By("keeping a third claimant suspended while both permits are held")
		waiter := createJob(newGuardedJob(ns, "c", "pool"))
		stillSuspended(waiter)

		By("handing the LockedJob's slot to the guarded waiter, with a fence above the slot's last")
		finishJob(lj, true)
		got, waiterFence := waitHeld(waiter)
		Expect(got.Annotations).To(HaveKeyWithValue(batchv1alpha1.AnnotationSlot, strconv.Itoa(int(*lj.Status.Slot))))
		Expect(waiterFence).To(BeNumerically(">", *lj.Status.FencingToken))
		Expect(getJob(job).Annotations).To(HaveKeyWithValue(batchv1alpha1.AnnotationFencingToken, strconv.FormatInt(fence, 10)),
			"the other holder keeps its slot and fence")
	})

	It("keeps a guarded Job of a lock with more than one permit suspended on Redlock, says why, and runs it as a plain lock at one permit", func() {
		var addrs []string
		for range 3 {
			srv, err := redisserver.StartProcess()
			Expect(err).NotTo(HaveOccurred())
			DeferCleanup(srv.Close)
			addrs = append(addrs, srv.Addr())
		}
		op.stop()
		op = startOperatorOn(addrs)
		DeferCleanup(func() { op.stop(); op = startOperator() })

		l := declare("wide", 2)
		job := createJob(newGuardedJob(ns, "x", "wide"))
		Eventually(func() []string { return jobEvents(job) }).Should(ContainElement(
			"PermitsUnsupported: Lock wide declares 2 permits, and the operator's Redis is Redlock, which admits one holder per lock: waiting until the Lock declares 1"))
		stillSuspended(job)

		setPermits(l, 1)
		got, _ := waitHeld(job)
		Expect(got.Annotations).NotTo(HaveKey(batchv1alpha1.AnnotationSlot), "a plain lock has no slot")
	})

	It("makes the LockedJobs of a lock with more than one permit wait on Redlock, and says why", func() {
		var addrs []string
		for range 3 {
			srv, err := redisserver.StartProcess()
			Expect(err).NotTo(HaveOccurred())
			DeferCleanup(srv.Close)
			addrs = append(addrs, srv.Addr())
		}
		op.stop()
		op = startOperatorOn(addrs)
		DeferCleanup(func() { op.stop(); op = startOperator() })

		l := declare("wide", 2)
		lj := waitPhase(create(newLockedJob(ns, "x", "wide")), batchv1alpha1.PhaseWaiting)
		cond := meta.FindStatusCondition(lj.Status.Conditions, batchv1alpha1.ConditionLockAcquired)
		Expect(cond).NotTo(BeNil())
		Expect(cond.Reason).To(Equal(batchv1alpha1.ReasonPermitsUnsupported))
		Expect(lj.Status.Message).To(ContainSubstring("Redlock"))
		Eventually(func(g Gomega) {
			var seen batchv1alpha1.Lock
			g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(l), &seen)).To(Succeed())
			g.Expect(meta.IsStatusConditionFalse(seen.Status.Conditions, batchv1alpha1.ConditionPermitsSupported)).To(BeTrue())
		}).Should(Succeed())

		By("running it as a plain lock once the Lock declares one permit")
		setPermits(l, 1)
		lj = waitPhase(lj, batchv1alpha1.PhaseRunning)
		Expect(lj.Status.Slot).To(BeNil())

		By("re-adopting that plain lock after a restart, although the Lock declares two permits again")
		setPermits(l, 2)
		op.stop()
		op = startOperatorOn(addrs)
		Eventually(func() []string { return eventReasons(lj) }).Should(ContainElement(batchv1alpha1.ReasonReadopted))
		now := fetch(lj)
		Expect(now.Status.Phase).To(Equal(batchv1alpha1.PhaseRunning))
		Expect(now.Status.FencingToken).To(Equal(lj.Status.FencingToken))
	})
})

var _ = Describe("Lock validation", func() {
	rawLock := func(kind, namespace string, spec map[string]any) *unstructured.Unstructured {
		meta := map[string]any{"name": "pool"}
		if namespace != "" {
			meta["namespace"] = namespace
		}
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": batchv1alpha1.GroupVersion.String(), "kind": kind, "metadata": meta, "spec": spec,
		}}
	}

	DescribeTable("refuses permits out of 1..64 with a message naming the field",
		func(kind string, permits any) {
			ns := ""
			if kind == "Lock" {
				ns = newNamespace()
			}
			err := k8sClient.Create(ctx, rawLock(kind, ns, map[string]any{"permits": permits}), client.DryRunAll)
			Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
			Expect(err.Error()).To(ContainSubstring("spec.permits"))
		},
		Entry("Lock, 0", "Lock", 0),
		Entry("Lock, 65", "Lock", 65),
		Entry("Lock, not a number", "Lock", "two"),
		Entry("ClusterLock, 0", "ClusterLock", 0),
		Entry("ClusterLock, 65", "ClusterLock", 65),
	)

	It("defaults permits to 1", func() {
		u := rawLock("Lock", newNamespace(), map[string]any{})
		Expect(k8sClient.Create(ctx, u, client.DryRunAll)).To(Succeed())
		permits, found, err := unstructured.NestedInt64(u.Object, "spec", "permits")
		Expect(err).NotTo(HaveOccurred())
		Expect(found).To(BeTrue())
		Expect(permits).To(Equal(int64(1)))
	})
})
