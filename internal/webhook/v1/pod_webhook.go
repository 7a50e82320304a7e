/*
Copyright 2026.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package v1

import (
	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/lockedjob/lockedjob/internal/guardgate"
)

// PodPath is where the API server sends a Pod's admission review (the path of the marker below).
const PodPath = "/mutate--v1-pod"

// SetupPodWebhookWithManager registers the webhook for Pods in the manager's webhook server.
func SetupPodWebhookWithManager(mgr ctrl.Manager) error {
	mgr.GetWebhookServer().Register(PodPath, &webhook.Admission{Handler: PodGate()})
	return nil
}

// The objectSelector of the webhook (the lock label present) is added by
// config/webhook/kustomization.yaml; who controls the Pod, which a selector cannot see, is
// guardgate.GuardsPod's to judge.
// +kubebuilder:webhook:path=/mutate--v1-pod,mutating=true,failurePolicy=fail,sideEffects=None,groups="",resources=pods,verbs=create,versions=v1,name=guard-pod.lockedjob.dev,admissionReviewVersions=v1,reinvocationPolicy=Never

// PodGate gates a guarded Pod at its creation and gives its containers the lock's env: it answers
// with guardgate.PodPatch of the Pod under review.
func PodGate() admission.Handler {
	return &gate[*corev1.Pod]{kind: "Pod", answer: "guarded Pod: gated until its lock is held",
		newObject: func() *corev1.Pod { return &corev1.Pod{} }, patch: guardgate.PodPatch,
		log: logf.Log.WithName("pod-gate")}
}
