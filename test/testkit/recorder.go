package testkit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// RecorderOptions choose what a Recorder watches.
type RecorderOptions struct {
	// Namespace limits the watches to one namespace; empty watches every namespace.
	Namespace string
	// NamespacePrefix, when set, keeps only the objects of namespaces with this prefix: a suite
	// that creates a namespace per scenario watches them all from the start.
	NamespacePrefix string
}

// Recorder watches Jobs and pods and stamps every transition with the test's clock when its watch
// event arrives. The API's own Job and pod timestamps have 1-second precision; these have the
// watch's (a few ms). Every stamp trails the API server by the watch latency, and the operator's
// reactions arrive on the same kind of stream, so differences between stamps are accurate; and
// all recorders of one test share its clock, so the stamps of two clusters compare directly.
// While an API server is down its transitions are seen once it is back, which makes a pod look
// Running longer, never shorter: a checker of exclusion errs towards overlaps.
//
// It runs informers, not bare watches: after an API server restart a watch may resume from a
// resourceVersion the new server no longer serves, and an informer then lists again and reports
// what changed meanwhile. Their lists and watches are tried again every few milliseconds while the
// API server does not answer (unbackedOff), so a recorder is back on the stream within that of the
// server's return, not after a reflector's backoff of up to seconds: an operator that reacts to a
// pod's success on its own stream must not release and see the next holder start before the
// recorder sees that pod end.
type Recorder struct {
	keep func(namespace string) bool

	mu sync.Mutex
	j  *journal
}

// NewRecorder starts recording and returns once the informers have synced; they end with ctx.
func NewRecorder(ctx context.Context, cs kubernetes.Interface, o RecorderOptions) (*Recorder, error) {
	r := &Recorder{j: newJournal(), keep: func(ns string) bool { return strings.HasPrefix(ns, o.NamespacePrefix) }}
	var opts []informers.SharedInformerOption
	if o.Namespace != "" {
		opts = append(opts, informers.WithNamespace(o.Namespace))
	}
	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0, opts...)
	jobs := factory.InformerFor(&batchv1.Job{}, func(cs kubernetes.Interface, _ time.Duration) cache.SharedIndexInformer {
		c := cs.BatchV1().Jobs(o.Namespace)
		return unbackedOffInformer(cs, &batchv1.Job{}, c.List, c.Watch)
	})
	pods := factory.InformerFor(&corev1.Pod{}, func(cs kubernetes.Interface, _ time.Duration) cache.SharedIndexInformer {
		c := cs.CoreV1().Pods(o.Namespace)
		return unbackedOffInformer(cs, &corev1.Pod{}, c.List, c.Watch)
	})
	if _, err := jobs.AddEventHandler(handler(stamped(r, (*journal).onJob))); err != nil {
		return nil, fmt.Errorf("recorder: watch Jobs: %w", err)
	}
	if _, err := pods.AddEventHandler(handler(stamped(r, (*journal).onPod))); err != nil {
		return nil, fmt.Errorf("recorder: watch pods: %w", err)
	}
	factory.Start(ctx.Done())
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return nil, fmt.Errorf("recorder: %v informer did not sync", typ)
		}
	}
	return r, nil
}

// History returns a copy of what was recorded so far.
func (r *Recorder) History() History {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.j.history()
}

// stamped turns a journal method into an informer callback. The clock is read before the lock is
// taken, so a busy History does not delay the stamp.
func stamped[T interface{ GetNamespace() string }](r *Recorder, on func(*journal, watch.EventType, T, time.Time)) func(watch.EventType, T) {
	return func(t watch.EventType, obj T) {
		now := time.Now()
		if !r.keep(obj.GetNamespace()) {
			return
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		on(r.j, t, obj, now)
	}
}

// handler turns informer callbacks into watch event types; a deletion the informer only learnt
// from a relist arrives wrapped in a tombstone.
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

// retryEvery is how often a recorder asks an API server that does not answer again.
const retryEvery = 10 * time.Millisecond

// unbackedOffInformer is an informer of one kind whose lists and watches wait for an API server
// that does not answer (a refused connection, a 5xx, a 429) by asking again every retryEvery,
// instead of failing to the reflector, which backs off from 0.8 s, doubling, with jitter. Any other
// answer (an expired resourceVersion among them, so the reflector lists again) passes through.
func unbackedOffInformer[L runtime.Object](cs kubernetes.Interface, obj runtime.Object,
	list func(context.Context, metav1.ListOptions) (L, error),
	watchFrom func(context.Context, metav1.ListOptions) (watch.Interface, error),
) cache.SharedIndexInformer {
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return untilAnswered(ctx, func() (runtime.Object, error) { return list(ctx, o) })
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return untilAnswered(ctx, func() (watch.Interface, error) { return watchFrom(ctx, o) })
		},
	}
	// A fake clientset says it does not stream the initial list (WatchList); the reflector then lists.
	return cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(lw, cs), obj, 0,
		cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
}

// untilAnswered calls call until the API server answers it (unanswered), or ctx ends.
func untilAnswered[T any](ctx context.Context, call func() (T, error)) (T, error) {
	for {
		v, err := call()
		if err == nil || !unanswered(err) {
			return v, err
		}
		select {
		case <-ctx.Done():
			return v, err
		case <-time.After(retryEvery):
		}
	}
}

// unanswered reports whether err says the API server was not there to answer: no status from it
// (a refused or broken connection), or one that asks to come back (5xx, 429).
func unanswered(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return true
	}
	code := status.Status().Code
	return code >= 500 || code == 429
}
