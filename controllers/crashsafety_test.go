package controllers

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/internal/redislock"
	"github.com/lockedjob/lockedjob/internal/testutil/redisserver"
)

// TestFenceIsStoredBeforeTheJob: when the status write after taking the lock fails, the next pass
// must store holder and fencing token before it creates the Job — otherwise a crash between the
// two would leave a Job the operator cannot tie to its acquisition.
func TestFenceIsStoredBeforeTheJob(t *testing.T) {
	srv := redisserver.Start(t)
	lockClient, err := redislock.New(srv.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	book := NewLockBook(lockClient)
	t.Cleanup(book.Stop)

	lj := &batchv1alpha1.LockedJob{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "careful", UID: "uid-1", Generation: 1},
		Spec: batchv1alpha1.LockedJobSpec{
			Lock: batchv1alpha1.LockSpec{Name: "db"},
			JobTemplate: batchv1alpha1.JobTemplate{Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
			}}},
		},
	}
	var (
		mu         sync.Mutex
		failStatus bool
		writes     []string // "status:<fence stored?>" and "create:<kind>", in order
	)
	fc := fake.NewClientBuilder().
		WithScheme(testSchemeForUnit(t)).
		WithStatusSubresource(&batchv1alpha1.LockedJob{}).
		WithObjects(lj).
		WithInterceptorFuncs(interceptor.Funcs{
			SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
				mu.Lock()
				defer mu.Unlock()
				if failStatus {
					return errors.New("injected: API server unavailable")
				}
				data, _ := patch.Data(obj)
				var p struct {
					Status struct {
						FencingToken *int64 `json:"fencingToken"`
					} `json:"status"`
				}
				_ = json.Unmarshal(data, &p)
				writes = append(writes, "status:fence="+map[bool]string{true: "yes", false: "no"}[p.Status.FencingToken != nil])
				return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
			},
			Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
				mu.Lock()
				if _, ok := obj.(*batchv1.Job); ok {
					writes = append(writes, "create:job")
				} else {
					writes = append(writes, "create:other")
				}
				mu.Unlock()
				return c.Create(ctx, obj, opts...)
			},
		}).Build()

	r := &LockedJobReconciler{
		Client: fc, APIReader: fc, Scheme: fc.Scheme(), Locks: book, Clock: clock.RealClock{},
		Config: Config{Identity: Identity{ClusterID: "c", TokenKey: []byte("0123456789abcdef")}},
	}
	r.Config.defaults()
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(lj)}
	ctx := context.Background()

	if _, err := r.Reconcile(ctx, req); err != nil { // adds the finalizer
		t.Fatalf("finalizer pass: %v", err)
	}
	mu.Lock()
	failStatus = true
	mu.Unlock()
	if _, err := r.Reconcile(ctx, req); err == nil {
		t.Fatal("the pass whose status writes fail should return an error")
	}
	if book.Held(lj.UID) == nil {
		t.Fatal("the lock should have been taken in the failing pass")
	}
	var jobs batchv1.JobList
	if err := fc.List(ctx, &jobs); err != nil || len(jobs.Items) != 0 {
		t.Fatalf("a Job was created although the fence could not be stored: %d jobs, %v", len(jobs.Items), err)
	}

	mu.Lock()
	failStatus, writes = false, nil
	mu.Unlock()
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatalf("recovering pass: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	jobAt, fenceAt := -1, -1
	for i, w := range writes {
		if w == "create:job" && jobAt < 0 {
			jobAt = i
		}
		if w == "status:fence=yes" && fenceAt < 0 {
			fenceAt = i
		}
	}
	if jobAt < 0 || fenceAt < 0 || fenceAt > jobAt {
		t.Fatalf("writes %v: want the fence stored before the Job is created", writes)
	}
}
