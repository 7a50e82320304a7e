//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/redis/go-redis/v9"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/internal/redislock"
	"github.com/lockedjob/lockedjob/internal/testutil/redisserver"
	"github.com/lockedjob/lockedjob/test/testkit"
)

// ---------------------------------------------------------------- scenarios

// scenario is the state one Ordered container shares: its namespace, Redis
// key prefix, Redis nodes, manager and the recorder of its Jobs and pods.
type scenario struct {
	id     string
	ns     string
	prefix string
	nodes  []*redisserver.Server
	rdb    []*redis.Client
	mgr    *manager
	// deployed is the manager running in the cluster, for the in-cluster lane (mgr is nil then).
	deployed *deployment
	// fastFailover is the leader-election setting the scenario's managers use.
	fastFailover bool
	rec          *testkit.Recorder
	ctx          context.Context
	cancel       context.CancelFunc
	start        time.Time
}

// current is the scenario whose spec runs now, for the failure dump.
var current *scenario

var suiteFailed atomic.Bool

// newScenario creates the namespace and starts recording it. nodes are the
// Redis servers the scenario's manager talks to (the shared one if none).
// Cleanup (delete the LockedJobs while the manager still runs, stop the
// manager, check Redis is clean, delete the namespace, stop Redis servers the
// scenario owns) is registered with DeferCleanup.
func newScenario(id string, owned bool, nodes ...*redisserver.Server) *scenario {
	GinkgoHelper()
	if len(nodes) == 0 {
		nodes = []*redisserver.Server{suite.redis}
	}
	s := &scenario{id: id, ns: "e2e-" + id + "-" + rand.String(5), prefix: "e2e-" + id + ":", nodes: nodes, start: time.Now()}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	for _, n := range nodes {
		c := redis.NewClient(&redis.Options{Addr: n.Addr(), MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: time.Second})
		s.rdb = append(s.rdb, c)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: s.ns, Labels: map[string]string{"lockedjob.dev/e2e": id}}}
	Expect(suite.k8s.Create(s.ctx, ns)).To(Succeed())
	var err error
	s.rec, err = testkit.NewRecorder(s.ctx, suite.cs, testkit.RecorderOptions{Namespace: s.ns})
	Expect(err).NotTo(HaveOccurred())
	current = s
	DeferCleanup(func(ctx SpecContext) {
		defer func() {
			for _, c := range s.rdb {
				_ = c.Close()
			}
			if owned {
				for _, n := range s.nodes {
					Expect(n.Close()).To(Succeed())
				}
			}
			s.cancel()
		}()
		s.teardown(ctx)
	}, NodeTimeout(3*time.Minute))
	return s
}

func (s *scenario) addr() []string {
	var out []string
	for _, n := range s.nodes {
		out = append(out, n.Addr())
	}
	return out
}

// startManager starts this scenario's manager as s.mgr (replacing the record of a previous one,
// which must have been stopped or killed).
func (s *scenario) startManager(fastFailover bool) {
	GinkgoHelper()
	s.fastFailover = fastFailover
	s.mgr = startManager(managerOpts{prefix: s.prefix, redisAddrs: s.addr(), fastFailover: fastFailover})
}

func (s *scenario) teardown(ctx context.Context) {
	GinkgoHelper()
	// Every Redis node is back, so the operator can release what it holds.
	for _, n := range s.nodes {
		if !n.Running() {
			n.Restart(GinkgoT())
		}
	}
	defer func() {
		if s.mgr != nil {
			s.mgr.Stop()
		}
		_ = suite.k8s.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: s.ns}})
		logf("scenario %s took %s", s.id, since(s.start))
	}()
	if s.mgr == nil && s.deployed == nil {
		return
	}
	if s.mgr != nil && s.mgr.Exited() { // the spec failed after killing it: a manager must remove the finalizers
		s.startManager(s.fastFailover)
	}
	// LockedJobs carry a finalizer: delete them while the manager runs.
	Expect(suite.k8s.DeleteAllOf(ctx, &batchv1alpha1.LockedJob{}, client.InNamespace(s.ns))).To(Succeed())
	Eventually(func(g Gomega) {
		var list batchv1alpha1.LockedJobList
		g.Expect(suite.k8s.List(ctx, &list, client.InNamespace(s.ns))).To(Succeed())
		g.Expect(names(list.Items)).To(BeEmpty(), "LockedJobs left after delete")
	}).WithContext(ctx).WithTimeout(60 * time.Second).Should(Succeed())
	s.expectRedisClean(ctx)
}

