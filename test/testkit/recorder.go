package testkit

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

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
// what changed meanwhile.
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
	jobs := factory.Batch().V1().Jobs().Informer()
	pods := factory.Core().V1().Pods().Informer()
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
