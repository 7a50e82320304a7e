package controllers

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/internal/lockbook"
	"github.com/lockedjob/lockedjob/internal/locks"
	"github.com/lockedjob/lockedjob/internal/redislock"
)

// newNamespace creates a namespace for one spec, so specs never see each other's objects.
func newNamespace() string {
	GinkgoHelper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "lj-"}}
	Expect(k8sClient.Create(ctx, ns)).To(Succeed())
	return ns.Name
}

func newLockedJob(ns, name, lock string, mutate ...func(*batchv1alpha1.LockedJob)) *batchv1alpha1.LockedJob {
	lj := &batchv1alpha1.LockedJob{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: batchv1alpha1.LockedJobSpec{
			Lock: batchv1alpha1.LockSpec{Name: lock},
			JobTemplate: batchv1alpha1.JobTemplate{Spec: batchv1.JobSpec{
				Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
					RestartPolicy: corev1.RestartPolicyNever,
					Containers:    []corev1.Container{{Name: "work", Image: "busybox", Command: []string{"true"}}},
				}},
			}},
		},
	}
	for _, m := range mutate {
		m(lj)
	}
	return lj
}

func create(lj *batchv1alpha1.LockedJob) *batchv1alpha1.LockedJob {
	GinkgoHelper()
	Expect(k8sClient.Create(ctx, lj)).To(Succeed())
	return lj
}

func fetch(lj *batchv1alpha1.LockedJob) *batchv1alpha1.LockedJob {
	GinkgoHelper()
	out := &batchv1alpha1.LockedJob{}
	Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(lj), out)).To(Succeed())
	return out
}

// waitPhase waits for the phase and returns the LockedJob as it was then.
func waitPhase(lj *batchv1alpha1.LockedJob, phase batchv1alpha1.LockedJobPhase) *batchv1alpha1.LockedJob {
	GinkgoHelper()
	var got *batchv1alpha1.LockedJob
	Eventually(func(g Gomega) {
		got = &batchv1alpha1.LockedJob{}
		g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(lj), got)).To(Succeed())
		g.Expect(got.Status.Phase).To(Equal(phase), "message: %s", got.Status.Message)
	}).Should(Succeed())
	return got
}

func jobOf(lj *batchv1alpha1.LockedJob) *batchv1.Job {
	GinkgoHelper()
	job := &batchv1.Job{}
	Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: lj.Namespace, Name: lj.Status.JobName}, job)).To(Succeed())
	return job
}

func jobsIn(ns string) []batchv1.Job {
	GinkgoHelper()
	var list batchv1.JobList
	Expect(k8sClient.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
	return list.Items
}

// finishJob writes the status the Job controller would write when the Job ends.
func finishJob(lj *batchv1alpha1.LockedJob, succeeded bool) {
	GinkgoHelper()
	job := jobOf(lj)
	now := metav1.Now()
	job.Status.StartTime = &now
	if succeeded {
		job.Status.CompletionTime = &now
		job.Status.Succeeded = 1
		job.Status.Conditions = []batchv1.JobCondition{
			{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: now},
		}
	} else {
		job.Status.Failed = 1
		job.Status.Conditions = []batchv1.JobCondition{
			{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, LastTransitionTime: now, Reason: "BackoffLimitExceeded"},
			{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, LastTransitionTime: now, Reason: "BackoffLimitExceeded", Message: "Job has reached the specified backoff limit"},
		}
	}
	Expect(k8sClient.Status().Update(ctx, job)).To(Succeed())
}

// standInPod creates a pod carrying the label of the LockedJob's Job: there is no kubelet here, so it
// stands in for a pod of that Job that is still terminating, until the spec deletes it.
func standInPod(lj *batchv1alpha1.LockedJob) *corev1.Pod {
	GinkgoHelper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: lj.Namespace, Name: lj.Status.JobName + "-pod",
			Labels: map[string]string{batchv1.JobNameLabel: lj.Status.JobName}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
	}
	Expect(k8sClient.Create(ctx, pod)).To(Succeed())
	return pod
}

func condition(lj *batchv1alpha1.LockedJob, t string) *metav1.Condition {
	return meta.FindStatusCondition(lj.Status.Conditions, t)
}

func envOf(job *batchv1.Job) map[string]string {
	out := map[string]string{}
	for _, e := range job.Spec.Template.Spec.Containers[0].Env {
		out[e.Name] = e.Value
	}
	return out
}

