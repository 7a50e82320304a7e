package plugin

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/internal/locks"
)

// createGuardedJob creates a Job labelled for lock as the admission gate lets it in: suspended,
// with no fence. mutate may make it what the operator records later (held, released, ...).
func createGuardedJob(ns, name, lock string, mutate ...func(*batchv1.Job)) *batchv1.Job {
	GinkgoHelper()
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{batchv1alpha1.LabelGuardLock: lock}},
		Spec: batchv1.JobSpec{Suspend: ptr.To(true), Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers:    []corev1.Container{{Name: "work", Image: "busybox"}},
		}}},
	}
	for _, m := range mutate {
		m(job)
	}
	Expect(k8sClient.Create(ctx, job)).To(Succeed())
	return job
}

// recordJobEvent writes an Event about a guarded Job as the operator's recorder does.
func recordJobEvent(job *batchv1.Job, t time.Time, eventType, reason, note string) {
	GinkgoHelper()
	Expect(k8sClient.Create(ctx, &eventsv1.Event{
		ObjectMeta: metav1.ObjectMeta{Namespace: job.Namespace, GenerateName: job.Name + "-"},
		EventTime:  metav1.NewMicroTime(t),
		Regarding:  corev1.ObjectReference{APIVersion: "batch/v1", Kind: "Job", Namespace: job.Namespace, Name: job.Name, UID: job.UID},
		Type:       eventType, Reason: reason, Action: "Test", Note: note,
		ReportingController: "lockedjob", ReportingInstance: "lockedjob-envtest",
	})).To(Succeed())
}

// jobHolderName is the operator's holder name of a guarded Job in cluster "envtest".
func jobHolderName(job *batchv1.Job) string {
	return fmt.Sprintf("envtest/%s/job:%s/%s", job.Namespace, job.Name, string(job.UID)[:8])
}

