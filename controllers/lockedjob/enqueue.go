package lockedjob

import (
	"context"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	sreconcile "github.com/lockedjob/lockedjob/controllers/internal/reconcile"
)

// Enqueueing: the work-queue priorities and the event handlers that set them.

// namedLockedJob is the LockedJob named obj, to wake it through a channel source.
func namedLockedJob(obj types.NamespacedName) client.Object {
	lj := &batchv1alpha1.LockedJob{}
	lj.Namespace, lj.Name = obj.Namespace, obj.Name
	return lj
}

// enqueueAt enqueues the object of each generic event at priority p.
func enqueueAt(p int) handler.EventHandler {
	return handler.Funcs{GenericFunc: func(_ context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		atPriority(q, p).Add(reconcile.Request{NamespacedName: client.ObjectKeyFromObject(e.Object)})
	}}
}

// atPriority makes Add use priority p, when the controller's queue is a priority queue.
func atPriority(q workqueue.TypedRateLimitingInterface[reconcile.Request], p int) workqueue.TypedRateLimitingInterface[reconcile.Request] {
	pq, ok := q.(priorityqueue.PriorityQueue[reconcile.Request])
	if !ok {
		return q
	}
	return queueAt{PriorityQueue: pq, priority: p}
}

// queueAt raises every add to its priority. It overrides AddWithOpts too: controller-runtime's own
// handlers (EnqueueRequestForOwner among them) wrap the queue again and add through AddWithOpts
// with a priority of their own (none, or low for an unchanged object), which would undo ours.
type queueAt struct {
	priorityqueue.PriorityQueue[reconcile.Request]
	priority int
}

func (q queueAt) Add(r reconcile.Request) { q.AddWithOpts(priorityqueue.AddOpts{}, r) }

func (q queueAt) AddWithOpts(o priorityqueue.AddOpts, items ...reconcile.Request) {
	if o.Priority == nil || *o.Priority < q.priority {
		o.Priority = &q.priority
	}
	q.PriorityQueue.AddWithOpts(o, items...)
}

// jobEndedFirst passes Job events to the owning LockedJob, ahead of other work when the Job just
// finished: that pass releases the lock and hands it to the next waiter.
func jobEndedFirst(owner handler.EventHandler) handler.EventHandler {
	return handler.Funcs{
		CreateFunc:  owner.Create,
		DeleteFunc:  owner.Delete,
		GenericFunc: owner.Generic,
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if ended(e.ObjectNew) && !ended(e.ObjectOld) {
				q = atPriority(q, priorityJobEnded)
			}
			owner.Update(ctx, e, q)
		},
	}
}

func ended(o client.Object) bool {
	job, ok := o.(*batchv1.Job)
	return ok && sreconcile.JobFinished(job)
}

// Priorities in the controller's work queue (controller-runtime's priority queue; default 0). Under a
// burst the queue holds thousands of passes: the ones that a lock or a running Job waits on go first.
const (
	// priorityUrgent: a lock handed to a waiter (it is held for nobody until the waiter claims it),
	// or a lock lost or at risk (the Job must stop).
	priorityUrgent = 100
	// priorityJobEnded: a Job finished; its pass releases the lock and hands it on.
	priorityJobEnded = 50
)