var _ = Describe("LockedJob controller", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	It("acquires the lock, records it, then creates the Job with the fencing token", func() {
		lj := create(newLockedJob(ns, "migrate", "db"))
		got := waitPhase(lj, batchv1alpha1.PhaseRunning)

		Expect(got.Finalizers).To(ContainElement(batchv1alpha1.FinalizerReleaseLock))
		Expect(got.Status.FencingToken).NotTo(BeNil())
		fence := *got.Status.FencingToken
		Expect(got.Status.Holder).To(HavePrefix("envtest/" + ns + "/migrate/"))
		Expect(got.Status.LockKey).To(Equal("lockedjob:{ns/" + testIdentity.ClusterID + "/" + ns + "/db}"))
		Expect(got.Status.AcquiredAt).NotTo(BeNil())
		Expect(got.Status.RenewedAt).To(BeNil(), "renewals are not written to status")
		Expect(got.Status.ExpiresAt).To(BeNil(), "renewals are not written to status")
		Expect(got.Status.ObservedGeneration).To(Equal(got.Generation))
		for _, c := range []string{batchv1alpha1.ConditionLockAcquired, batchv1alpha1.ConditionJobRunning, batchv1alpha1.ConditionReady, batchv1alpha1.ConditionRedisAvailable} {
			Expect(condition(got, c)).NotTo(BeNil(), c)
			Expect(condition(got, c).Status).To(Equal(metav1.ConditionTrue), c)
			Expect(condition(got, c).ObservedGeneration).To(Equal(got.Generation), c)
		}
		Expect(condition(got, batchv1alpha1.ConditionFinished).Status).To(Equal(metav1.ConditionFalse))

		job := jobOf(got)
		Expect(metav1.IsControlledBy(job, got)).To(BeTrue())
		Expect(job.Name).To(Equal("migrate-" + strconv.FormatInt(fence, 36)))
		Expect(envOf(job)).To(HaveKeyWithValue(batchv1alpha1.EnvFencingToken, strconv.FormatInt(fence, 10)))
		Expect(envOf(job)).To(HaveKeyWithValue(batchv1alpha1.EnvLock, "db"))
		Expect(envOf(job)).To(HaveKeyWithValue(batchv1alpha1.EnvHolder, got.Status.Holder))
		Expect(job.Annotations).To(HaveKeyWithValue(batchv1alpha1.AnnotationFencingToken, strconv.FormatInt(fence, 10)))
		Expect(job.Spec.Template.Annotations).To(HaveKeyWithValue(batchv1alpha1.AnnotationFencingToken, strconv.FormatInt(fence, 10)))

		By("holding the lock in Redis under a token that the object does not reveal")
		value, err := rdb.Get(ctx, got.Status.LockKey).Result()
		Expect(err).NotTo(HaveOccurred())
		token := redislock.HolderToken(value)
		Expect(token).To(Equal(testIdentity.Token(locks.ClaimantOf(got))))
		raw, err := json.Marshal(got)
		Expect(err).NotTo(HaveOccurred())
		Expect(string(raw)).NotTo(ContainSubstring(token))

		By("refusing a second Job for the same acquisition")
		// The name is the acquisition's (its fence), so any second create of it is refused.
		dup := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: job.Namespace, Name: job.Name}, Spec: batchv1.JobSpec{
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
				Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}}}
		Expect(apierrors.IsAlreadyExists(k8sClient.Create(ctx, dup))).To(BeTrue())

		By("releasing the lock when the Job completes")
		finishJob(got, true)
		done := waitPhase(lj, batchv1alpha1.PhaseSucceeded)
		Expect(condition(done, batchv1alpha1.ConditionComplete).Status).To(Equal(metav1.ConditionTrue))
		Expect(condition(done, batchv1alpha1.ConditionFinished).Status).To(Equal(metav1.ConditionTrue))
		Expect(condition(done, batchv1alpha1.ConditionFinished).Reason).To(Equal(batchv1alpha1.ReasonJobComplete))
		Expect(condition(done, batchv1alpha1.ConditionLockAcquired).Reason).To(Equal(batchv1alpha1.ReasonReleased))
		Expect(rdb.Exists(ctx, got.Status.LockKey).Val()).To(BeZero())
		Expect(jobsIn(ns)).To(HaveLen(1))
		// Two Events tell the story: the acquisition with the Job it created, the end with the release.
		Eventually(func() []string { return eventReasons(lj) }).Should(ConsistOf(
			batchv1alpha1.ReasonJobCreated, batchv1alpha1.ReasonJobComplete))
		Expect(eventNotes(lj)).To(ContainElements(
			MatchRegexp(`^JobCreated: Acquired lock db with fencing token %d after waiting .*; created Job %s$`, fence, got.Status.JobName),
			MatchRegexp(`^JobComplete: .*; released lock db \(fencing token %d\)$`, fence)))
	})

	It("makes a second LockedJob wait, shows who blocks it, and hands off at once on release", func() {
		first := create(newLockedJob(ns, "first", "shared"))
		running := waitPhase(first, batchv1alpha1.PhaseRunning)
		second := create(newLockedJob(ns, "second", "shared"))
		waiting := waitPhase(second, batchv1alpha1.PhaseWaiting)
		Expect(waiting.Status.BlockedBy).To(Equal(running.Status.Holder))
		Expect(waiting.Status.QueuePosition).To(Equal(ptrTo(int32(1))))
		Expect(waiting.Status.JobName).To(BeEmpty())
		Expect(condition(waiting, batchv1alpha1.ConditionReady).Reason).To(Equal(batchv1alpha1.ReasonWaiting))
		Expect(jobsIn(ns)).To(HaveLen(1))

		// Waiters re-check only every 30s in this suite: a handoff within 1s is the wake-up's doing.
		finishJob(running, true)
		released := time.Now()
		Eventually(func(g Gomega) {
			g.Expect(fetch(second).Status.Phase).To(Equal(batchv1alpha1.PhaseRunning))
		}).WithTimeout(time.Second).WithPolling(10 * time.Millisecond).Should(Succeed())
		GinkgoWriter.Printf("handoff took %v\n", time.Since(released))
		after := fetch(second)
		Expect(*after.Status.FencingToken).To(BeNumerically(">", *running.Status.FencingToken))
		Expect(after.Status.BlockedBy).To(BeEmpty())
		Expect(after.Status.QueuePosition).To(BeNil())
		Expect(eventReasons(second)).To(ContainElements(batchv1alpha1.ReasonWaiting, batchv1alpha1.ReasonJobCreated))
	})

	It("shows exact places near the head only, and after a handoff tells only the waiters whose shown place changed", func() {
		holder := waitPhase(create(newLockedJob(ns, "holder", "deep")), batchv1alpha1.PhaseRunning)
		var waiters []*batchv1alpha1.LockedJob
		for i := 1; i <= 12; i++ {
			waiters = append(waiters, waitPhase(create(newLockedJob(ns, fmt.Sprintf("w%02d", i), "deep")), batchv1alpha1.PhaseWaiting))
		}
		Expect(waiters[1].Status.QueuePosition).To(Equal(ptrTo(int32(2))))
		Expect(waiters[1].Status.BlockedBy).To(Equal(holder.Status.Holder))
		deep := waiters[11]
		Expect(deep.Status.QueuePosition).To(BeNil(), "place 12 is past the exact range")
		Expect(deep.Status.BlockedBy).To(BeEmpty())
		Expect(deep.Status.Message).To(ContainSubstring("position >10 in queue"))

		// Waiters behind the head re-check only every 2 minutes in this suite: the head runs within
		// a second because the release woke it; those now at places 1-3, 5 and 10 learn their place
		// from the handoff's lineup; the others' shown place did not change and is not rewritten.
		unchanged := []*batchv1alpha1.LockedJob{waiters[4], waiters[11]} // now at 4 (">3") and 11 (">10")
		versions := map[string]string{}
		for _, w := range unchanged {
			versions[w.Name] = fetch(w).ResourceVersion
		}
		blockedBy := map[string]string{}
		for _, w := range waiters[1:4] {
			blockedBy[w.Name] = fetch(w).Status.BlockedBy
		}
		finishJob(holder, true)
		Eventually(func() batchv1alpha1.LockedJobPhase { return fetch(waiters[0]).Status.Phase }).
			WithTimeout(time.Second).WithPolling(10 * time.Millisecond).Should(Equal(batchv1alpha1.PhaseRunning))
		for i, w := range waiters[1:4] {
			Eventually(func(g Gomega) {
				st := fetch(w).Status
				g.Expect(st.QueuePosition).To(Equal(ptrTo(int32(i + 1))))
				// A hint moves the place, not who blocks: that is what Redis answered the waiter itself.
				g.Expect(st.BlockedBy).To(Equal(blockedBy[w.Name]))
			}).WithTimeout(2*time.Second).WithPolling(10*time.Millisecond).Should(Succeed(), w.Name)
		}
		for w, place := range map[*batchv1alpha1.LockedJob]string{waiters[5]: ">3", waiters[10]: ">5"} {
			Eventually(func() string { return fetch(w).Status.Message }).WithTimeout(2*time.Second).
				WithPolling(10*time.Millisecond).Should(ContainSubstring("position "+place+" in queue"), w.Name)
		}
		Consistently(func() map[string]string {
			now := map[string]string{}
			for _, w := range unchanged {
				now[w.Name] = fetch(w).ResourceVersion
			}
			return now
		}).WithTimeout(time.Second).Should(Equal(versions), "shown places that did not change")
	})

	It("never takes who blocks a waiter from a release message, which anyone who can publish could forge", func() {
		holder := waitPhase(create(newLockedJob(ns, "holder", "forged")), batchv1alpha1.PhaseRunning)
		var waiters []*batchv1alpha1.LockedJob
		for i := 1; i <= 3; i++ {
			waiters = append(waiters, waitPhase(create(newLockedJob(ns, fmt.Sprintf("w%d", i), "forged")), batchv1alpha1.PhaseWaiting))
		}
		// A handoff announcement as queue.lua publishes it (key, fence, lease, attempt, member), for
		// a member Redis never handed the lock to.
		const forged = "envtest/elsewhere/mallory/00000000"
		msg := strings.Join([]string{holder.Status.LockKey, "999", "60000", "forged-attempt", forged}, "\x00")
		Expect(rdb.Publish(ctx, "lockedjob:released", msg).Val()).To(BeNumerically(">=", 1), "nobody listens on the release channel")
		Consistently(func(g Gomega) {
			for _, w := range waiters {
				st := fetch(w).Status
				g.Expect(st.BlockedBy).NotTo(Equal(forged), w.Name)
				g.Expect(st.Message).NotTo(ContainSubstring(forged), w.Name)
			}
		}).WithTimeout(2 * time.Second).WithPolling(20 * time.Millisecond).Should(Succeed())

		// A real release still hands the lock to the head at once.
		finishJob(fetch(holder), true)
		Eventually(func() batchv1alpha1.LockedJobPhase { return fetch(waiters[0]).Status.Phase }).
			WithTimeout(time.Second).WithPolling(10 * time.Millisecond).Should(Equal(batchv1alpha1.PhaseRunning))
		Expect(fetch(waiters[1]).Status.BlockedBy).NotTo(Equal(forged))
	})

	It("serves waiters by priority, then age", func() {
		holder := create(newLockedJob(ns, "holder", "queue"))
		held := waitPhase(holder, batchv1alpha1.PhaseRunning)
		low := create(newLockedJob(ns, "low", "queue", withPriority(-5)))
		waitPhase(low, batchv1alpha1.PhaseWaiting)
		high := create(newLockedJob(ns, "high", "queue", withPriority(10)))
		waitPhase(high, batchv1alpha1.PhaseWaiting)
		mid := create(newLockedJob(ns, "mid", "queue"))
		waitPhase(mid, batchv1alpha1.PhaseWaiting)

		current := held
		for _, next := range []*batchv1alpha1.LockedJob{high, mid, low} {
			finishJob(current, true)
			current = waitPhase(next, batchv1alpha1.PhaseRunning)
			for _, other := range []*batchv1alpha1.LockedJob{high, mid, low} {
				if other.Name != next.Name && fetch(other).Status.Phase == batchv1alpha1.PhaseRunning {
					Fail(fmt.Sprintf("%s runs beside %s", other.Name, next.Name))
				}
			}
		}
		finishJob(current, true)
		waitPhase(low, batchv1alpha1.PhaseSucceeded)
	})

	It("runs LockedJobs of different locks in parallel", func() {
		a := create(newLockedJob(ns, "a", "lock-a"))
		b := create(newLockedJob(ns, "b", "lock-b"))
		waitPhase(a, batchv1alpha1.PhaseRunning)
		waitPhase(b, batchv1alpha1.PhaseRunning)
	})

	It("keeps equal lock names in two namespaces apart, unless the scope is Cluster", func() {
		other := newNamespace()
		a := create(newLockedJob(ns, "x", "same"))
		b := create(newLockedJob(other, "x", "same"))
		waitPhase(a, batchv1alpha1.PhaseRunning)
		waitPhase(b, batchv1alpha1.PhaseRunning)

		By("refusing scope Cluster outside the trusted namespaces")
		c := create(newLockedJob(ns, "cluster-wide", "global", func(lj *batchv1alpha1.LockedJob) {
			lj.Spec.Lock.Scope = batchv1alpha1.LockScopeCluster
		}))
		Eventually(func(g Gomega) {
			cond := condition(fetch(c), batchv1alpha1.ConditionLockAcquired)
			g.Expect(cond).NotTo(BeNil())
			g.Expect(cond.Reason).To(Equal(batchv1alpha1.ReasonScopeNotAllowed))
		}).Should(Succeed())
		Expect(fetch(c).Status.JobName).To(BeEmpty())
	})

	It("stops the Job and releases the lock when a running LockedJob is deleted", func() {
		first := create(newLockedJob(ns, "doomed", "del"))
		running := waitPhase(first, batchv1alpha1.PhaseRunning)
		next := create(newLockedJob(ns, "next", "del"))
		waitPhase(next, batchv1alpha1.PhaseWaiting)

		Expect(k8sClient.Delete(ctx, first)).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKeyFromObject(first), &batchv1alpha1.LockedJob{}))
		}).Should(BeTrue())
		Eventually(func() bool {
			err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: running.Status.JobName}, &batchv1.Job{})
			return apierrors.IsNotFound(err) || err == nil && jobOf(running).DeletionTimestamp != nil
		}).Should(BeTrue())
		waitPhase(next, batchv1alpha1.PhaseRunning)
	})

	It("holds the lock of a deleted LockedJob until its Job's pods are gone, even after the Job object is", func() {
		holder := create(newLockedJob(ns, "holder", "pods"))
		running := waitPhase(holder, batchv1alpha1.PhaseRunning)
		next := create(newLockedJob(ns, "next", "pods"))
		waitPhase(next, batchv1alpha1.PhaseWaiting)

		pod := standInPod(running)
		Expect(k8sClient.Delete(ctx, holder)).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: running.Status.JobName}, &batchv1.Job{}))
		}).Should(BeTrue(), "the Job object goes first")
		Consistently(func(g Gomega) {
			g.Expect(fetch(holder).DeletionTimestamp).NotTo(BeNil())
			g.Expect(redislock.HolderToken(rdb.Get(ctx, running.Status.LockKey).Val())).To(Equal(testIdentity.Token(locks.ClaimantOf(running))))
			g.Expect(fetch(next).Status.Phase).To(Equal(batchv1alpha1.PhaseWaiting))
		}).WithTimeout(2 * time.Second).Should(Succeed())

		Expect(k8sClient.Delete(ctx, pod)).To(Succeed())
		waitPhase(next, batchv1alpha1.PhaseRunning)
		Eventually(func() bool {
			return apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKeyFromObject(holder), &batchv1alpha1.LockedJob{}))
		}).Should(BeTrue())
	})

	DescribeTable("applies spec.lock.onLockLost when the lock vanishes behind the operator's back",
		func(policy batchv1alpha1.LockLostPolicy, check func(*batchv1alpha1.LockedJob)) {
			lj := create(newLockedJob(ns, "victim", "lost", func(lj *batchv1alpha1.LockedJob) {
				lj.Spec.Lock.OnLockLost = policy
				lj.Spec.Lock.TTL = &metav1.Duration{Duration: 3 * time.Second}
				lj.Spec.Lock.RenewInterval = &metav1.Duration{Duration: 300 * time.Millisecond}
			}))
			running := waitPhase(lj, batchv1alpha1.PhaseRunning)
			Expect(rdb.Del(ctx, running.Status.LockKey).Err()).To(Succeed())

			lost := waitPhase(lj, batchv1alpha1.PhaseLockLost)
			Expect(condition(lost, batchv1alpha1.ConditionLockLost).Status).To(Equal(metav1.ConditionTrue))
			Expect(condition(lost, batchv1alpha1.ConditionReady).Status).To(Equal(metav1.ConditionFalse))
			check(running)
		},
		Entry("Suspend suspends the Job", batchv1alpha1.LockLostSuspend, func(lj *batchv1alpha1.LockedJob) {
			Eventually(func() *bool { return jobOf(lj).Spec.Suspend }).Should(Equal(ptrTo(true)))
		}),
		Entry("Delete deletes the Job", batchv1alpha1.LockLostDelete, func(lj *batchv1alpha1.LockedJob) {
			Eventually(func() bool {
				job := &batchv1.Job{}
				err := k8sClient.Get(ctx, client.ObjectKey{Namespace: lj.Namespace, Name: lj.Status.JobName}, job)
				return apierrors.IsNotFound(err) || err == nil && job.DeletionTimestamp != nil
			}).Should(BeTrue())
		}),
		Entry("Ignore keeps the Job running", batchv1alpha1.LockLostIgnore, func(lj *batchv1alpha1.LockedJob) {
			Consistently(func() *bool { return jobOf(lj).Spec.Suspend }).WithTimeout(time.Second).Should(Or(BeNil(), Equal(ptrTo(false))))
		}),
	)

	It("fails a LockedJob that waits longer than its acquireTimeout", func() {
		create(newLockedJob(ns, "hog", "slow"))
		waitPhase(&batchv1alpha1.LockedJob{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "hog"}}, batchv1alpha1.PhaseRunning)
		impatient := create(newLockedJob(ns, "impatient", "slow", func(lj *batchv1alpha1.LockedJob) {
			lj.Spec.Lock.AcquireTimeout = &metav1.Duration{Duration: 2 * time.Second}
		}))
		failed := waitPhase(impatient, batchv1alpha1.PhaseFailed)
		Expect(condition(failed, batchv1alpha1.ConditionFailed).Reason).To(Equal(batchv1alpha1.ReasonLockTimeout))
		Expect(condition(failed, batchv1alpha1.ConditionFinished).Reason).To(Equal(batchv1alpha1.ReasonLockTimeout))
		Expect(failed.Status.JobName).To(BeEmpty())
	})

	It("marks a failed Job Failed and releases the lock", func() {
		lj := create(newLockedJob(ns, "broken", "f"))
		running := waitPhase(lj, batchv1alpha1.PhaseRunning)
		finishJob(running, false)
		failed := waitPhase(lj, batchv1alpha1.PhaseFailed)
		Expect(condition(failed, batchv1alpha1.ConditionFailed).Reason).To(Equal(batchv1alpha1.ReasonJobFailed))
		// kubectl wait --for=condition=Finished returns on a failure too.
		Expect(condition(failed, batchv1alpha1.ConditionFinished).Status).To(Equal(metav1.ConditionTrue))
		Expect(condition(failed, batchv1alpha1.ConditionFinished).Reason).To(Equal(batchv1alpha1.ReasonJobFailed))
		Expect(rdb.Exists(ctx, running.Status.LockKey).Val()).To(BeZero())
	})

	It("caches only its own Jobs, without their pod templates, and sees the end of one whose label was taken away", func() {
		// Someone else's Job in the same namespace is never in the operator's cache.
		foreign := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "not-locked"},
			Spec: newLockedJob(ns, "", "").Spec.JobTemplate.Spec}
		Expect(k8sClient.Create(ctx, foreign)).To(Succeed())
		lj := create(newLockedJob(ns, "unlabeled", "u"))
		running := waitPhase(lj, batchv1alpha1.PhaseRunning)
		key := client.ObjectKey{Namespace: ns, Name: running.Status.JobName}
		cached := &batchv1.Job{}
		Eventually(func() error { return op.cache.Get(ctx, key, cached) }).Should(Succeed())
		Expect(cached.Spec.Template.Spec.Containers).To(BeEmpty(), "the cache keeps no pod template")
		Expect(cached.ManagedFields).To(BeEmpty())
		Expect(cached.Annotations).To(HaveKeyWithValue(batchv1alpha1.AnnotationFencingToken, fmt.Sprint(*running.Status.FencingToken)))
		Expect(apierrors.IsNotFound(op.cache.Get(ctx, client.ObjectKeyFromObject(foreign), &batchv1.Job{}))).To(BeTrue(),
			"a Job the operator did not create is not cached")

		// Without the label the cache lets the Job go, and no event tells of its end: the pass looks again.
		job := jobOf(running)
		base := job.DeepCopy()
		delete(job.Labels, batchv1alpha1.LabelLockedJob)
		// Another label stays: a Job left without labels takes its pod template's again (the Job
		// API's defaulting), and the pods carry the operator's label too.
		job.Labels["edited"] = "by-hand"
		Expect(k8sClient.Patch(ctx, job, client.MergeFrom(base))).To(Succeed())
		Eventually(func() bool { return apierrors.IsNotFound(op.cache.Get(ctx, key, &batchv1.Job{})) }).Should(BeTrue())
		finishJob(running, true)
		done := waitPhase(lj, batchv1alpha1.PhaseSucceeded)
		Expect(done.Status.JobName).To(Equal(running.Status.JobName))
		Expect(rdb.Exists(ctx, running.Status.LockKey).Val()).To(BeZero())
	})

	It("re-adopts held locks after a restart without starting a second Job", func() {
		lj := create(newLockedJob(ns, "survivor", "restart", func(lj *batchv1alpha1.LockedJob) {
			lj.Spec.Lock.TTL = &metav1.Duration{Duration: 3 * time.Second}
		}))
		running := waitPhase(lj, batchv1alpha1.PhaseRunning)
		waiter := create(newLockedJob(ns, "waiter", "restart"))
		waitPhase(waiter, batchv1alpha1.PhaseWaiting)

		op.stop() // like a crash: no release, renewals stop
		op = startOperator()

		// Past two leases: only a renewing, re-adopted holder still has the key.
		Consistently(func(g Gomega) {
			g.Expect(redislock.HolderToken(rdb.Get(ctx, running.Status.LockKey).Val())).To(Equal(testIdentity.Token(locks.ClaimantOf(running))))
			g.Expect(jobsIn(ns)).To(HaveLen(1))
			g.Expect(fetch(waiter).Status.Phase).To(Equal(batchv1alpha1.PhaseWaiting))
		}).WithTimeout(7 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
		Expect(*fetch(lj).Status.FencingToken).To(Equal(*running.Status.FencingToken))

		finishJob(running, true)
		waitPhase(waiter, batchv1alpha1.PhaseRunning)
		Expect(jobsIn(ns)).To(HaveLen(2))
	})

	It("writes nothing to the API server while a held lock merely renews", func() {
		lj := create(newLockedJob(ns, "quiet", "steady", func(lj *batchv1alpha1.LockedJob) {
			lj.Spec.Lock.TTL = &metav1.Duration{Duration: 2 * time.Second}
			lj.Spec.Lock.RenewInterval = &metav1.Duration{Duration: 200 * time.Millisecond}
		}))
		running := waitPhase(lj, batchv1alpha1.PhaseRunning)
		// Let the passes that follow the Job's creation settle: the object stops changing.
		var rv string
		Eventually(func() bool {
			prev := rv
			rv = fetch(lj).ResourceVersion
			return prev == rv
		}).WithPolling(time.Second).Should(BeTrue())
		events := len(eventReasons(running))

		// Two leases long: the keeper renews about 20 times, and the object and its Events stay as
		// they are.
		Consistently(func() string { return fetch(lj).ResourceVersion }).WithTimeout(4 * time.Second).Should(Equal(rv))
		Expect(rdb.PTTL(ctx, running.Status.LockKey).Val()).To(BeNumerically(">", time.Second), "the lock was renewed meanwhile")
		Expect(eventReasons(running)).To(HaveLen(events))
	})

	It("rides out a Redis stall shorter than the lease, with a RenewFailed event", func() {
		lj := create(newLockedJob(ns, "steady", "stall", func(lj *batchv1alpha1.LockedJob) {
			lj.Spec.Lock.TTL = &metav1.Duration{Duration: 10 * time.Second}
			lj.Spec.Lock.RenewInterval = &metav1.Duration{Duration: 200 * time.Millisecond}
		}))
		running := waitPhase(lj, batchv1alpha1.PhaseRunning)
		redisSrv.Pause(GinkgoT())
		DeferCleanup(func() { redisSrv.Resume(GinkgoT()) })
		Eventually(func() []string { return eventReasons(running) }).Should(ContainElement(batchv1alpha1.ReasonRenewFailed))
		redisSrv.Resume(GinkgoT())

		// Renewals resume; the lock and the Job stay.
		Eventually(func() time.Duration { return rdb.PTTL(ctx, running.Status.LockKey).Val() }).Should(BeNumerically(">", 9*time.Second))
		Expect(fetch(lj).Status.Phase).To(Equal(batchv1alpha1.PhaseRunning))
		Expect(eventReasons(running)).NotTo(ContainElement(batchv1alpha1.ReasonLockLost))
	})

	It("exports the lock metrics", func() {
		acquired := exported("lockedjob_locks_acquired_total")
		renewed := testutil.ToFloat64(lockbook.LockRenewalsTotal.WithLabelValues("success"))
		lj := create(newLockedJob(ns, "measured", "metrics", func(lj *batchv1alpha1.LockedJob) {
			lj.Spec.Lock.TTL = &metav1.Duration{Duration: 3 * time.Second}
			lj.Spec.Lock.RenewInterval = &metav1.Duration{Duration: 200 * time.Millisecond}
		}))
		running := waitPhase(lj, batchv1alpha1.PhaseRunning)
		waiter := create(newLockedJob(ns, "queued", "metrics"))
		waitPhase(waiter, batchv1alpha1.PhaseWaiting)

		Expect(exported("lockedjob_locks_acquired_total")).To(BeNumerically(">=", acquired+1))
		Expect(testutil.ToFloat64(lockbook.LocksHeld)).To(BeNumerically(">=", 1))
		Expect(exported("lockedjob_lockedjobs_waiting")).To(BeNumerically(">=", 1))
		Eventually(func() float64 { return testutil.ToFloat64(lockbook.LockRenewalsTotal.WithLabelValues("success")) }).
			Should(BeNumerically(">=", renewed+2))

		handoffs := exported("lockedjob_handoff_seconds")
		finishJob(running, true)
		waitPhase(waiter, batchv1alpha1.PhaseRunning)
		Expect(exported("lockedjob_locks_acquired_total")).To(BeNumerically(">=", acquired+2))
		Expect(exported("lockedjob_handoff_seconds")).To(BeNumerically(">=", handoffs+1), "the handoff to the waiter is measured")

		families, err := metrics.Registry.Gather()
		Expect(err).NotTo(HaveOccurred())
		var names []string
		for _, f := range families {
			names = append(names, f.GetName())
		}
		Expect(names).To(ContainElements("lockedjob_locks_held", "lockedjob_lockedjobs_waiting", "lockedjob_locks_acquired_total",
			"lockedjob_lock_wait_seconds", "lockedjob_handoff_seconds", "lockedjob_lock_renewals_total", "lockedjob_lock_lost_total"))
	})

	It("reports Redis unavailable and creates no Job without the lock", func() {
		redisSrv.Stop(GinkgoT())
		DeferCleanup(func() { redisSrv.Restart(GinkgoT()) })
		lj := create(newLockedJob(ns, "no-redis", "r"))
		Eventually(func(g Gomega) {
			got := fetch(lj)
			cond := condition(got, batchv1alpha1.ConditionRedisAvailable)
			g.Expect(cond).NotTo(BeNil())
			g.Expect(cond.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(condition(got, batchv1alpha1.ConditionReady).Reason).To(Equal(batchv1alpha1.ReasonRedisUnavailable))
		}).Should(Succeed())
		Consistently(func() []batchv1.Job { return jobsIn(ns) }).WithTimeout(time.Second).Should(BeEmpty())

		redisSrv.Restart(GinkgoT())
		waitPhase(lj, batchv1alpha1.PhaseRunning)
		Expect(condition(fetch(lj), batchv1alpha1.ConditionRedisAvailable).Status).To(Equal(metav1.ConditionTrue))
	})
})