var _ = Describe("kubectl lockedjob with guarded Jobs beside LockedJobs", Ordered, func() {
	// Lock "db": the LockedJob nightly holds it (fence 7) since 3m; the guarded Job migrate
	// (priority 5) waits first, the LockedJob report (position 2) next, the guarded Job cleanup
	// (priority -1) last. Lock "exports": the guarded Job export holds it (fence 12) and runs one
	// pod; the LockedJob late waits at 1. Lock "old": the guarded Job done ran and released it.
	// The Job bad carries the lock label with a priority that does not parse.
	var (
		ns                    string
		now                   time.Time
		nightly, report, late *batchv1alpha1.LockedJob
		migrate, export       *batchv1.Job
		done                  *batchv1.Job
		holdOf                = func(fence int64) func(*batchv1.Job) {
			return func(j *batchv1.Job) {
				j.Spec.Suspend = ptr.To(false)
				j.Annotations = map[string]string{batchv1alpha1.AnnotationGuard: string(batchv1alpha1.GuardHeld),
					batchv1alpha1.AnnotationFencingToken: strconv.FormatInt(fence, 10)}
			}
		}
		priority = func(p string) func(*batchv1.Job) {
			return func(j *batchv1.Job) {
				j.Annotations = map[string]string{batchv1alpha1.AnnotationGuardPriority: p}
			}
		}
	)

	BeforeAll(func() {
		now = time.Now().Truncate(time.Second)
		ns = newNamespace()
		nightly = createLockedJob(ns, "nightly", "db")
		report = createLockedJob(ns, "report", "db")
		migrate = createGuardedJob(ns, "migrate", "db", priority("5"))
		createGuardedJob(ns, "cleanup", "db", priority("-1"))
		setStatus(nightly, runningStatus(7, now.Add(-5*time.Minute), now.Add(-3*time.Minute), "nightly-7"))
		setStatus(report, waitingStatus("db", 2, holderName(nightly), now.Add(-time.Minute)))

		export = createGuardedJob(ns, "export", "exports", holdOf(12))
		export.Status.Active, export.Status.StartTime = 1, &metav1.Time{Time: now.Add(-time.Minute)}
		Expect(k8sClient.Status().Update(ctx, export)).To(Succeed())
		late = createLockedJob(ns, "late", "exports")
		setStatus(late, waitingStatus("exports", 1, jobHolderName(export), now.Add(-30*time.Second)))

		done = createGuardedJob(ns, "done", "old", func(j *batchv1.Job) {
			j.Spec.Suspend = ptr.To(false)
			j.Annotations = map[string]string{batchv1alpha1.AnnotationGuard: string(batchv1alpha1.GuardReleased), batchv1alpha1.AnnotationFencingToken: "4"}
		})
		createGuardedJob(ns, "bad", "db", priority("high"))
		createGuardedJob(ns, "plain", "db", func(j *batchv1.Job) { j.Labels = nil })

		recordJobEvent(migrate, now.Add(-40*time.Second), corev1.EventTypeNormal, "Waiting", "Waiting for lock db")
		recordJobEvent(done, now.Add(-2*time.Minute), corev1.EventTypeNormal, batchv1alpha1.ReasonJobComplete,
			"Job done completed; released lock old (fencing token 4)")
	})

	It("lists guarded Jobs as holders and waiters beside LockedJobs, each named with its kind, and warns of the one it cannot read", func() {
		res := runPlugin(now, "locks", "-n", ns)
		Expect(res.code).To(Equal(ExitOK), res.stderr)
		Expect(parseTable(res.stdout)).To(Equal([]map[string]string{
			{"LOCK": "db", "SCOPE": "Namespace", "NAMESPACE": ns, "IN USE": "1/1", "HOLDERS": "nightly (fence 7)", "HELD FOR": "3m",
				"WAITING": "3", "HEAD": "job/migrate", "LAST HANDOFF": "<none>"},
			{"LOCK": "exports", "SCOPE": "Namespace", "NAMESPACE": ns, "IN USE": "1/1", "HOLDERS": "job/export (fence 12)", "HELD FOR": "<none>",
				"WAITING": "1", "HEAD": "late", "LAST HANDOFF": "<none>"},
			{"LOCK": "old", "SCOPE": "Namespace", "NAMESPACE": ns, "IN USE": "0/1", "HOLDERS": "<none>", "HELD FOR": "<none>",
				"WAITING": "0", "HEAD": "<none>", "LAST HANDOFF": "<none>"},
		}))
		Expect(res.stderr).To(Equal(fmt.Sprintf("Warning: Job %s/bad carries the lock label but cannot be guarded, so it is left out: "+
			"annotation %s: \"high\" is not an integer from -1000 to 1000\n", ns, batchv1alpha1.AnnotationGuardPriority)))

		got, _ := locksJSON(now, ns)
		Expect(got.Items).To(HaveLen(3))
		Expect(got.Items[0].Head).To(Equal(&Ref{Kind: locks.KindJob, Namespace: ns, Name: "migrate"}))
		Expect(got.Items[0].Holder).To(Equal(&Holder{Kind: locks.KindLockedJob, Namespace: ns, Name: "nightly",
			FencingToken: ptr.To[int64](7), AcquiredAt: at(now.Add(-3 * time.Minute))}))
		Expect(got.Items[1].Holders).To(Equal([]Holder{{Kind: locks.KindJob, Namespace: ns, Name: "export", FencingToken: ptr.To[int64](12)}}))
		Expect(got.Items[1].Head).To(Equal(&Ref{Kind: locks.KindLockedJob, Namespace: ns, Name: "late"}))

		yamlRes := runPlugin(now, "locks", "-n", ns, "-o", "yaml")
		Expect(yamlRes.code).To(Equal(ExitOK), yamlRes.stderr)
		Expect(yamlRes.stdout).To(ContainSubstring("    kind: Job\n    name: export\n"))
	})

	It("explains a waiting guarded Job at the head: suspended by the gate, who holds the lock, nobody ahead", func() {
		res := runPlugin(now, "why", "job/migrate", "-n", ns)
		Expect(res.code).To(Equal(ExitOK), res.stderr)
		Expect(res.stdout).To(Equal(fmt.Sprintf(`Job %[1]s/migrate runs under lock db (scope Namespace, priority 5).
It is waiting, suspended by the admission gate until the operator holds the lock for it. The lock is held by nightly (fence 7), which has held it for 3m (since %[2]s).
A guarded Job records no place in line; those ahead of it are the waiters you can read, in the queue's order.
No waiter of this lock is ahead of it.
Last Events:
  AGE   TYPE     REASON    MESSAGE
  40s   Normal   Waiting   Waiting for lock db
`, ns, rfc3339(now.Add(-3*time.Minute)))))
	})

	It("lists the waiters ahead of a guarded Job by the one queue rule, LockedJobs and Jobs alike", func() {
		res := runPlugin(now, "why", "job/cleanup", "-n", ns, "--events", "0")
		Expect(res.code).To(Equal(ExitOK), res.stderr)
		Expect(res.stdout).To(Equal(fmt.Sprintf(`Job %[1]s/cleanup runs under lock db (scope Namespace, priority -1).
It is waiting, suspended by the admission gate until the operator holds the lock for it. The lock is held by nightly (fence 7), which has held it for 3m (since %[2]s).
A guarded Job records no place in line; those ahead of it are the waiters you can read, in the queue's order.
2 ahead of it, in the order the queue serves them (higher priority first, then older):
  1. job/migrate, priority 5
  2. report, priority 0, waiting for 60s
No Events (the API server keeps them for an hour by default).
`, ns, rfc3339(now.Add(-3*time.Minute)))))

		var e Explanation
		res = runPlugin(now, "why", "job/cleanup", "-n", ns, "-o", "json")
		Expect(res.code).To(Equal(ExitOK), res.stderr)
		Expect(json.Unmarshal([]byte(res.stdout), &e)).To(Succeed())
		Expect(e.Kind).To(Equal(locks.KindJob))
		Expect(e.Guard).To(Equal(guardWaiting))
		Expect(e.Ahead).To(Equal([]Waiter{
			{Kind: locks.KindJob, Namespace: ns, Name: "migrate", Priority: 5},
			{Kind: locks.KindLockedJob, Namespace: ns, Name: "report", Priority: 0, WaitingSince: at(now.Add(-time.Minute)), QueuePosition: ptr.To[int32](2)},
		}))
		Expect(e.Behind).To(BeZero())
	})

	It("puts a waiting guarded Job of higher priority ahead of a LockedJob in why of the LockedJob", func() {
		res := runPlugin(now, "why", "lockedjob/report", "-n", ns, "--events", "0")
		Expect(res.code).To(Equal(ExitOK), res.stderr)
		Expect(res.stdout).To(ContainSubstring("It is number 2 in line.\n1 ahead of it, in the order the queue serves them (higher priority first, then older):\n  1. job/migrate, priority 5\n"))
	})

	It("explains a guarded Job that holds the lock: its fence, its pods, the waiters after it; and names it as the holder to a LockedJob", func() {
		res := runPlugin(now, "why", "job/export", "-n", ns, "--events", "0")
		Expect(res.code).To(Equal(ExitOK), res.stderr)
		Expect(res.stdout).To(Equal(fmt.Sprintf(`Job %s/export runs under lock exports (scope Namespace, priority 0).
Its guard is Held: the operator holds the lock for it with fencing token 12.
It has 1 active, 0 succeeded and 0 failed pods.
1 waiting for the lock after it.
No Events (the API server keeps them for an hour by default).
`, ns)))

		res = runPlugin(now, "why", "late", "-n", ns, "--events", "0")
		Expect(res.code).To(Equal(ExitOK), res.stderr)
		Expect(res.stdout).To(ContainSubstring("It is Waiting. The lock is held by job/export (fence 12).\nIt is number 1 in line (next).\n"))
	})

	It("explains a released guarded Job, and one the operator cannot guard", func() {
		res := runPlugin(now, "why", "job/done", "-n", ns)
		Expect(res.code).To(Equal(ExitOK), res.stderr)
		Expect(res.stdout).To(Equal(fmt.Sprintf(`Job %s/done runs under lock old (scope Namespace, priority 0).
Its guard is Released: the Job ended and the operator released the lock.
It ran with fencing token 4.
It has 0 active, 0 succeeded and 0 failed pods.
Last Events:
  AGE   TYPE     REASON        MESSAGE
  2m    Normal   JobComplete   Job done completed; released lock old (fencing token 4)
`, ns)))

		res = runPlugin(now, "why", "job/bad", "-n", ns, "--events", "0")
		Expect(res.code).To(Equal(ExitOK), res.stderr)
		Expect(res.stdout).To(Equal(fmt.Sprintf(`Job %s/bad carries the label %s=db, but the operator cannot guard it: annotation %s: "high" is not an integer from -1000 to 1000.
It asks for no lock and is in no queue until its label and annotations parse (the admission gate refuses such a Job: this one came in without it).
No Events (the API server keeps them for an hour by default).
`, ns, batchv1alpha1.LabelGuardLock, batchv1alpha1.AnnotationGuardPriority)))
	})

	It("refuses a Job without the lock label, a Job it cannot find and a kind it does not explain", func() {
		res := runPlugin(now, "why", "job/plain", "-n", ns)
		Expect(res.code).To(Equal(ExitError))
		Expect(res.stderr).To(Equal(fmt.Sprintf("error: job plain is not a guarded Job: it has no label %s\n", batchv1alpha1.LabelGuardLock)))
		res = runPlugin(now, "why", "job/nope", "-n", ns)
		Expect(res.code).To(Equal(ExitError))
		Expect(res.stderr).To(Equal(fmt.Sprintf("error: job \"nope\" not found in namespace %s\n", ns)))
		res = runPlugin(now, "why", "pod/x", "-n", ns)
		Expect(res.code).To(Equal(ExitError))
		Expect(res.stderr).To(Equal("error: why explains LockedJobs (NAME or lockedjob/NAME) and guarded Jobs (job/NAME), not \"pod\"\n"))
	})
})

