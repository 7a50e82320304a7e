package controllers

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/redis/go-redis/v9"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/controllers/lockedcronjob"
	"github.com/lockedjob/lockedjob/internal/locks"
	"github.com/lockedjob/lockedjob/internal/redislock"
)

// The LockedCronJob specs run the real LockedCronJob reconciler on a fake clock beside the suite's
// real LockedJob reconciler (op), sharing its lock book and identity as the operator does, against
// the real API server and Redis. The workqueue's RequeueAfter runs on the real clock, so after
// moving the fake clock a spec stands in for that timer by touching the LockedCronJob (nudge).

// cronRig is one running LockedCronJob controller with its fake clock.
type cronRig struct {
	clock  *clocktesting.FakePassiveClock
	cancel context.CancelFunc
	done   chan struct{}
	nudges int
}

func startCronController(start time.Time) *cronRig {
	GinkgoHelper()
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:     testScheme,
		Cache:      CacheOptions(),
		Metrics:    metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	Expect(err).NotTo(HaveOccurred())
	rig := &cronRig{clock: clocktesting.NewFakePassiveClock(start), done: make(chan struct{})}
	r := &lockedcronjob.LockedCronJobReconciler{
		Client:   mgr.GetClient(),
		Scheme:   mgr.GetScheme(),
		Recorder: mgr.GetEventRecorder("lockedcronjob"),
		Locks:    op.book,
		Identity: testIdentity,
		// The suite's operator's gate (startOperator): the two reconcilers share one in the manager.
		ClusterScopeNamespaces: []string{"trusted"},
		Clock:                  rig.clock,
	}
	Expect(r.SetupWithManager(mgr)).To(Succeed())
	var mctx context.Context
	mctx, rig.cancel = context.WithCancel(ctx)
	go func() {
		defer GinkgoRecover()
		defer close(rig.done)
		Expect(mgr.Start(mctx)).To(Succeed())
	}()
	return rig
}

func (c *cronRig) stop() {
	c.cancel()
	<-c.done
}

// at moves the fake clock to t and stands in for the requeue timer of that moment.
func (c *cronRig) at(cj *batchv1alpha1.LockedCronJob, t time.Time) {
	GinkgoHelper()
	c.clock.SetTime(t)
	c.nudges++
	patch := client.MergeFrom(cj.DeepCopy())
	cur := cj.DeepCopy()
	cur.Annotations = map[string]string{"test.lockedjob.dev/nudge": strconv.Itoa(c.nudges)}
	Expect(k8sClient.Patch(ctx, cur, patch)).To(Succeed())
}

func newLockedCronJob(ns, name string, mutate ...func(*batchv1alpha1.LockedCronJob)) *batchv1alpha1.LockedCronJob {
	tmpl := newLockedJob(ns, "", "db")
	cj := &batchv1alpha1.LockedCronJob{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: batchv1alpha1.LockedCronJobSpec{
			Schedule: "* * * * *",
			LockedJobTemplate: batchv1alpha1.LockedJobTemplate{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"team": "nightly"}},
				Spec:       tmpl.Spec,
			},
		},
	}
	for _, m := range mutate {
		m(cj)
	}
	return cj
}

// holdFromOutside acquires the lock of cj's LockedJobs with a client of its own, under the key a
// LockedJob of the template acquires it with, as another process would.
func holdFromOutside(cj *batchv1alpha1.LockedCronJob, opts ...redislock.AcquireOption) *redislock.Lock {
	GinkgoHelper()
	rc := redis.NewClient(&redis.Options{Addr: redisSrv.Addr()})
	DeferCleanup(rc.Close)
	lockClient, err := redislock.New(rc, redislock.WithKeyPrefix("lockedjob:"))
	Expect(err).NotTo(HaveOccurred())
	key := testIdentity.LockKey(locks.ClaimantOf(&batchv1alpha1.LockedJob{ObjectMeta: metav1.ObjectMeta{Namespace: cj.Namespace}, Spec: cj.Spec.LockedJobTemplate.Spec}))
	held, err := lockClient.Acquire(ctx, key, time.Minute, opts...)
	Expect(err).NotTo(HaveOccurred())
	return held
}

func fetchCron(cj *batchv1alpha1.LockedCronJob) *batchv1alpha1.LockedCronJob {
	GinkgoHelper()
	out := &batchv1alpha1.LockedCronJob{}
	Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(cj), out)).To(Succeed())
	return out
}

