//go:build fault

package fault

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
)

// recorder watches the Jobs and pods of one cluster in the suite's namespaces
// and stamps each transition with the local clock when its watch event
// arrives. Both clusters' recorders run in the test process, so their stamps
// share one clock and intervals of the two clusters compare directly. A stamp
// trails the API server by the watch latency (a few ms); while a cluster's API
// server is down, its transitions are seen when it is back, which makes a pod
// look Running longer, never shorter: the checker errs towards overlaps.
type recorder struct {
	cluster string
	mu      sync.Mutex
	jobs    map[string]*jobRec // by UID
	pods    map[string]*podRec // by UID
}

type jobRec struct {
	Namespace, Name, UID, LockedJob string
	Fence                           int64
	Slot                            int
	Added, Finished                 time.Time
}

type podRec struct {
	Namespace, Name, JobUID          string
	Fence                            int64
	Slot                             int
	HasSlot                          bool // the pod carries the slot annotation
	Added, Running, Stopped, Deleted time.Time
	Terminating                      time.Time // deletionTimestamp first seen
}

// newRecorder starts informers on the Jobs and pods of every namespace; they
// end with ctx. Informers, not bare watches: after an API server restart a
// watch may resume from a resourceVersion the new server no longer serves,
// and an informer then lists again and reports what changed meanwhile.
func newRecorder(ctx context.Context, c *cluster) (*recorder, error) {
	r := &recorder{cluster: c.name, jobs: map[string]*jobRec{}, pods: map[string]*podRec{}}
	factory := informers.NewSharedInformerFactory(c.cs, 0)
	jobs := factory.Batch().V1().Jobs().Informer()
	pods := factory.Core().V1().Pods().Informer()
	if _, err := jobs.AddEventHandler(handler(func(t watch.EventType, job *batchv1.Job) { r.onJob(t, job, time.Now()) })); err != nil {
		return nil, err
	}
	if _, err := pods.AddEventHandler(handler(func(t watch.EventType, pod *corev1.Pod) { r.onPod(t, pod, time.Now()) })); err != nil {
		return nil, err
	}
	factory.Start(ctx.Done())
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return nil, fmt.Errorf("cluster %s: %v informer did not sync", c.name, typ)
		}
	}
	return r, nil
}

// handler turns informer callbacks into watch event types; a deletion the
// informer only learnt from a relist arrives wrapped in a tombstone.
func handler[T any](on func(watch.EventType, T)) cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if o, ok := obj.(T); ok {
				on(watch.Added, o)
			}
		},
		UpdateFunc: func(_, obj any) {
			if o, ok := obj.(T); ok {
				on(watch.Modified, o)
			}
		},
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if o, ok := obj.(T); ok {
				on(watch.Deleted, o)
			}
		},
	}
}

func ours(namespace string) bool { return strings.HasPrefix(namespace, namespacePrefix) }

func fenceOf(annotations map[string]string) int64 {
	f, _ := strconv.ParseInt(annotations[batchv1alpha1.AnnotationFencingToken], 10, 64)
	return f
}

// slotOf reads the semaphore slot a Job or pod runs in; ok is false without the annotation.
func slotOf(annotations map[string]string) (slot int, ok bool) {
	v, ok := annotations[batchv1alpha1.AnnotationSlot]
	if !ok {
		return 0, false
	}
	slot, err := strconv.Atoi(v)
	return slot, err == nil
}

