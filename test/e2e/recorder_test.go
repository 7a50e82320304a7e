//go:build e2e

package e2e

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"time"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
)

// recorder watches the Jobs and pods of one namespace and stamps every
// transition with the local clock when its watch event arrives. Job and pod
// timestamps in the API have 1-second precision; these have the precision of
// the watch (a few ms), and because both the transition and the operator's
// reaction arrive on the same kind of stream, differences between them are
// accurate even though each stamp trails the API server by the watch latency.
type recorder struct {
	mu    sync.Mutex
	jobs  map[string]*jobRec
	pods  map[string]*podRec
	order []string // Job names in the order they were first seen
}

type jobRec struct {
	Name      string
	LockedJob string // value of the batch.lockedjob.dev/lockedjob label
	Fence     int64  // from the fencing-token annotation
	Added     time.Time
	Complete  time.Time // first seen with condition Complete=True
	Failed    time.Time // first seen with condition Failed=True
	Suspended time.Time // first seen with spec.suspend=true
	Deleted   time.Time
	Job       *batchv1.Job // latest version seen
}

// Finished is when the Job was first seen Complete or Failed (zero if not).
func (j jobRec) Finished() time.Time {
	if !j.Complete.IsZero() {
		return j.Complete
	}
	return j.Failed
}

type podRec struct {
	Name      string
	Job       string // value of the job-name label
	Added     time.Time
	Running   time.Time
	Succeeded time.Time
	Failed    time.Time
	Deleted   time.Time
	Pod       *corev1.Pod
}

// newRecorder starts watching ns; the watches end with ctx.
func newRecorder(ctx context.Context, ns string) *recorder {
	r := &recorder{jobs: map[string]*jobRec{}, pods: map[string]*podRec{}}
	jobs, err := suite.cs.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{})
	Expect(err).NotTo(HaveOccurred())
	pods, err := suite.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	Expect(err).NotTo(HaveOccurred())
	jw, err := watchtools.NewRetryWatcherWithContext(ctx, jobs.ResourceVersion, &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return suite.cs.BatchV1().Jobs(ns).Watch(ctx, o)
		},
	})
	Expect(err).NotTo(HaveOccurred())
	pw, err := watchtools.NewRetryWatcherWithContext(ctx, pods.ResourceVersion, &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return suite.cs.CoreV1().Pods(ns).Watch(ctx, o)
		},
	})
	Expect(err).NotTo(HaveOccurred())
	go func() {
		defer jw.Stop()
		for ev := range jw.ResultChan() {
			if job, ok := ev.Object.(*batchv1.Job); ok {
				r.onJob(ev.Type, job, time.Now())
			}
		}
	}()
	go func() {
		defer pw.Stop()
		for ev := range pw.ResultChan() {
			if pod, ok := ev.Object.(*corev1.Pod); ok {
				r.onPod(ev.Type, pod, time.Now())
			}
		}
	}()
	go func() {
		<-ctx.Done()
		jw.Stop()
		pw.Stop()
	}()
	return r
}

func (r *recorder) onJob(t watch.EventType, job *batchv1.Job, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rec, ok := r.jobs[job.Name]
	if !ok {
		rec = &jobRec{Name: job.Name, LockedJob: job.Annotations[batchv1alpha1.AnnotationLockedJob], Added: now}
		rec.Fence, _ = strconv.ParseInt(job.Annotations[batchv1alpha1.AnnotationFencingToken], 10, 64)
		r.jobs[job.Name] = rec
		r.order = append(r.order, job.Name)
	}
	rec.Job = job
	for _, c := range job.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		if c.Type == batchv1.JobComplete && rec.Complete.IsZero() {
			rec.Complete = now
		}
		if c.Type == batchv1.JobFailed && rec.Failed.IsZero() {
			rec.Failed = now
		}
	}
	if job.Spec.Suspend != nil && *job.Spec.Suspend && rec.Suspended.IsZero() {
		rec.Suspended = now
	}
	if t == watch.Deleted && rec.Deleted.IsZero() {
		rec.Deleted = now
	}
}

func (r *recorder) onPod(t watch.EventType, pod *corev1.Pod, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rec, ok := r.pods[pod.Name]
	if !ok {
		rec = &podRec{Name: pod.Name, Job: pod.Labels[batchv1.JobNameLabel], Added: now}
		r.pods[pod.Name] = rec
	}
	rec.Pod = pod
	switch pod.Status.Phase {
	case corev1.PodRunning:
		if rec.Running.IsZero() {
			rec.Running = now
		}
	case corev1.PodSucceeded:
		if rec.Succeeded.IsZero() {
			rec.Succeeded = now
		}
	case corev1.PodFailed:
		if rec.Failed.IsZero() {
			rec.Failed = now
		}
	}
	if t == watch.Deleted && rec.Deleted.IsZero() {
		rec.Deleted = now
	}
}

// Jobs returns copies of the Jobs seen, in the order they were first seen.
func (r *recorder) Jobs() []jobRec {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]jobRec, 0, len(r.order))
	for _, n := range r.order {
		out = append(out, *r.jobs[n])
	}
	return out
}

// JobsOf returns the Jobs created for the LockedJob named lj.
func (r *recorder) JobsOf(lj string) []jobRec {
	return slices.DeleteFunc(r.Jobs(), func(j jobRec) bool { return j.LockedJob != lj })
}

// Job returns the record of the named Job (the zero record if not seen).
func (r *recorder) Job(name string) jobRec {
	r.mu.Lock()
	defer r.mu.Unlock()
	if j, ok := r.jobs[name]; ok {
		return *j
	}
	return jobRec{Name: name}
}

// PodsOf returns the pods seen for the named Job.
func (r *recorder) PodsOf(job string) []podRec {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []podRec
	for _, p := range r.pods {
		if p.Job == job {
			out = append(out, *p)
		}
	}
	slices.SortFunc(out, func(a, b podRec) int { return a.Added.Compare(b.Added) })
	return out
}

// PodsGone returns when the last pod of job was seen deleted, and whether all
// its pods (at least one) are gone.
func (r *recorder) PodsGone(job string) (time.Time, bool) {
	pods := r.PodsOf(job)
	if len(pods) == 0 {
		return time.Time{}, false
	}
	var last time.Time
	for _, p := range pods {
		if p.Deleted.IsZero() {
			return time.Time{}, false
		}
		if p.Deleted.After(last) {
			last = p.Deleted
		}
	}
	return last, true
}