// runsOf lists the LockedJobs in ns by name.
func runsOf(ns string) map[string]batchv1alpha1.LockedJob {
	GinkgoHelper()
	var list batchv1alpha1.LockedJobList
	Expect(k8sClient.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
	out := map[string]batchv1alpha1.LockedJob{}
	for _, lj := range list.Items {
		out[lj.Name] = lj
	}
	return out
}

// waitRun waits for the LockedJob of the run at t and returns it.
func waitRun(cj *batchv1alpha1.LockedCronJob, t time.Time) *batchv1alpha1.LockedJob {
	GinkgoHelper()
	lj := &batchv1alpha1.LockedJob{}
	Eventually(func() error {
		return k8sClient.Get(ctx, types.NamespacedName{Namespace: cj.Namespace, Name: lockedcronjob.RunName(cj.Name, t)}, lj)
	}).Should(Succeed())
	return lj
}

// cronTable asks the API server for the LockedCronJobs of ns as `kubectl get` shows them: the
// printer columns are evaluated by the server.
func cronTable(ns string) map[string]any {
	GinkgoHelper()
	hc, err := rest.HTTPClientFor(cfg)
	Expect(err).NotTo(HaveOccurred())
	base, _, err := rest.DefaultServerUrlFor(cfg)
	Expect(err).NotTo(HaveOccurred())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet,
		base.JoinPath("apis/batch.lockedjob.dev/v1alpha1/namespaces", ns, "lockedcronjobs").String(), nil)
	Expect(err).NotTo(HaveOccurred())
	req.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
	resp, err := hc.Do(req)
	Expect(err).NotTo(HaveOccurred())
	defer func() { _ = resp.Body.Close() }()
	Expect(resp.StatusCode).To(Equal(http.StatusOK), "GET %s", req.URL)
	var table metav1.Table
	Expect(json.NewDecoder(resp.Body).Decode(&table)).To(Succeed())
	Expect(table.Rows).To(HaveLen(1))
	row := map[string]any{}
	for i, col := range table.ColumnDefinitions {
		row[col.Name] = table.Rows[0].Cells[i]
	}
	return row
}

func scheduleValid(cj *batchv1alpha1.LockedCronJob) *metav1.Condition {
	return meta.FindStatusCondition(cj.Status.Conditions, batchv1alpha1.ConditionScheduleValid)
}

func cronEvents(cj *batchv1alpha1.LockedCronJob) []string {
	GinkgoHelper()
	var list eventsv1.EventList
	Expect(k8sClient.List(ctx, &list, client.InNamespace(cj.Namespace))).To(Succeed())
	var out []string
	for _, e := range list.Items {
		if e.Regarding.Kind == "LockedCronJob" && e.Regarding.Name == cj.Name {
			out = append(out, e.Reason+": "+e.Note)
		}
	}
	return out
}