// expectRedisClean checks that no key with the scenario's prefix is left on
// any node, except the fence counters, which never expire by design (they keep
// fencing tokens increasing across holders), release marks, which expire by
// themselves after their retention, and the running manager's announcement of
// its lock protocol (redislock's Announce), which is no lock's.
func (s *scenario) expectRedisClean(ctx context.Context) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		for i, c := range s.rdb {
			if !s.nodes[i].Running() {
				continue // a killed node forgot everything
			}
			keys, err := c.Keys(ctx, s.prefix+"*").Result()
			g.Expect(err).NotTo(HaveOccurred())
			keys = slices.DeleteFunc(keys, func(k string) bool {
				return strings.HasSuffix(k, ":fence") || redislock.IsReleaseMark(k) || k == s.prefix+"clients"
			})
			g.Expect(keys).To(BeEmpty(), "keys left on redis node %d (%s)", i, s.nodes[i].Addr())
		}
	}).WithContext(ctx).WithTimeout(20 * time.Second).Should(Succeed())
}

// redisKey is the Redis key of a namespace-scoped lock (see Identity.LockKey
// and redislock's keysFor).
func (s *scenario) redisKey(lock string) string { return s.prefix + "{" + s.libKey(lock) + "}" }

// libKey is the lock's name in the lock library: keys of Namespace scope carry the cluster ID the
// e2e managers run with (--cluster-id e2e).
func (s *scenario) libKey(lock string) string { return "ns/e2e/" + s.ns + "/" + lock }

// ---------------------------------------------------------------- LockedJobs

// newLockedJob builds a LockedJob in the scenario's namespace whose Job has one pod.
func (s *scenario) newLockedJob(name string, o testkit.LockedJobOptions) *batchv1alpha1.LockedJob {
	o.App = "e2e"
	return testkit.NewLockedJob(s.ns, name, o)
}

// create creates LockedJobs and returns their names.
func (s *scenario) create(ljs ...*batchv1alpha1.LockedJob) {
	GinkgoHelper()
	for _, lj := range ljs {
		Expect(suite.k8s.Create(s.ctx, lj)).To(Succeed())
	}
}

func (s *scenario) get(name string) *batchv1alpha1.LockedJob {
	GinkgoHelper()
	lj := &batchv1alpha1.LockedJob{}
	Expect(suite.k8s.Get(s.ctx, client.ObjectKey{Namespace: s.ns, Name: name}, lj)).To(Succeed())
	return lj
}

// eventuallyPhase waits until the LockedJob is in phase and returns it.
func (s *scenario) eventuallyPhase(name string, phase batchv1alpha1.LockedJobPhase, timeout time.Duration) *batchv1alpha1.LockedJob {
	GinkgoHelper()
	var lj *batchv1alpha1.LockedJob
	Eventually(func(g Gomega) {
		lj = &batchv1alpha1.LockedJob{}
		g.Expect(suite.k8s.Get(s.ctx, client.ObjectKey{Namespace: s.ns, Name: name}, lj)).To(Succeed())
		g.Expect(lj.Status.Phase).To(Equal(phase), "LockedJob %s: %s", name, lj.Status.Message)
	}).WithTimeout(timeout).Should(Succeed())
	return lj
}

// eventuallyRunningPod waits until the LockedJob runs and its Job's pod is
// Running, and returns the LockedJob.
func (s *scenario) eventuallyRunningPod(name string, timeout time.Duration) *batchv1alpha1.LockedJob {
	GinkgoHelper()
	var lj *batchv1alpha1.LockedJob
	Eventually(func(g Gomega) {
		lj = s.get(name)
		g.Expect(lj.Status.Phase).To(Equal(batchv1alpha1.PhaseRunning), "LockedJob %s: %s", name, lj.Status.Message)
		pods := s.rec.History().PodsOf(lj.Status.JobName)
		g.Expect(pods).NotTo(BeEmpty())
		g.Expect(pods[0].Running.IsZero()).To(BeFalse(), "pod %s not Running", pods[0].Name)
	}).WithTimeout(timeout).Should(Succeed())
	return lj
}

