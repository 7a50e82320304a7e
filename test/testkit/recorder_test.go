package testkit

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
