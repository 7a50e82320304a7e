package kueue_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/controllers"
	"github.com/lockedjob/lockedjob/controllers/lockview"
	"github.com/lockedjob/lockedjob/internal/lockbook"
	"github.com/lockedjob/lockedjob/internal/locks"
	"github.com/lockedjob/lockedjob/internal/redislock"
	"github.com/lockedjob/lockedjob/internal/testutil/kueuerun"
	"github.com/lockedjob/lockedjob/internal/testutil/redisserver"
)

// The operator's AdmissionCheck on real parts: Kueue's manager, a real kube-apiserver, a real
// redis-server, and the operator's reconcilers as controllers.Setup wires them. No
// kube-controller-manager runs, so no pod is ever created and a Job ends when the test writes its
// status, as the Job controller would.

// startOperator runs the guarded-Job and AdmissionCheck reconcilers and the per-lock view over a
// fresh Redis until the test ends, and returns a client of that Redis.
func startOperator(t *testing.T, mutate ...func(*controllers.Options)) *redis.Client {
	t.Helper()
	srv := redisserver.Start(t)
	startOperatorOn(t, []string{srv.Addr()}, mutate...)
	return srv.Client(t)
}

// startOperatorOn runs the guarded-Job and AdmissionCheck reconcilers and the per-lock view (which
// keeps a Lock's permits in Redis), as controllers.Setup wires them, over the Redis at addrs (more
// than one is Redlock), with the options mutate changes, until stop or the test's end. stop ends it
// as a crash would, as far as Redis is concerned: renewals stop and no lock is released.
func startOperatorOn(t *testing.T, addrs []string, mutate ...func(*controllers.Options)) (stop func()) {
	t.Helper()
	var nodes []redis.UniversalClient
	for _, addr := range addrs {
		nodes = append(nodes, redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1}))
	}
	opts := []redislock.Option{redislock.WithKeyPrefix("lockedjob:"), redislock.WithReleaseNotifications("lockedjob:released")}
	lockClient, err := redislock.New(nodes[0], opts...)
	if len(nodes) > 1 {
		lockClient, err = redislock.NewRedlock(nodes, opts...)
	}
	if err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := batchv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	mgr, err := ctrl.NewManager(restConfig, ctrl.Options{
		Scheme:     scheme,
		Cache:      controllers.CacheOptions(),
		Metrics:    metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	book := lockbook.New(lockClient)
	ctx, cancel := context.WithCancel(context.Background())
	o := controllers.Options{
		Identity:    locks.Identity{ClusterID: "kueue", TokenKey: []byte("kueue-test-token-key-0123456789")},
		Controllers: []string{controllers.GuardedJob, controllers.KueueCheck, controllers.LockView},
		// The view writes a Lock's status soon after a change, so a test reads it within its waits.
		View: lockview.Timing{MinInterval: 200 * time.Millisecond, Resync: time.Second, Announce: 200 * time.Millisecond},
	}
	for _, m := range mutate {
		m(&o)
	}
	if err := controllers.Setup(ctx, mgr, book, o); err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("the operator's manager: %v", err)
			}
			book.Stop()
		})
	}
	t.Cleanup(stop)
	return stop
}

// operatorCheck creates an AdmissionCheck of lockedjob's controller name and waits until the
// operator set it Active.
func operatorCheck(t *testing.T, name string) {
	t.Helper()
	check := kueuerun.Object("AdmissionCheck", "", name, map[string]any{"controllerName": lockController})
	create(t, check)
	eventually(t, "AdmissionCheck "+name+" is Active", func() (bool, string) {
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(check), check); err != nil {
			return false, err.Error()
		}
		c := condition(check, "Active")
		return c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == check.GetGeneration(),
			fmt.Sprintf("Active = %+v", c)
	})
}

// lockedQueuedJob is a Job of Kueue's queue that also asks for lock db.
func lockedQueuedJob(ns, queue string) *batchv1.Job {
	job := queuedJob(ns, queue)
	job.GenerateName = "locked-"
	job.Labels[batchv1alpha1.LabelGuardLock] = "db"
	return job
}

// guardedJob is a guarded Job of lock outside Kueue, created suspended as the admission gate
// would (this suite runs no gate).
func guardedJob(ns, lock string) *batchv1.Job {
	job := queuedJob(ns, "")
	job.GenerateName = "guarded-"
	job.Labels = map[string]string{batchv1alpha1.LabelGuardLock: lock}
	job.Spec.Suspend = ptr.To(true)
	return job
}

// waitsUnfenced says whether job waits: suspended, with no fence recorded on it.
func waitsUnfenced(job *batchv1.Job) (bool, string) {
	_, fenced := job.Annotations[batchv1alpha1.AnnotationFencingToken]
	return job.Spec.Suspend != nil && *job.Spec.Suspend && !fenced,
		fmt.Sprintf("spec.suspend %v, annotations %v", job.Spec.Suspend, job.Annotations)
}

