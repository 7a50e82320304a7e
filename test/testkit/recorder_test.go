package testkit

import (
	"errors"
	"net"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
)

// TestRecorderKeepsItsNamespaces runs the informers on a fake clientset: what reaches the
// journal is only the namespaces the options name, and a deletion is stamped.
func TestRecorderKeepsItsNamespaces(t *testing.T) {
	cs := fake.NewClientset()
	rec, err := NewRecorder(t.Context(), cs, RecorderOptions{NamespacePrefix: "fault-"})
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{"other", "fault-a"} {
		job := testJob("j-" + ns)
		job.Namespace = ns
		if _, err := cs.BatchV1().Jobs(ns).Create(t.Context(), job, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	job := testJob("j-fault-a")
	pod := testPod("p", job, corev1.PodRunning)
	pod.Namespace = "fault-a"
	if _, err := cs.CoreV1().Pods("fault-a").Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cs.CoreV1().Pods("fault-a").Delete(t.Context(), "p", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		h := rec.History()
		if len(h.Pods) == 1 && !h.Pods[0].Deleted.IsZero() && len(h.Jobs) > 0 {
			if len(h.Jobs) != 1 || h.Jobs[0].Namespace != "fault-a" {
				t.Fatalf("recorded Jobs %+v, want only fault-a's", h.Jobs)
			}
			if h.Pods[0].Running.IsZero() || h.Pods[0].Running.After(h.Pods[0].Deleted) {
				t.Errorf("pod stamped Running %v, Deleted %v", h.Pods[0].Running, h.Pods[0].Deleted)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 5s the recorder holds %+v", h)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestUntilAnswered: a recorder asks again while the API server is not there (a refused
// connection, a 503, a 429) and passes every answer through, an expired resourceVersion (410) too,
// which makes its reflector list afresh.
func TestUntilAnswered(t *testing.T) {
	gr := schema.GroupResource{Resource: "pods"}
	for _, tc := range []struct {
		name  string
		fails []error
		calls int
		err   error
	}{
		{name: "refused, then answered", fails: []error{syscall.ECONNREFUSED, &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}}, calls: 3},
		{name: "unavailable, then answered", fails: []error{apierrors.NewServiceUnavailable("starting"), apierrors.NewTooManyRequests("busy", 1)}, calls: 3},
		{name: "expired passes through", fails: []error{apierrors.NewResourceExpired("too old")}, calls: 1, err: apierrors.NewResourceExpired("too old")},
		{name: "forbidden passes through", fails: []error{apierrors.NewForbidden(gr, "", errors.New("no"))}, calls: 1, err: apierrors.NewForbidden(gr, "", errors.New("no"))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			got, err := untilAnswered(t.Context(), func() (int, error) {
				calls++
				if calls <= len(tc.fails) {
					return 0, tc.fails[calls-1]
				}
				return 7, nil
			})
			if calls != tc.calls {
				t.Fatalf("calls = %d, want %d", calls, tc.calls)
			}
			if tc.err != nil {
				if err == nil || err.Error() != tc.err.Error() {
					t.Fatalf("err = %v, want %v", err, tc.err)
				}
				return
			}
			if err != nil || got != 7 {
				t.Fatalf("got %d, %v; want 7, nil", got, err)
			}
		})
	}
}
