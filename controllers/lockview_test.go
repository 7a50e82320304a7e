package controllers

import (
	"encoding/json"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/internal/locks"
)

var _ = Describe("Lock view", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	It("shows a declared lock as Redis holds it, follows a handoff, and never shows a token", func() {
		view := &batchv1alpha1.Lock{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "viewed"}}
		Expect(k8sClient.Create(ctx, view)).To(Succeed())
		holder := waitPhase(create(newLockedJob(ns, "holder", "viewed")), batchv1alpha1.PhaseRunning)
		waiter := waitPhase(create(newLockedJob(ns, "waiter", "viewed")), batchv1alpha1.PhaseWaiting)

		var seen batchv1alpha1.Lock
		Eventually(func(g Gomega) {
			g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(view), &seen)).To(Succeed())
			st := seen.Status
			g.Expect(st.Holders).To(HaveLen(1))
			g.Expect(st.Holders[0].LockedJob).To(Equal("holder"))
			g.Expect(st.Holders[0].Holder).To(Equal(holder.Status.Holder))
			g.Expect(st.Holders[0].FencingToken).To(Equal(*holder.Status.FencingToken))
			g.Expect(st.Holders[0].AcquiredAt).NotTo(BeNil())
			g.Expect(st.InUse).To(Equal(int32(1)))
			g.Expect(st.Permits).To(Equal(int32(1)))
			g.Expect(st.Waiting).To(Equal(ptrTo(int32(1))))
			g.Expect(st.Head).To(Equal(testIdentity.Holder(locks.ClaimantOf(waiter))))
			g.Expect(st.LockKey).To(Equal(holder.Status.LockKey))
			g.Expect(st.ObservedGeneration).To(Equal(seen.Generation))
			g.Expect(meta.IsStatusConditionTrue(st.Conditions, batchv1alpha1.ConditionRedisAvailable)).To(BeTrue())
		}).Should(Succeed())
		raw, err := json.Marshal(seen)
		Expect(err).NotTo(HaveOccurred())
		Expect(string(raw)).NotTo(ContainSubstring(testIdentity.Token(locks.ClaimantOf(holder))))

		By("writing nothing while the lock merely renews")
		rv := seen.ResourceVersion
		Consistently(func() string {
			Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(view), &seen)).To(Succeed())
			return seen.ResourceVersion
		}).WithTimeout(2 * time.Second).WithPolling(100 * time.Millisecond).Should(Equal(rv))

		By("following the handoff to the waiter")
		finishJob(holder, true)
		next := waitPhase(waiter, batchv1alpha1.PhaseRunning)
		Eventually(func(g Gomega) {
			g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(view), &seen)).To(Succeed())
			g.Expect(seen.Status.Holders).To(HaveLen(1))
			g.Expect(seen.Status.Holders[0].LockedJob).To(Equal("waiter"))
			g.Expect(seen.Status.Holders[0].FencingToken).To(Equal(*next.Status.FencingToken))
			g.Expect(seen.Status.Waiting).To(Equal(ptrTo(int32(0))))
			g.Expect(seen.Status.Head).To(BeEmpty())
			g.Expect(seen.Status.LastHandoff).NotTo(BeNil())
			g.Expect(seen.Status.LastHandoff.From).To(Equal("holder"))
			g.Expect(seen.Status.LastHandoff.To).To(Equal("waiter"))
			g.Expect(seen.Status.LastHandoff.At.Time).To(BeTemporally("~", next.Status.AcquiredAt.Time, time.Second))
		}).Should(Succeed())

		By("showing a free lock once the last holder is done")
		finishJob(next, true)
		waitPhase(waiter, batchv1alpha1.PhaseSucceeded)
		Eventually(func(g Gomega) {
			g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(view), &seen)).To(Succeed())
			g.Expect(seen.Status.Holders).To(BeEmpty())
			g.Expect(seen.Status.InUse).To(BeZero())
			g.Expect(seen.Status.LastFencingToken).To(Equal(*next.Status.FencingToken))
		}).Should(Succeed())
	})

	It("names a guarded Job that holds a declared Lock by its Job, and the handoff from it to a LockedJob", func() {
		view := &batchv1alpha1.Lock{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "guarded"}}
		Expect(k8sClient.Create(ctx, view)).To(Succeed())
		job, fence := waitHeld(createJob(newGuardedJob(ns, "migrate", "guarded")))
		waiter := waitPhase(create(newLockedJob(ns, "after", "guarded")), batchv1alpha1.PhaseWaiting)

		var seen batchv1alpha1.Lock
		Eventually(func(g Gomega) {
			g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(view), &seen)).To(Succeed())
			st := seen.Status
			g.Expect(st.Holders).To(HaveLen(1))
			g.Expect(st.Holders[0].Job).To(Equal("migrate"))
			g.Expect(st.Holders[0].LockedJob).To(BeEmpty())
			g.Expect(st.Holders[0].Holder).To(Equal(job.Annotations[batchv1alpha1.AnnotationHolder]))
			g.Expect(st.Holders[0].FencingToken).To(Equal(fence))
			g.Expect(st.Holders[0].AcquiredAt).To(BeNil(), "a guarded Job records no acquisition time")
			g.Expect(st.Head).To(Equal(testIdentity.Holder(locks.ClaimantOf(waiter))))
		}).Should(Succeed())

		By("naming the Job, kind first, in the handoff to the waiting LockedJob")
		completeJob(job)
		next := waitPhase(waiter, batchv1alpha1.PhaseRunning)
		Eventually(func(g Gomega) {
			g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(view), &seen)).To(Succeed())
			g.Expect(seen.Status.Holders).To(HaveLen(1))
			g.Expect(seen.Status.Holders[0].LockedJob).To(Equal("after"))
			g.Expect(seen.Status.Holders[0].Job).To(BeEmpty())
			g.Expect(seen.Status.LastHandoff).NotTo(BeNil())
			g.Expect(seen.Status.LastHandoff.From).To(Equal("job/migrate"))
			g.Expect(seen.Status.LastHandoff.To).To(Equal("after"))
			g.Expect(seen.Status.Holders[0].FencingToken).To(Equal(*next.Status.FencingToken))
		}).Should(Succeed())
	})

	It("shows a ClusterLock's holder by namespace and name", func() {
		op.stop()
		op = startOperator(func(o *Options) { o.ClusterScopeNamespaces = []string{"*"} })
		DeferCleanup(func() { op.stop(); op = startOperator() })
		name := "view-" + ns // cluster-wide, so unique per run
		view := &batchv1alpha1.ClusterLock{ObjectMeta: metav1.ObjectMeta{Name: name}}
		Expect(k8sClient.Create(ctx, view)).To(Succeed())
		DeferCleanup(func() { Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, view))).To(Succeed()) })
		holder := waitPhase(create(newLockedJob(ns, "shared", name, func(lj *batchv1alpha1.LockedJob) {
			lj.Spec.Lock.Scope = batchv1alpha1.LockScopeCluster
		})), batchv1alpha1.PhaseRunning)
		Eventually(func(g Gomega) {
			var seen batchv1alpha1.ClusterLock
			g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(view), &seen)).To(Succeed())
			g.Expect(seen.Status.Holders).To(HaveLen(1))
			g.Expect(seen.Status.Holders[0].LockedJob).To(Equal(ns + "/shared"))
			g.Expect(seen.Status.Holders[0].FencingToken).To(Equal(*holder.Status.FencingToken))
		}).Should(Succeed())
	})
})