// fenceOf waits until job carries the guard state Held with its pod template fence (the
// guarded-Job reconciler's write, or Kueue's from our check) and returns the fence.
func fenceOf(t *testing.T, job *batchv1.Job) int64 {
	t.Helper()
	eventually(t, "Job "+job.Name+" runs under its lock", func() (bool, string) {
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(job), job); err != nil {
			return false, err.Error()
		}
		_, fenced := job.Spec.Template.Annotations[fencingTokenAnnotation]
		return job.Annotations[batchv1alpha1.AnnotationGuard] == string(batchv1alpha1.GuardHeld) && fenced &&
				job.Spec.Suspend != nil && !*job.Spec.Suspend,
			fmt.Sprintf("annotations %v, pod template annotations %v, spec.suspend %v", job.Annotations, job.Spec.Template.Annotations, job.Spec.Suspend)
	})
	fence, err := strconv.ParseInt(job.Spec.Template.Annotations[fencingTokenAnnotation], 10, 64)
	if err != nil {
		t.Fatalf("Job %s: fence %q: %v", job.Name, job.Spec.Template.Annotations[fencingTokenAnnotation], err)
	}
	if recorded := job.Annotations[batchv1alpha1.AnnotationFencingToken]; recorded != strconv.FormatInt(fence, 10) {
		t.Fatalf("Job %s runs with fence %d and records %q", job.Name, fence, recorded)
	}
	return fence
}

// completeJob writes the status the Job controller writes when a Job succeeds.
func completeJob(t *testing.T, job *batchv1.Job) {
	t.Helper()
	eventually(t, "Job "+job.Name+" is marked complete", func() (bool, string) {
		j := &batchv1.Job{}
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(job), j); err != nil {
			return false, err.Error()
		}
		now := metav1.Now()
		j.Status.StartTime, j.Status.CompletionTime, j.Status.Succeeded = &now, &now, 1
		j.Status.Conditions = []batchv1.JobCondition{
			{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: now},
		}
		if err := k8s.Status().Update(context.Background(), j); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
}

// guardOf waits until job's guard annotation is want.
func guardOf(t *testing.T, job *batchv1.Job, want batchv1alpha1.GuardState) {
	t.Helper()
	eventually(t, "Job "+job.Name+" records "+string(want), func() (bool, string) {
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(job), job); err != nil {
			return false, err.Error()
		}
		return job.Annotations[batchv1alpha1.AnnotationGuard] == string(want), fmt.Sprintf("annotations %v, finalizers %v", job.Annotations, job.Finalizers)
	})
}

// A Job of a Kueue queue that asks for a lock another holder has waits on our check; the release
// lets Kueue admit it with a higher fence in its pod template; its end releases the lock.
func TestOperatorAdmitsAKueueJobUnderItsLock(t *testing.T) {
	ctx := context.Background()
	rdb := startOperator(t)
	operatorCheck(t, "lock-handoff")
	ns := queues(t, "handoff", "lock-handoff")

	holder := guardedJob(ns, "db")
	create(t, holder)
	first := fenceOf(t, holder)

	job := lockedQueuedJob(ns, "handoff")
	create(t, job)
	wl := workloadOf(t, job)
	eventually(t, "Workload "+wl.GetName()+" has quota and our check Pending", func() (bool, string) {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(wl), wl); err != nil {
			return false, err.Error()
		}
		c := condition(wl, "QuotaReserved")
		return c != nil && c.Status == metav1.ConditionTrue && checkState(wl, "lock-handoff") == "Pending",
			fmt.Sprintf("QuotaReserved = %+v, check %q", c, checkState(wl, "lock-handoff"))
	})
	consistently(t, "the Job waits for the lock, suspended and unfenced", func() (bool, string) {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(wl), wl); err != nil {
			return false, err.Error()
		}
		if s := checkState(wl, "lock-handoff"); s != "Pending" {
			return false, "check " + s
		}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(job), job); err != nil {
			return false, err.Error()
		}
		return waitsUnfenced(job)
	})

	completeJob(t, holder)
	second := fenceOf(t, job)
	if second <= first {
		t.Fatalf("Kueue Job %s runs with fence %d, not above the previous holder's %d", job.Name, second, first)
	}
	if got := job.Spec.Template.Annotations[batchv1alpha1.AnnotationLock]; got != "db" {
		t.Fatalf("Job %s pod template annotation %s = %q; want db", job.Name, batchv1alpha1.AnnotationLock, got)
	}
	if job.Annotations[batchv1alpha1.AnnotationHolder] == "" || job.Spec.Template.Annotations[batchv1alpha1.AnnotationHolder] != job.Annotations[batchv1alpha1.AnnotationHolder] {
		t.Fatalf("Job %s holder: recorded %q, pod template %q", job.Name, job.Annotations[batchv1alpha1.AnnotationHolder],
			job.Spec.Template.Annotations[batchv1alpha1.AnnotationHolder])
	}
	key := job.Annotations[batchv1alpha1.AnnotationGuardLockKey]
	if n, err := rdb.Exists(ctx, key).Result(); err != nil || n != 1 {
		t.Fatalf("Redis key %q of the held lock: exists = %d, %v", key, n, err)
	}

	completeJob(t, job)
	guardOf(t, job, batchv1alpha1.GuardReleased)
	eventually(t, "the lock is free in Redis", func() (bool, string) {
		n, err := rdb.Exists(ctx, key).Result()
		return err == nil && n == 0, fmt.Sprintf("exists = %d, %v", n, err)
	})
	next := guardedJob(ns, "db")
	create(t, next)
	if third := fenceOf(t, next); third <= second {
		t.Fatalf("the next holder runs with fence %d, not above the Kueue Job's %d", third, second)
	}
}

