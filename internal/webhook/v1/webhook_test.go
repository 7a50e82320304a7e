package v1

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionv1 "k8s.io/api/admission/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/internal/guardgate"
)

func request(t *testing.T, kind string, obj any) admission.Request {
	t.Helper()
	raw, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	return admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID: "uid", Kind: metav1.GroupVersionKind{Kind: kind}, Operation: admissionv1.Create,
		Object: runtime.RawExtension{Raw: raw},
	}}
}

// TestGatesAnswerWithTheGuardgateOps: a guarded object is let in with exactly guardgate's ops, one
// the gate leaves alone with none, and a request without an object is refused.
func TestGatesAnswerWithTheGuardgateOps(t *testing.T) {
	labelled := metav1.ObjectMeta{Name: "x", Labels: map[string]string{batchv1alpha1.LabelGuardLock: "db"}}
	spec := corev1.PodSpec{Containers: []corev1.Container{{Name: "main"}}}
	job := &batchv1.Job{ObjectMeta: labelled, Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: spec}}}
	pod := &corev1.Pod{ObjectMeta: labelled, Spec: spec}
	for name, tc := range map[string]struct {
		gate    admission.Handler
		req     admission.Request
		wantOps any // nil: allowed as sent
		wantErr bool
	}{
		"a guarded Job":     {gate: JobGate(), req: request(t, "Job", job), wantOps: guardgate.JobPatch(job)},
		"an unlabelled Job": {gate: JobGate(), req: request(t, "Job", &batchv1.Job{Spec: job.Spec})},
		"a guarded Pod":     {gate: PodGate(), req: request(t, "Pod", pod), wantOps: guardgate.PodPatch(pod)},
		"a Pod bound to a node": {gate: PodGate(), req: request(t, "Pod", &corev1.Pod{ObjectMeta: labelled,
			Spec: corev1.PodSpec{NodeName: "n", Containers: spec.Containers}})},
		"no object": {gate: PodGate(), req: admission.Request{}, wantErr: true},
	} {
		t.Run(name, func(t *testing.T) {
			resp := tc.gate.Handle(context.Background(), tc.req)
			if tc.wantErr {
				if resp.Allowed || resp.Result == nil || resp.Result.Code != http.StatusBadRequest {
					t.Fatalf("response %+v, want a refusal with code 400", resp)
				}
				return
			}
			if !resp.Allowed {
				t.Fatalf("refused: %+v", resp.Result)
			}
			if tc.wantOps == nil {
				if len(resp.Patches) != 0 {
					t.Fatalf("patches %v, want none", resp.Patches)
				}
				return
			}
			want, _ := json.Marshal(tc.wantOps)
			got, _ := json.Marshal(resp.Patches)
			if d := cmp.Diff(string(want), string(got)); d != "" {
				t.Errorf("patches (-want,+got):\n%s", d)
			}
		})
	}
}