var _ = Describe("kubectl lockedjob with guarded Jobs on a Cluster-scoped lock", func() {
	It("shows the guarded Job that holds it in another namespace", func() {
		now := time.Now().Truncate(time.Second)
		ns1, ns2 := newNamespace(), newNamespace()
		holder := createGuardedJob(ns2, "holder", "shared-guarded", func(j *batchv1.Job) {
			j.Spec.Suspend = ptr.To(false)
			j.Annotations = map[string]string{batchv1alpha1.AnnotationGuardScope: "Cluster", batchv1alpha1.AnnotationGuard: string(batchv1alpha1.GuardHeld),
				batchv1alpha1.AnnotationFencingToken: "30"}
		})
		waiter := createLockedJob(ns1, "waiter", "shared-guarded", withClusterScope)
		setStatus(waiter, waitingStatus("shared-guarded", 1, jobHolderName(holder), now.Add(-time.Minute)))

		res := runPlugin(now, "locks", "-n", ns1)
		Expect(res.code).To(Equal(ExitOK), res.stderr)
		Expect(parseTable(res.stdout)).To(Equal([]map[string]string{{
			"LOCK": "shared-guarded", "SCOPE": "Cluster", "NAMESPACE": "", "IN USE": "1/1", "HOLDERS": ns2 + "/job/holder (fence 30)",
			"HELD FOR": "<none>", "WAITING": "1", "HEAD": ns1 + "/waiter", "LAST HANDOFF": "<none>",
		}}))
	})
})