// seenFinished waits until the recorder saw the Job complete or fail (its watch
// may trail the LockedJob's status by a few ms) and returns its record.
// eventuallyAllComplete waits until the watch saw n Jobs, each complete with its one pod
// succeeded, and returns them in the order they were created.
func (s *scenario) eventuallyAllComplete(ctx context.Context, n int) []testkit.JobRecord {
	GinkgoHelper()
	var runs []testkit.JobRecord
	Eventually(func(g Gomega) {
		runs = s.rec.History().Jobs
		g.Expect(runs).To(HaveLen(n), "one Job per LockedJob")
		for _, r := range runs {
			g.Expect(r.Complete).NotTo(BeZero(), "Job %s not seen complete yet", r.Name)
			pods := s.rec.History().PodsOf(r.Name)
			g.Expect(pods).To(HaveLen(1), "Job %s ran one pod", r.Name)
			g.Expect(pods[0].Succeeded).NotTo(BeZero(), "pod of Job %s not seen succeeded yet", r.Name)
		}
	}).WithContext(ctx).Should(Succeed())
	return runs
}

func (s *scenario) seenFinished(job string) testkit.JobRecord {
	GinkgoHelper()
	var j testkit.JobRecord
	Eventually(func() time.Time { j = s.rec.History().Job(job); return j.Finished() }).
		WithTimeout(10*time.Second).ShouldNot(BeZero(), "Job %s not seen finished", job)
	return j
}

// condition returns the LockedJob's condition of type t (nil if absent).
func condition(lj *batchv1alpha1.LockedJob, t string) *metav1.Condition {
	return meta.FindStatusCondition(lj.Status.Conditions, t)
}

// eventReasons returns the reasons of the Events recorded for the object named
// name in the scenario's namespace, oldest first.
func (s *scenario) eventReasons(kind, name string) []string {
	GinkgoHelper()
	var list corev1.EventList
	Expect(suite.k8s.List(s.ctx, &list, client.InNamespace(s.ns))).To(Succeed())
	sortEvents(list.Items)
	var out []string
	for _, e := range list.Items {
		if e.InvolvedObject.Kind == kind && e.InvolvedObject.Name == name {
			out = append(out, e.Reason)
		}
	}
	return out
}

// eventuallyEvents waits until the LockedJob has Events with all the reasons.
func (s *scenario) eventuallyEvents(name string, reasons ...string) {
	GinkgoHelper()
	Eventually(func() []string { return s.eventReasons("LockedJob", name) }).
		WithTimeout(20*time.Second).Should(ContainElements(reasons), "Events of LockedJob %s", name)
}

// jobsOf lists the Jobs in the namespace that the LockedJob created. Its full name is in an
// annotation; the label holds a shortened form for names too long for a label value.
func (s *scenario) jobsOf(name string) []batchv1.Job {
	GinkgoHelper()
	var list batchv1.JobList
	Expect(suite.k8s.List(s.ctx, &list, client.InNamespace(s.ns))).To(Succeed())
	return slices.DeleteFunc(list.Items, func(j batchv1.Job) bool {
		return j.Annotations[batchv1alpha1.AnnotationLockedJob] != name
	})
}

// podsOfJob lists the pods of a Job from the API server.
func (s *scenario) podsOfJob(job string) []corev1.Pod {
	GinkgoHelper()
	var list corev1.PodList
	Expect(suite.k8s.List(s.ctx, &list, client.InNamespace(s.ns), client.MatchingLabels{batchv1.JobNameLabel: job})).To(Succeed())
	return list.Items
}

