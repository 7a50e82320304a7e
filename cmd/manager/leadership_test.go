package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/internal/testutil/ports"
	"github.com/lockedjob/lockedjob/internal/testutil/redisserver"
)

// leaseName is the operator's leader-election Lease.
const leaseName = "lockedjob.batch.lockedjob.dev"

// TestLeadershipLostCampaignsAgain runs the real run() on a real API server and Redis, takes its
// leader Lease away while a LockedJob holds its lock, and checks what issue 13 asks of a lost
// leadership: the process does not exit, the lock's key never leaves Redis (the book renews it
// while nobody leads), the process leads again with a new manager, and that manager's reconciler
// carries the LockedJob to Succeeded and releases the lock. It also pins the words by which
// controller-runtime reports a lost election (campaign.LostLeadership): if they change, run
// returns the error instead of campaigning and this test fails.
func TestLeadershipLostCampaignsAgain(t *testing.T) {
	env, c := startAPIServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const ns = "lockedjob-system"
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBECONFIG", writeKubeconfig(t, env, ns))
	redisSrv := redisserver.Start(t)
	rdb := redisSrv.Client(t)
	keyFile := filepath.Join(t.TempDir(), "token-key")
	if err := os.WriteFile(keyFile, []byte("leadership-test-token-key-0123456789"), 0o600); err != nil {
		t.Fatal(err)
	}

	probeAddr, metricsAddr := freeAddr(t), freeAddr(t)
	o := options{
		metricsAddr: metricsAddr, probeAddr: probeAddr, namespace: ns, tokenKeyFile: keyFile,
		leaderElect: true, leaseDuration: 3 * time.Second, renewDeadline: 2 * time.Second, retryPeriod: 500 * time.Millisecond,
		redisAddr: redisSrv.Addr(), keyPrefix: "lockedjob:", releaseChannel: "lockedjob:released",
		clusterID: "test", waitBackoffMax: time.Second, redlockNodeTimeout: 50 * time.Millisecond,
		maxConcurrentReconciles: 1, redisTimeout: 2 * time.Second, kubeAPIQPS: 50, kubeAPIBurst: 100,
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- run(runCtx, o) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("run after stop: %v", err)
		}
	})
	alive := func() {
		t.Helper()
		select {
		case err := <-done:
			done <- err
			t.Fatalf("run returned (%v): the process would have exited", err)
		default:
		}
	}
	pollUntil := func(within time.Duration, what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(within)
		for !cond() {
			alive()
			if time.Now().After(deadline) {
				t.Fatalf("after %s: %s", within, what)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	holder := func() string {
		lease := &coordinationv1.Lease{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: leaseName}, lease); err != nil || lease.Spec.HolderIdentity == nil {
			return ""
		}
		return *lease.Spec.HolderIdentity
	}

	lj := &batchv1alpha1.LockedJob{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "held"},
		Spec: batchv1alpha1.LockedJobSpec{
			Lock: batchv1alpha1.LockSpec{Name: "db", TTL: &metav1.Duration{Duration: 3 * time.Second}},
			JobTemplate: batchv1alpha1.JobTemplate{Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{
				Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
					Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
			}}},
		},
	}
	if err := c.Create(ctx, lj); err != nil {
		t.Fatal(err)
	}
	pollUntil(time.Minute, "the LockedJob does not run under its lock", func() bool {
		return c.Get(ctx, client.ObjectKeyFromObject(lj), lj) == nil && lj.Status.Phase == batchv1alpha1.PhaseRunning
	})
	first := holder()
	key, fence := lj.Status.LockKey, *lj.Status.FencingToken
	if first == "" || key == "" {
		t.Fatalf("setup: lease holder %q, lock key %q", first, key)
	}

	// Another candidate takes the Lease: the leader's next renewal fails, and after its renew
	// deadline controller-runtime stops the manager with "leader election lost". The thief's own
	// lease is short, so a candidate may take it over soon after.
	steal(ctx, t, c, ns, "thief", 2)
	stolenAt := time.Now()
	missing := 0 // observations of Redis without the lock's key
	second := ""
	var endpointErrs []string // the process's endpoints must answer between managers too
	pollUntil(time.Minute, "the process did not lead again with a new manager", func() bool {
		if rdb.Exists(ctx, key).Val() == 0 {
			missing++
		}
		if err := endpointsAnswer(probeAddr, metricsAddr); err != nil {
			endpointErrs = append(endpointErrs, err.Error())
		}
		h := holder()
		if h != first && h != "thief" && h != "" {
			second = h
			return true
		}
		return false
	})
	t.Logf("led again as %s %s after the Lease was taken", second, time.Since(stolenAt).Round(time.Millisecond))
	if missing > 0 {
		t.Fatalf("the lock's key was missing from Redis in %d observations while nobody led", missing)
	}
	if len(endpointErrs) > 0 {
		t.Fatalf("health or metrics endpoints failed %d times around the leadership change, first: %s", len(endpointErrs), endpointErrs[0])
	}

	finishJob(ctx, t, c, ns, lj.Status.JobName)
	pollUntil(time.Minute, "the new manager did not carry the LockedJob to Succeeded", func() bool {
		return c.Get(ctx, client.ObjectKeyFromObject(lj), lj) == nil && lj.Status.Phase == batchv1alpha1.PhaseSucceeded
	})
	if *lj.Status.FencingToken != fence {
		t.Fatalf("fencing token %d after the leadership change, want %d (the same acquisition)", *lj.Status.FencingToken, fence)
	}
	if rdb.Exists(ctx, key).Val() != 0 {
		t.Fatal("the lock is still held after the LockedJob succeeded")
	}
}

// freeAddr returns a loopback address with a port that was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	addr, err := ports.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// endpointsAnswer checks /healthz, /readyz (Redis answers) and /metrics (the book's gauge).
func endpointsAnswer(probeAddr, metricsAddr string) error {
	c := &http.Client{Timeout: 2 * time.Second}
	for _, url := range []string{"http://" + probeAddr + "/healthz", "http://" + probeAddr + "/readyz", "http://" + metricsAddr + "/metrics"} {
		resp, err := c.Get(url)
		if err != nil {
			return err
		}
		body, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %d %v", url, resp.StatusCode, err)
		}
		if strings.HasSuffix(url, "/metrics") && !strings.Contains(string(body), "lockedjob_locks_held") {
			return fmt.Errorf("GET %s: no lockedjob_locks_held", url)
		}
	}
	return nil
}

// steal makes holder the Lease's holder for leaseSeconds from now, as another candidate would.
func steal(ctx context.Context, t *testing.T, c client.Client, ns, holder string, leaseSeconds int32) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		lease := &coordinationv1.Lease{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: leaseName}, lease); err != nil {
			return err
		}
		now := metav1.NewMicroTime(time.Now())
		lease.Spec.HolderIdentity, lease.Spec.LeaseDurationSeconds = &holder, &leaseSeconds
		lease.Spec.AcquireTime, lease.Spec.RenewTime = &now, &now
		return c.Update(ctx, lease)
	})
	if err != nil {
		t.Fatalf("take the Lease: %v", err)
	}
}

// finishJob marks the Job complete, as the Job controller would (envtest runs none).
func finishJob(ctx context.Context, t *testing.T, c client.Client, ns, name string) {
	t.Helper()
	job := &batchv1.Job{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, job); err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	job.Status.StartTime, job.Status.CompletionTime, job.Status.Succeeded = &now, &now, 1
	job.Status.Conditions = []batchv1.JobCondition{
		{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: now},
	}
	if err := c.Status().Update(ctx, job); err != nil {
		t.Fatal(err)
	}
}