func (r *recorder) onJob(t watch.EventType, job *batchv1.Job, now time.Time) {
	if !ours(job.Namespace) {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	rec, ok := r.jobs[string(job.UID)]
	if !ok {
		rec = &jobRec{Namespace: job.Namespace, Name: job.Name, UID: string(job.UID),
			LockedJob: job.Annotations[batchv1alpha1.AnnotationLockedJob], Fence: fenceOf(job.Annotations), Added: now}
		rec.Slot, _ = slotOf(job.Annotations)
		r.jobs[rec.UID] = rec
	}
	finished := t == watch.Deleted || (job.Spec.Suspend != nil && *job.Spec.Suspend)
	for _, c := range job.Status.Conditions {
		if c.Status == corev1.ConditionTrue && (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) {
			finished = true
		}
	}
	if finished && rec.Finished.IsZero() {
		rec.Finished = now
	}
}

func (r *recorder) onPod(t watch.EventType, pod *corev1.Pod, now time.Time) {
	if !ours(pod.Namespace) {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	rec, ok := r.pods[string(pod.UID)]
	if !ok {
		rec = &podRec{Namespace: pod.Namespace, Name: pod.Name, Fence: fenceOf(pod.Annotations), Added: now}
		rec.Slot, rec.HasSlot = slotOf(pod.Annotations)
		if ref := metav1.GetControllerOf(pod); ref != nil {
			rec.JobUID = string(ref.UID)
		}
		r.pods[string(pod.UID)] = rec
	}
	switch pod.Status.Phase {
	case corev1.PodRunning:
		if rec.Running.IsZero() {
			rec.Running = now
		}
	case corev1.PodSucceeded, corev1.PodFailed:
		if rec.Stopped.IsZero() {
			rec.Stopped = now
		}
	}
	if pod.DeletionTimestamp != nil && rec.Terminating.IsZero() {
		rec.Terminating = now
	}
	// A terminating pod still runs (its containers get SIGTERM and a grace
	// period); it counts as stopped only once it is gone.
	if t == watch.Deleted && rec.Deleted.IsZero() {
		rec.Deleted = now
	}
}

// history returns what was recorded in namespace: the Jobs, and the Running
// interval of every pod that ran, ending at the first of Succeeded/Failed/
// deleted or, for a pod still running, at now.
func (r *recorder) history(namespace string, now time.Time) ([]jobEntry, []podSpan) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var jobs []jobEntry
	for _, j := range r.jobs {
		if j.Namespace != namespace {
			continue
		}
		jobs = append(jobs, jobEntry{Cluster: r.cluster, Namespace: j.Namespace, Name: j.Name, UID: j.UID,
			LockedJob: j.LockedJob, Fence: j.Fence, Slot: j.Slot, Added: j.Added, Finished: j.Finished})
	}
	var pods []podSpan
	for _, p := range r.pods {
		if p.Namespace != namespace || p.Running.IsZero() {
			continue
		}
		end := now
		for _, t := range []time.Time{p.Stopped, p.Deleted} {
			if !t.IsZero() && t.Before(end) {
				end = t
			}
		}
		span := podSpan{Cluster: r.cluster, Namespace: p.Namespace, Name: p.Name, JobUID: p.JobUID, Fence: p.Fence,
			Slot: p.Slot, Start: p.Running, End: end, Terminating: p.Terminating}
		if j, ok := r.jobs[p.JobUID]; ok {
			span.Job, span.LockedJob = j.Name, j.LockedJob
			if span.Fence == 0 {
				span.Fence = j.Fence
			}
			if !p.HasSlot {
				span.Slot = j.Slot
			}
		}
		pods = append(pods, span)
	}
	return jobs, pods
}

// podsSettled reports whether every pod seen in namespace has stopped or is
// gone, so the history holds whole intervals.
func (r *recorder) podsSettled(namespace string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.pods {
		if p.Namespace == namespace && p.Stopped.IsZero() && p.Deleted.IsZero() {
			return false
		}
	}
	return true
}

// runningPods counts the pods of the named LockedJob's Jobs that are Running now.
func (r *recorder) runningPods(namespace, lockedJob string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, p := range r.pods {
		j, ok := r.jobs[p.JobUID]
		if ok && p.Namespace == namespace && j.LockedJob == lockedJob && !p.Running.IsZero() && p.Stopped.IsZero() && p.Deleted.IsZero() {
			n++
		}
	}
	return n
}

// terminatingPods counts the pods in namespace that are being deleted but not gone.
func (r *recorder) terminatingPods(namespace string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, p := range r.pods {
		if p.Namespace == namespace && !p.Terminating.IsZero() && p.Deleted.IsZero() {
			n++
		}
	}
	return n
}