// A lock lost behind the operator's back sets the check Retry: Kueue evicts the Workload, suspends
// the Job and takes the fence out.
func TestOperatorRetriesTheCheckOnALostLock(t *testing.T) {
	ctx := context.Background()
	rdb := startOperator(t)
	operatorCheck(t, "lock-lost")
	ns := queues(t, "lost", "lock-lost")
	job := lockedQueuedJob(ns, "lost")
	create(t, job)
	fence := fenceOf(t, job)

	key := job.Annotations[batchv1alpha1.AnnotationGuardLockKey]
	if err := rdb.Del(ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a LockLost Event on Job "+job.Name, func() (bool, string) {
		var list eventsv1.EventList
		if err := k8s.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, e := range list.Items {
			if e.Regarding.Name == job.Name {
				if e.Reason == batchv1alpha1.ReasonLockLost {
					return true, ""
				}
				seen = append(seen, e.Reason+": "+e.Note)
			}
		}
		return false, fmt.Sprintf("events %v", seen)
	})
	// Kueue evicts (suspends the Job, takes the fence out) and asks the check anew, which the
	// operator answers with a new acquisition: the Job runs again only under a higher fence.
	if again := fenceOf(t, job); again <= fence {
		t.Fatalf("Job %s runs again with fence %d, not above the lost one %d", job.Name, again, fence)
	}
	wl := workloadOf(t, job)
	if c := condition(wl, "Evicted"); c == nil {
		raw, _, _ := unstructured.NestedSlice(wl.Object, "status", "conditions")
		t.Fatalf("Workload %s runs again without an eviction: conditions %v", wl.GetName(), raw)
	}
}

// An operator that restarts while a Kueue Job runs under its lock re-adopts it by the Job's token
// with the same fence, and releases it at the Job's end.
func TestOperatorReadoptsAKueueJobAfterARestart(t *testing.T) {
	ctx := context.Background()
	srv := redisserver.Start(t)
	rdb := srv.Client(t)
	stop := startOperatorOn(t, []string{srv.Addr()})
	operatorCheck(t, "lock-restart")
	ns := queues(t, "restart", "lock-restart")
	job := lockedQueuedJob(ns, "restart")
	create(t, job)
	fence := fenceOf(t, job)
	stop()

	startOperatorOn(t, []string{srv.Addr()})
	eventually(t, "a Readopted Event on Job "+job.Name, func() (bool, string) {
		reasons := eventReasons(t, job)
		return slices.Contains(reasons, batchv1alpha1.ReasonReadopted), fmt.Sprintf("events %v", reasons)
	})
	if again := fenceOf(t, job); again != fence {
		t.Fatalf("Job %s runs with fence %d after the restart; want %d", job.Name, again, fence)
	}
	key := job.Annotations[batchv1alpha1.AnnotationGuardLockKey]
	completeJob(t, job)
	guardOf(t, job, batchv1alpha1.GuardReleased)
	if n, err := rdb.Exists(ctx, key).Result(); err != nil || n != 0 {
		t.Fatalf("Redis key %q after the release: exists = %d, %v", key, n, err)
	}
	for _, r := range eventReasons(t, job) {
		if r == batchv1alpha1.ReasonLockLost {
			t.Fatalf("Job %s lost its lock across the restart: events %v", job.Name, eventReasons(t, job))
		}
	}
}

// eventReasons are the reasons of the Events regarding job.
func eventReasons(t *testing.T, job *batchv1.Job) []string {
	t.Helper()
	var list eventsv1.EventList
	if err := k8s.List(context.Background(), &list, client.InNamespace(job.Namespace)); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range list.Items {
		if e.Regarding.Name == job.Name {
			out = append(out, e.Reason)
		}
	}
	return out
}

// A held Kueue Job that is deleted keeps its lock until its pods are gone (none run here), then
// releases it and lets the Job go.
func TestOperatorReleasesADeletedKueueJob(t *testing.T) {
	ctx := context.Background()
	rdb := startOperator(t)
	operatorCheck(t, "lock-deleted")
	ns := queues(t, "deleted", "lock-deleted")
	job := lockedQueuedJob(ns, "deleted")
	create(t, job)
	fenceOf(t, job)
	key := job.Annotations[batchv1alpha1.AnnotationGuardLockKey]
	if err := k8s.Delete(ctx, job, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "Job "+job.Name+" is gone and its lock free", func() (bool, string) {
		err := k8s.Get(ctx, client.ObjectKeyFromObject(job), &batchv1.Job{})
		n, rerr := rdb.Exists(ctx, key).Result()
		return apierrors.IsNotFound(err) && rerr == nil && n == 0, fmt.Sprintf("get: %v; key exists = %d, %v", err, n, rerr)
	})
}
