package controllers

import (
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/controllers/internal/reconcile"
	"github.com/lockedjob/lockedjob/controllers/internal/unit"
	"github.com/lockedjob/lockedjob/internal/locks"
	"github.com/lockedjob/lockedjob/internal/redislock"
)

// Specs for the holes an outside review found (issue 9); each names its item. They run on the
// suite's real kube-apiserver and redis-server.
var _ = Describe("LockedJob safety", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	It("never creates a Job again after it was deleted out of band (#11)", func() {
		lj := create(newLockedJob(ns, "once", "oob"))
		running := waitPhase(lj, batchv1alpha1.PhaseRunning)
		Expect(running.Status.JobUID).NotTo(BeEmpty())
		Expect(k8sClient.Delete(ctx, jobOf(running), client.PropagationPolicy(metav1.DeletePropagationBackground))).To(Succeed())

		failed := waitPhase(lj, batchv1alpha1.PhaseFailed)
		Expect(condition(failed, batchv1alpha1.ConditionFailed).Reason).To(Equal(batchv1alpha1.ReasonJobDeleted))
		Expect(jobsIn(ns)).To(BeEmpty(), "no Job may be created again under the same fencing token")
		Expect(rdb.Exists(ctx, running.Status.LockKey).Val()).To(BeZero(), "the lock is released")
	})

	It("refuses an invalid Job template before acquiring the lock (#14)", func() {
		lj := create(newLockedJob(ns, "invalid", "never", func(lj *batchv1alpha1.LockedJob) {
			lj.Spec.JobTemplate.Spec.Template.Spec.Containers[0].Name = "Not_A_DNS_Label"
		}))
		failed := waitPhase(lj, batchv1alpha1.PhaseFailed)
		Expect(condition(failed, batchv1alpha1.ConditionFailed).Reason).To(Equal(batchv1alpha1.ReasonJobInvalid))
		Expect(failed.Status.FencingToken).To(BeNil())
		Expect(rdb.Keys(ctx, "lockedjob:{*"+ns+"*never}*").Val()).To(BeEmpty(), "nothing was acquired in Redis")
		Expect(jobsIn(ns)).To(BeEmpty())
	})

	It("ends a LockedJob whose Job the API server refuses at length, and tells it within the API's limits (#23)", func() {
		// Valid to the CRD, which types the template but leaves names to the Job API: each container
		// name costs the refusal a field error of some 250 bytes, with the name quoted in UTF-8.
		lj := create(newLockedJob(ns, "verbose", "never", func(lj *batchv1alpha1.LockedJob) {
			spec := &lj.Spec.JobTemplate.Spec.Template.Spec
			spec.Containers = nil
			for i := range 20 {
				spec.Containers = append(spec.Containers, corev1.Container{Name: fmt.Sprintf("Ungültig_Größe_%02d", i), Image: "busybox"})
			}
		}))
		failed := waitPhase(lj, batchv1alpha1.PhaseFailed)
		Expect(condition(failed, batchv1alpha1.ConditionFailed).Reason).To(Equal(batchv1alpha1.ReasonJobInvalid))
		Expect(condition(failed, batchv1alpha1.ConditionFinished).Status).To(Equal(metav1.ConditionTrue), "kubectl wait --for=condition=Finished returns")
		Expect(failed.Status.Message).To(HaveSuffix(reconcile.Ellipsis), "the refusal is quoted, cut")
		Expect(len(failed.Status.Message)).To(BeNumerically("<=", unit.APILimit))
		Expect(utf8.ValidString(failed.Status.Message)).To(BeTrue())
		Eventually(func(g Gomega) {
			var notes []string
			for _, e := range eventsOf(lj) {
				if e.Reason == batchv1alpha1.ReasonJobInvalid {
					notes = append(notes, e.Note)
				}
			}
			g.Expect(notes).To(ConsistOf(HaveSuffix(reconcile.Ellipsis)), "the Event is told, its note cut")
		}).Should(Succeed())
	})

	It("re-adopts the lock of a LockedJob deleted after a restart, until its pods are gone (#12)", func() {
		holder := create(newLockedJob(ns, "holder", "del", func(lj *batchv1alpha1.LockedJob) {
			lj.Spec.Lock.TTL = &metav1.Duration{Duration: 3 * time.Second}
		}))
		running := waitPhase(holder, batchv1alpha1.PhaseRunning)
		next := create(newLockedJob(ns, "next", "del"))
		waitPhase(next, batchv1alpha1.PhaseWaiting)
		pod := standInPod(running)

		op.stop() // like a crash: no release, renewals stop
		Expect(k8sClient.Delete(ctx, holder)).To(Succeed())
		op = startOperator()

		// Past two leases: only a re-adopted, renewed lock still names the deleted holder.
		Consistently(func(g Gomega) {
			g.Expect(redislock.HolderToken(rdb.Get(ctx, running.Status.LockKey).Val())).To(Equal(testIdentity.Token(locks.ClaimantOf(running))))
			g.Expect(fetch(next).Status.Phase).To(Equal(batchv1alpha1.PhaseWaiting))
		}).WithTimeout(7 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())

		Expect(k8sClient.Delete(ctx, pod)).To(Succeed())
		waitPhase(next, batchv1alpha1.PhaseRunning)
		Eventually(func() bool {
			return apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKeyFromObject(holder), &batchv1alpha1.LockedJob{}))
		}).Should(BeTrue())
	})

	It("keeps renewing a held lock after Cluster scope is revoked (#15)", func() {
		op.stop()
		op = startOperator(func(o *Options) { o.ClusterScopeNamespaces = []string{"*"} })
		lj := create(newLockedJob(ns, "shared", "revoked", func(lj *batchv1alpha1.LockedJob) {
			lj.Spec.Lock.Scope = batchv1alpha1.LockScopeCluster
			lj.Spec.Lock.TTL = &metav1.Duration{Duration: 3 * time.Second}
		}))
		running := waitPhase(lj, batchv1alpha1.PhaseRunning)

		op.stop()
		op = startOperator() // trusts only "trusted" again
		Consistently(func(g Gomega) {
			g.Expect(redislock.HolderToken(rdb.Get(ctx, running.Status.LockKey).Val())).To(Equal(testIdentity.Token(locks.ClaimantOf(running))))
			g.Expect(fetch(lj).Status.Phase).To(Equal(batchv1alpha1.PhaseRunning))
		}).WithTimeout(7 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())

		finishJob(running, true)
		waitPhase(lj, batchv1alpha1.PhaseSucceeded)
		Expect(rdb.Exists(ctx, running.Status.LockKey).Val()).To(BeZero())
	})

	It("reports LockLost, never Succeeded, when the release finds the lock held by another (#25)", func() {
		// Renewals are far apart, so the Job completes before the keeper could notice.
		lj := create(newLockedJob(ns, "late", "taken", func(lj *batchv1alpha1.LockedJob) {
			lj.Spec.Lock.TTL = &metav1.Duration{Duration: 60 * time.Second}
			lj.Spec.Lock.RenewInterval = &metav1.Duration{Duration: 20 * time.Second}
		}))
		running := waitPhase(lj, batchv1alpha1.PhaseRunning)
		// What a pause past the lease looks like from Redis: the lease ended and another holder took it.
		Expect(rdb.Set(ctx, running.Status.LockKey, "someone-else", time.Minute).Err()).To(Succeed())
		finishJob(running, true)

		lost := waitPhase(lj, batchv1alpha1.PhaseLockLost)
		Expect(condition(lost, batchv1alpha1.ConditionComplete)).To(BeNil())
		Expect(condition(lost, batchv1alpha1.ConditionFinished).Reason).To(Equal(batchv1alpha1.ReasonLockLost))
		Expect(rdb.Get(ctx, running.Status.LockKey).Val()).To(Equal("someone-else"), "the other holder's lock is left alone")
	})

	It("reports Succeeded when the lease lapsed while the operator was away and nobody took the lock since (issue 28)", func() {
		lj := create(newLockedJob(ns, "away", "lapsed", func(lj *batchv1alpha1.LockedJob) {
			lj.Spec.Lock.TTL = &metav1.Duration{Duration: 60 * time.Second}
			lj.Spec.Lock.RenewInterval = &metav1.Duration{Duration: 20 * time.Second}
		}))
		running := waitPhase(lj, batchv1alpha1.PhaseRunning)
		fence := rdb.Get(ctx, running.Status.LockKey+":fence").Val()
		Expect(fence).To(Equal(strconv.FormatInt(*running.Status.FencingToken, 10)))
		// The operator is away while the Job ends and the lease runs out (the key goes, the fence
		// key stays); nobody acquires meanwhile, as in the chaos run's distinct locks.
		op.stop()
		Expect(rdb.Del(ctx, running.Status.LockKey).Err()).To(Succeed())
		finishJob(running, true)
		op = startOperator()

		done := waitPhase(lj, batchv1alpha1.PhaseSucceeded)
		Expect(condition(done, batchv1alpha1.ConditionComplete).Status).To(Equal(metav1.ConditionTrue))
		Expect(done.Status.ReleasedAt).NotTo(BeNil())
		Expect(rdb.Get(ctx, running.Status.LockKey+":fence").Val()).To(Equal(fence), "no grant since")
	})

	It("warns when the ttl is shorter than the operator's failover time (#22)", func() {
		op.stop()
		op = startOperator(func(o *Options) { o.LockedJob.FailoverTime = 15 * time.Second })
		lj := create(newLockedJob(ns, "brief", "short", func(lj *batchv1alpha1.LockedJob) {
			lj.Spec.Lock.TTL = &metav1.Duration{Duration: 3 * time.Second}
		}))
		waitPhase(lj, batchv1alpha1.PhaseRunning)
		Eventually(func() []string { return eventReasons(lj) }).Should(ContainElement(batchv1alpha1.ReasonTTLBelowFailover))
		op.stop()
		op = startOperator()
	})
})