// expectFenceEverywhere checks that the fencing token in the LockedJob's status
// reaches the Job's name, annotations and every container's environment.
func (s *scenario) expectFenceEverywhere(lj *batchv1alpha1.LockedJob) int64 {
	GinkgoHelper()
	Expect(lj.Status.FencingToken).NotTo(BeNil(), "LockedJob %s has no fencing token", lj.Name)
	fence := *lj.Status.FencingToken
	Expect(fence).To(BeNumerically(">", 0))
	Expect(lj.Status.JobName).To(Equal(lj.Name + "-" + strconv.FormatInt(fence, 36)))
	job := &batchv1.Job{}
	Expect(suite.k8s.Get(s.ctx, client.ObjectKey{Namespace: s.ns, Name: lj.Status.JobName}, job)).To(Succeed())
	want := strconv.FormatInt(fence, 10)
	Expect(job.Annotations).To(HaveKeyWithValue(batchv1alpha1.AnnotationFencingToken, want))
	Expect(job.Spec.Template.Annotations).To(HaveKeyWithValue(batchv1alpha1.AnnotationFencingToken, want))
	Expect(metav1.IsControlledBy(job, lj)).To(BeTrue(), "Job %s is not controlled by LockedJob %s", job.Name, lj.Name)
	for _, c := range job.Spec.Template.Spec.Containers {
		Expect(c.Env).To(ContainElements(
			corev1.EnvVar{Name: batchv1alpha1.EnvFencingToken, Value: want},
			corev1.EnvVar{Name: batchv1alpha1.EnvLock, Value: lj.Spec.Lock.Name},
			corev1.EnvVar{Name: batchv1alpha1.EnvHolder, Value: lj.Status.Holder},
		))
	}
	return fence
}

// ---------------------------------------------------------------- diagnostics

var _ = AfterEach(func() {
	if !CurrentSpecReport().Failed() {
		return
	}
	suiteFailed.Store(true)
	dumpDiagnostics()
})

// dumpDiagnostics prints what is needed to understand a failure: the manager's
// log tail, all Events, and the scenario's LockedJobs, Jobs and pods.
func dumpDiagnostics() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w := GinkgoWriter
	s := current
	if s == nil {
		return
	}
	_, _ = fmt.Fprintf(w, "\n===== diagnostics for scenario %s (namespace %s) =====\n", s.id, s.ns)
	if s.mgr != nil {
		_, _ = fmt.Fprintf(w, "----- %s log tail (%s) -----\n%s\n", s.mgr.Name, s.mgr.LogPath, s.mgr.LogTail(80))
	}
	if s.deployed != nil {
		_, _ = fmt.Fprintf(w, "----- in-cluster manager log tail -----\n%s\n", s.deployed.managerLogTail(ctx, 80))
	}
	var events corev1.EventList
	if err := suite.k8s.List(ctx, &events); err == nil {
		sortEvents(events.Items)
		_, _ = fmt.Fprintf(w, "----- events (all namespaces, by time) -----\n")
		for _, e := range events.Items {
			_, _ = fmt.Fprintf(w, "%s %-20s %-8s %-18s %s/%s: %s\n", eventTime(e).Format("15:04:05.000"), e.Namespace, e.Type,
				e.Reason, e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Message)
		}
	} else {
		_, _ = fmt.Fprintf(w, "list events: %v\n", err)
	}
	var ljs batchv1alpha1.LockedJobList
	if err := suite.k8s.List(ctx, &ljs, client.InNamespace(s.ns)); err == nil {
		_, _ = fmt.Fprintf(w, "----- LockedJobs in %s -----\n", s.ns)
		for _, lj := range ljs.Items {
			_, _ = fmt.Fprintf(w, "%s phase=%s fence=%d job=%s holder=%s blockedBy=%s queue=%v message=%q\n", lj.Name, lj.Status.Phase,
				deref(lj.Status.FencingToken), lj.Status.JobName, lj.Status.Holder, lj.Status.BlockedBy, lj.Status.QueuePosition, lj.Status.Message)
			for _, c := range lj.Status.Conditions {
				_, _ = fmt.Fprintf(w, "    %s=%s %s: %s\n", c.Type, c.Status, c.Reason, c.Message)
			}
		}
	}
	var jobs batchv1.JobList
	if err := suite.k8s.List(ctx, &jobs, client.InNamespace(s.ns)); err == nil {
		_, _ = fmt.Fprintf(w, "----- Jobs in %s -----\n", s.ns)
		for _, j := range jobs.Items {
			_, _ = fmt.Fprintf(w, "%s created=%s start=%v completion=%v active=%d succeeded=%d failed=%d suspend=%v conditions=%v lock=%q guard=%q fence=%q finalizers=%v\n",
				j.Name, j.CreationTimestamp.Format(time.TimeOnly), j.Status.StartTime, j.Status.CompletionTime, j.Status.Active,
				j.Status.Succeeded, j.Status.Failed, j.Spec.Suspend != nil && *j.Spec.Suspend, jobConditions(j),
				j.Labels[batchv1alpha1.LabelGuardLock], j.Annotations[batchv1alpha1.AnnotationGuard],
				j.Annotations[batchv1alpha1.AnnotationFencingToken], j.Finalizers)
		}
	}
	var pods corev1.PodList
	if err := suite.k8s.List(ctx, &pods, client.InNamespace(s.ns)); err == nil {
		_, _ = fmt.Fprintf(w, "----- pods in %s -----\n", s.ns)
		for _, p := range pods.Items {
			_, _ = fmt.Fprintf(w, "%s phase=%s node=%s ip=%s deleting=%v finalizers=%v\n", p.Name, p.Status.Phase, p.Spec.NodeName,
				p.Status.PodIP, p.DeletionTimestamp != nil, p.Finalizers)
		}
	}
	_, _ = fmt.Fprintf(w, "----- Redis keys with prefix %s -----\n", s.prefix)
	for i, c := range s.rdb {
		keys, err := c.Keys(ctx, s.prefix+"*").Result()
		_, _ = fmt.Fprintf(w, "node %d %s: %v %v\n", i, s.nodes[i].Addr(), keys, err)
	}
	_, _ = fmt.Fprintf(w, "===== end of diagnostics =====\n")
}