var _ = Describe("LockedCronJob controller", func() {
	var (
		ns  string
		rig *cronRig
		// r1, r2, r3 are the first three scheduled times of "* * * * *" after the spec started.
		r1, r2, r3 time.Time
	)
	BeforeEach(func() {
		ns = newNamespace()
		rig = startCronController(time.Now())
		DeferCleanup(rig.stop)
	})
	// submit creates the LockedCronJob and sets the fake clock to its creation, from which r1, r2
	// and r3 follow.
	submit := func(cj *batchv1alpha1.LockedCronJob) *batchv1alpha1.LockedCronJob {
		GinkgoHelper()
		Expect(k8sClient.Create(ctx, cj)).To(Succeed())
		created := cj.CreationTimestamp.Time
		r1 = created.Truncate(time.Minute).Add(time.Minute)
		r2, r3 = r1.Add(time.Minute), r1.Add(2*time.Minute)
		rig.at(cj, created)
		return cj
	}
	// createCron submits a valid LockedCronJob and waits for its first pass.
	createCron := func(cj *batchv1alpha1.LockedCronJob) *batchv1alpha1.LockedCronJob {
		GinkgoHelper()
		submit(cj)
		Eventually(func(g Gomega) {
			got := fetchCron(cj)
			c := scheduleValid(got)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
			g.Expect(got.Status.NextScheduleTime).NotTo(BeNil())
			g.Expect(got.Status.NextScheduleTime.Time).To(BeTemporally("==", r1))
		}).Should(Succeed())
		return fetchCron(cj)
	}

	It("Queue: creates a LockedJob at each scheduled time, owned and labelled, which waits in line", func() {
		cj := createCron(newLockedCronJob(ns, "nightly"))
		Expect(runsOf(ns)).To(BeEmpty())

		rig.at(cj, r1.Add(time.Second))
		first := waitRun(cj, r1)
		Expect(metav1.IsControlledBy(first, cj)).To(BeTrue())
		Expect(first.Labels).To(HaveKeyWithValue(batchv1alpha1.LabelLockedCronJob, "nightly"))
		Expect(first.Labels).To(HaveKeyWithValue("team", "nightly"))
		Expect(first.Annotations).To(HaveKeyWithValue(batchv1alpha1.AnnotationScheduledTime, r1.UTC().Format(time.RFC3339)))
		first = waitPhase(first, batchv1alpha1.PhaseRunning)
		Eventually(func(g Gomega) {
			st := fetchCron(cj).Status
			g.Expect(st.LastScheduleTime.Time).To(BeTemporally("==", r1))
			g.Expect(st.NextScheduleTime.Time).To(BeTemporally("==", r2))
			g.Expect(st.Active).To(HaveLen(1))
			g.Expect(st.Active[0].Name).To(Equal(first.Name))
		}).Should(Succeed())

		// The first run still holds the lock: the second is created and waits in its queue.
		rig.at(cj, r2.Add(time.Second))
		second := waitPhase(waitRun(cj, r2), batchv1alpha1.PhaseWaiting)
		Eventually(func() []string {
			var names []string
			for _, a := range fetchCron(cj).Status.Active {
				names = append(names, a.Name)
			}
			return names
		}).Should(ConsistOf(first.Name, second.Name))

		finishJob(first, true)
		waitPhase(second, batchv1alpha1.PhaseRunning)
		Eventually(func(g Gomega) {
			st := fetchCron(cj).Status
			g.Expect(st.LastSuccessfulTime).NotTo(BeNil())
			g.Expect(st.Active).To(HaveLen(1))
			g.Expect(st.Active[0].Name).To(Equal(second.Name))
		}).Should(Succeed())
		Eventually(func() []string { return cronEvents(cj) }).Should(ContainElement(ContainSubstring("Created: Created LockedJob " + first.Name)))
	})

	It("misses runs while the controller is away: starts only the most recent, never a burst", func() {
		cj := createCron(newLockedCronJob(ns, "late"))
		rig.at(cj, r3.Add(10*time.Second))
		waitRun(cj, r3)
		Consistently(func() int { return len(runsOf(ns)) }).WithTimeout(time.Second).Should(Equal(1))
	})

	It("Skip: a lock with a free permit is not busy", func() {
		Expect(k8sClient.Create(ctx, &batchv1alpha1.Lock{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db"},
			Spec: batchv1alpha1.LockViewSpec{Permits: 2}})).To(Succeed())
		cj := createCron(newLockedCronJob(ns, "sharer", func(cj *batchv1alpha1.LockedCronJob) {
			cj.Spec.OnBusy = batchv1alpha1.OnBusySkip
		}))
		held := holdFromOutside(cj, redislock.WithPermits(2))
		DeferCleanup(func() { _ = held.Release(ctx) })

		rig.at(cj, r1.Add(time.Second))
		run := waitPhase(waitRun(cj, r1), batchv1alpha1.PhaseRunning)
		Expect(run.Status.Slot).To(HaveValue(Equal(int32(1 - held.Slot()))))
		Expect(fetchCron(cj).Status.SkippedRuns).To(BeZero())
	})

	It("Skip: while the lock is held by anyone, or its own run has not finished, records a skipped run and creates nothing", func() {
		cj := createCron(newLockedCronJob(ns, "skipper", func(cj *batchv1alpha1.LockedCronJob) {
			cj.Spec.OnBusy = batchv1alpha1.OnBusySkip
		}))
		held := holdFromOutside(cj)

		skippedBefore := exported("lockedjob_cron_runs_total", "result", "skipped")
		rig.at(cj, r1.Add(time.Second))
		Eventually(func(g Gomega) {
			st := fetchCron(cj).Status
			g.Expect(st.SkippedRuns).To(Equal(int64(1)))
			g.Expect(st.LastSkippedTime.Time).To(BeTemporally("==", r1))
		}).Should(Succeed())
		Expect(runsOf(ns)).To(BeEmpty())
		Expect(exported("lockedjob_cron_runs_total", "result", "skipped") - skippedBefore).To(BeNumerically("==", 1))
		Eventually(func() []string { return cronEvents(cj) }).Should(ContainElement(ContainSubstring("Skipped: Skipped the run scheduled at " + r1.UTC().Format(time.RFC3339) + ": lock db is held")))

		// Free: the next run is created.
		Expect(held.Release(ctx)).To(Succeed())
		rig.at(cj, r2.Add(time.Second))
		run := waitPhase(waitRun(cj, r2), batchv1alpha1.PhaseRunning)

		// Its own run has not finished: the next one is skipped.
		rig.at(cj, r3.Add(time.Second))
		Eventually(func() int64 { return fetchCron(cj).Status.SkippedRuns }).Should(Equal(int64(2)))
		Expect(runsOf(ns)).To(HaveLen(1))
		Eventually(func() []string { return cronEvents(cj) }).Should(ContainElement(ContainSubstring("LockedJob " + run.Name + " has not finished")))
		Expect(fetchCron(cj).Status.LastScheduleTime.Time).To(BeTemporally("==", r2))
	})

	It("Skip: a namespace not allowed Cluster scope neither learns who holds a Cluster lock nor skips for it, and is told why", func() {
		// Another tenant, one the operator allows Cluster scope, holds the lock.
		trusted := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "trusted"}}
		if err := k8sClient.Create(ctx, trusted); !apierrors.IsAlreadyExists(err) {
			Expect(err).NotTo(HaveOccurred())
		}
		lock := "cron-scope-" + ns // cluster-wide, so unique per run
		holder := waitPhase(create(newLockedJob("trusted", "holder-"+ns, lock, func(lj *batchv1alpha1.LockedJob) {
			lj.Spec.Lock.Scope = batchv1alpha1.LockScopeCluster
		})), batchv1alpha1.PhaseRunning)
		DeferCleanup(func() { Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, holder))).To(Succeed()) })
		Expect(rdb.Exists(ctx, holder.Status.LockKey).Val()).To(BeNumerically("==", 1), "the lock is held in Redis")

		cj := submit(newLockedCronJob(ns, "peeker", func(cj *batchv1alpha1.LockedCronJob) {
			cj.Spec.OnBusy = batchv1alpha1.OnBusySkip
			cj.Spec.LockedJobTemplate.Spec.Lock.Name = lock
			cj.Spec.LockedJobTemplate.Spec.Lock.Scope = batchv1alpha1.LockScopeCluster
		}))
		rig.at(cj, r1.Add(time.Second))
		Consistently(func(g Gomega) {
			got := fetchCron(cj)
			g.Expect(got.Status.SkippedRuns).To(BeZero(), "no run is skipped for a lock this namespace may not use")
			g.Expect(got.Status.LastSkippedTime).To(BeNil())
			for _, c := range got.Status.Conditions {
				g.Expect(c.Message).NotTo(ContainSubstring("trusted"), "condition %s names the holder", c.Type)
			}
			events := cronEvents(cj)
			g.Expect(events).NotTo(ContainElement(HavePrefix(batchv1alpha1.ReasonSkipped + ": ")))
			g.Expect(events).NotTo(ContainElement(Or(ContainSubstring(holder.Status.Holder), ContainSubstring("trusted"))), "an Event names the holder")
			g.Expect(runsOf(ns)).To(BeEmpty(), "its runs could never acquire the lock")
		}).WithTimeout(2 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())

		Eventually(func(g Gomega) {
			got := fetchCron(cj)
			c := meta.FindStatusCondition(got.Status.Conditions, batchv1alpha1.ConditionScopeAllowed)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(c.Reason).To(Equal(batchv1alpha1.ReasonScopeNotAllowed))
			g.Expect(c.Message).To(ContainSubstring("scope Cluster is not allowed in namespace " + ns))
			g.Expect(got.Status.NextScheduleTime).To(BeNil(), "no run comes while the scope is not allowed")
			g.Expect(cronEvents(cj)).To(ContainElement(HavePrefix(batchv1alpha1.ReasonScopeNotAllowed + ": ")))
		}).Should(Succeed())

		// The user's fix: a lock of its own namespace. The run missed meanwhile starts once.
		cur := fetchCron(cj)
		cur.Spec.LockedJobTemplate.Spec.Lock.Scope = batchv1alpha1.LockScopeNamespace
		Expect(k8sClient.Update(ctx, cur)).To(Succeed())
		waitPhase(waitRun(cj, r1), batchv1alpha1.PhaseRunning)
		c := meta.FindStatusCondition(fetchCron(cj).Status.Conditions, batchv1alpha1.ConditionScopeAllowed)
		Expect(c).NotTo(BeNil())
		Expect(c.Status).To(Equal(metav1.ConditionTrue))
	})

	It("shows schedule, policy, active runs, last and next schedule, last success and skipped runs in kubectl get", func() {
		cj := createCron(newLockedCronJob(ns, "shown", func(cj *batchv1alpha1.LockedCronJob) {
			cj.Spec.OnBusy = batchv1alpha1.OnBusySkip
		}))
		rig.at(cj, r1.Add(time.Second))
		first := waitPhase(waitRun(cj, r1), batchv1alpha1.PhaseRunning)
		rig.at(cj, r2.Add(time.Second))
		Eventually(func() int64 { return fetchCron(cj).Status.SkippedRuns }).Should(Equal(int64(1)))
		finishJob(first, true)
		Eventually(func() *metav1.Time { return fetchCron(cj).Status.LastSuccessfulTime }).ShouldNot(BeNil())

		Eventually(func(g Gomega) {
			row := cronTable(ns)
			g.Expect(row).To(HaveKeyWithValue("Name", "shown"))
			g.Expect(row).To(HaveKeyWithValue("Schedule", "* * * * *"))
			g.Expect(row).To(HaveKeyWithValue("Suspend", false))
			g.Expect(row).To(HaveKeyWithValue("On-Busy", "Skip"))
			g.Expect(row).To(HaveKeyWithValue("Active", BeNil()), "the only run has finished")
			// Dates show as ages, and the fake clock's r1 lies ahead of the API server's: only present.
			g.Expect(row).To(HaveKeyWithValue("Last Schedule", Not(BeEmpty())))
			g.Expect(row).To(HaveKeyWithValue("Last Success", Not(BeEmpty())))
			// A string, so that a future time shows as a time, not as <invalid>.
			g.Expect(row).To(HaveKeyWithValue("Next", r3.UTC().Format(time.RFC3339)))
			g.Expect(row).To(HaveKeyWithValue("Skipped", BeNumerically("==", 1)))
			g.Expect(row).To(HaveKey("Age"))
		}).Should(Succeed())
	})

	It("Replace: deletes only its own unfinished LockedJobs, then creates the new one", func() {
		// Someone else's LockedJob holds the lock throughout.
		other := create(newLockedJob(ns, "other", "db"))
		waitPhase(other, batchv1alpha1.PhaseRunning)
		cj := createCron(newLockedCronJob(ns, "replacer", func(cj *batchv1alpha1.LockedCronJob) {
			cj.Spec.OnBusy = batchv1alpha1.OnBusyReplace
		}))

		rig.at(cj, r1.Add(time.Second))
		first := waitPhase(waitRun(cj, r1), batchv1alpha1.PhaseWaiting)

		replacedBefore := exported("lockedjob_cron_replaced_total")
		rig.at(cj, r2.Add(time.Second))
		second := waitRun(cj, r2)
		Eventually(func() bool {
			err := k8sClient.Get(ctx, client.ObjectKeyFromObject(first), &batchv1alpha1.LockedJob{})
			return apierrors.IsNotFound(err)
		}).Should(BeTrue(), "the replaced run is deleted (and let go by the LockedJob reconciler)")
		waitPhase(second, batchv1alpha1.PhaseWaiting)
		got := fetch(other)
		Expect(got.DeletionTimestamp).To(BeNil(), "another owner's LockedJob is never replaced")
		Expect(got.Status.Phase).To(Equal(batchv1alpha1.PhaseRunning))
		Eventually(func() []string { return cronEvents(cj) }).Should(ContainElement(ContainSubstring("Replaced: Deleted unfinished LockedJob " + first.Name)))
		Expect(exported("lockedjob_cron_replaced_total") - replacedBefore).To(BeNumerically("==", 1))
	})

	It("keeps finished LockedJobs within the history limits", func() {
		cj := createCron(newLockedCronJob(ns, "history", func(cj *batchv1alpha1.LockedCronJob) {
			cj.Spec.SuccessfulJobsHistoryLimit = ptr.To[int32](1)
			cj.Spec.FailedJobsHistoryLimit = ptr.To[int32](1)
		}))
		for i, ok := range []bool{true, false, true} {
			t := r1.Add(time.Duration(i) * time.Minute)
			rig.at(cj, t.Add(time.Second))
			lj := waitPhase(waitRun(cj, t), batchv1alpha1.PhaseRunning)
			finishJob(lj, ok)
			if ok {
				waitPhase(lj, batchv1alpha1.PhaseSucceeded)
			} else {
				waitPhase(lj, batchv1alpha1.PhaseFailed)
			}
		}
		Eventually(func() []string {
			var names []string
			for name := range runsOf(ns) {
				names = append(names, name)
			}
			return names
		}).Should(ConsistOf(lockedcronjob.RunName(cj.Name, r2), lockedcronjob.RunName(cj.Name, r3)), "the oldest success goes; one success and one failure stay")
		Expect(fetchCron(cj).Status.LastSuccessfulTime).NotTo(BeNil())
	})

	It("suspend: creates nothing; on resume a run missed beyond startingDeadlineSeconds is not made up", func() {
		cj := newLockedCronJob(ns, "paused", func(cj *batchv1alpha1.LockedCronJob) {
			cj.Spec.Suspend = ptr.To(true)
			cj.Spec.StartingDeadlineSeconds = ptr.To[int64](10)
		})
		submit(cj)
		Eventually(func(g Gomega) {
			got := fetchCron(cj)
			g.Expect(scheduleValid(got)).NotTo(BeNil())
			g.Expect(got.Status.ObservedGeneration).To(Equal(got.Generation))
			g.Expect(got.Status.NextScheduleTime).To(BeNil())
		}).Should(Succeed())
		rig.at(cj, r1.Add(time.Second))
		Consistently(func() map[string]batchv1alpha1.LockedJob { return runsOf(ns) }).WithTimeout(time.Second).Should(BeEmpty())

		rig.clock.SetTime(r1.Add(30 * time.Second))
		cur := fetchCron(cj)
		cur.Spec.Suspend = ptr.To(false)
		Expect(k8sClient.Update(ctx, cur)).To(Succeed())
		Eventually(func(g Gomega) {
			got := fetchCron(cj)
			g.Expect(got.Status.ObservedGeneration).To(Equal(got.Generation))
			g.Expect(got.Status.NextScheduleTime).NotTo(BeNil())
			g.Expect(got.Status.NextScheduleTime.Time).To(BeTemporally("==", r2))
		}).Should(Succeed())
		Expect(runsOf(ns)).To(BeEmpty(), "r1 was missed by 30s, beyond the deadline of 10s")

		rig.at(cj, r2.Add(time.Second))
		waitRun(cj, r2)
	})

	It("says why a schedule the parser refuses is invalid, and runs once it is fixed", func() {
		cj := submit(newLockedCronJob(ns, "backwards", func(cj *batchv1alpha1.LockedCronJob) { cj.Spec.Schedule = "30-10 * * * *" }))
		Eventually(func(g Gomega) {
			got := fetchCron(cj)
			c := scheduleValid(got)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(c.Reason).To(Equal(batchv1alpha1.ReasonInvalidSchedule))
			g.Expect(c.Message).To(ContainSubstring(`spec.schedule "30-10 * * * *"`))
			g.Expect(c.Message).To(ContainSubstring("beyond end of range"))
			g.Expect(got.Status.NextScheduleTime).To(BeNil())
		}).Should(Succeed())
		Eventually(func() []string { return cronEvents(cj) }).Should(ContainElement(HavePrefix("InvalidSchedule: ")))

		cur := fetchCron(cj)
		cur.Spec.Schedule = "* * * * *"
		Expect(k8sClient.Update(ctx, cur)).To(Succeed())
		Eventually(func(g Gomega) {
			c := scheduleValid(fetchCron(cj))
			g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
		}).Should(Succeed())
		rig.at(cj, r1.Add(time.Second))
		waitRun(cj, r1)
	})
})