// eventReasons lists the reasons of the Events about lj.
// eventNotes are the LockedJob's Events as "reason: note".
func eventNotes(lj *batchv1alpha1.LockedJob) []string {
	GinkgoHelper()
	var notes []string
	for _, e := range eventsOf(lj) {
		notes = append(notes, e.Reason+": "+e.Note)
	}
	return notes
}

// eventsOf are the Events regarding the LockedJob.
func eventsOf(lj *batchv1alpha1.LockedJob) []eventsv1.Event {
	GinkgoHelper()
	var list eventsv1.EventList
	Expect(k8sClient.List(ctx, &list, client.InNamespace(lj.Namespace))).To(Succeed())
	var out []eventsv1.Event
	for _, e := range list.Items {
		if e.Regarding.Name == lj.Name && e.Regarding.Kind == "LockedJob" {
			out = append(out, e)
		}
	}
	return out
}

func eventReasons(lj *batchv1alpha1.LockedJob) []string {
	GinkgoHelper()
	var reasons []string
	for _, e := range eventsOf(lj) {
		reasons = append(reasons, e.Reason)
	}
	return reasons
}

func withPriority(p int32) func(*batchv1alpha1.LockedJob) {
	return func(lj *batchv1alpha1.LockedJob) { lj.Spec.Lock.Priority = p }
}

func ptrTo[T any](v T) *T { return &v }

// exported is the value of the operator's metric name (with label pairs) as the registry that
// /metrics serves has it: a counter's or gauge's value, a histogram's count of samples.
func exported(name string, labelPairs ...string) float64 {
	GinkgoHelper()
	families, err := metrics.Registry.Gather()
	Expect(err).NotTo(HaveOccurred())
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if !hasLabels(m, labelPairs) {
				continue
			}
			switch {
			case m.Counter != nil:
				return m.GetCounter().GetValue()
			case m.Gauge != nil:
				return m.GetGauge().GetValue()
			case m.Histogram != nil:
				return float64(m.GetHistogram().GetSampleCount())
			}
		}
		return 0 // a vector with no series of these labels yet
	}
	Fail("no metric " + name + " is registered")
	return 0
}

func hasLabels(m *dto.Metric, pairs []string) bool {
	for i := 0; i+1 < len(pairs); i += 2 {
		if !slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool { return l.GetName() == pairs[i] && l.GetValue() == pairs[i+1] }) {
			return false
		}
	}
	return true
}