func jobConditions(j batchv1.Job) []string {
	var out []string
	for _, c := range j.Status.Conditions {
		out = append(out, string(c.Type)+"="+string(c.Status))
	}
	return out
}

func eventTime(e corev1.Event) time.Time {
	for _, t := range []time.Time{e.LastTimestamp.Time, e.EventTime.Time, e.FirstTimestamp.Time} {
		if !t.IsZero() {
			return t
		}
	}
	if e.Series != nil {
		return e.Series.LastObservedTime.Time
	}
	return e.CreationTimestamp.Time
}

func sortEvents(events []corev1.Event) {
	slices.SortStableFunc(events, func(a, b corev1.Event) int { return eventTime(a).Compare(eventTime(b)) })
}

// ---------------------------------------------------------------- measurements

var (
	measureMu    sync.Mutex
	measurements []string
)

// measure records a number for the summary printed at the end of the suite
// (and as a report entry of the current spec).
func measure(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	AddReportEntry("measurement", msg)
	logf("MEASURED %s", msg)
	measureMu.Lock()
	measurements = append(measurements, msg)
	measureMu.Unlock()
}

func printMeasurements() {
	measureMu.Lock()
	defer measureMu.Unlock()
	_, _ = fmt.Fprintf(GinkgoWriter, "\n===== measurements =====\n")
	for _, m := range measurements {
		_, _ = fmt.Fprintf(GinkgoWriter, "%s\n", m)
	}
	_, _ = fmt.Fprintf(GinkgoWriter, "suite total: %s\n", since(suite.start))
}

// ---------------------------------------------------------------- small helpers

func logf(format string, args ...any) {
	_, _ = fmt.Fprintf(GinkgoWriter, "%s  "+format+"\n", append([]any{time.Now().Format("15:04:05.000")}, args...)...)
}

func since(t time.Time) time.Duration { return time.Since(t).Round(time.Millisecond) }

func ms(d time.Duration) string { return d.Round(time.Millisecond).String() }

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

func names(ljs []batchv1alpha1.LockedJob) []string {
	var out []string
	for _, lj := range ljs {
		out = append(out, lj.Name+"("+string(lj.Status.Phase)+")")
	}
	return out
}

func isNotFound(err error) bool { return apierrors.IsNotFound(err) }
