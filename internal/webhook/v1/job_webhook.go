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

// Package v1 holds the defaulting webhooks of the external types batch/v1 Job and core/v1 Pod:
// the admission gate of guarded Jobs and Pods (internal/guardgate) served by the manager, for
// clusters without MutatingAdmissionPolicy (docs/design.md, "Before 1.36").
//
// kubebuilder's `create webhook --defaulting` would scaffold a CustomDefaulter, whose patch is the
// diff of the request's object and the defaulted Go object. That diff drops "remove" operations
// unless told to remove every field the Go types do not know, and the gate needs neither: it
// returns the policies' own ops (guardgate.JobPatch, guardgate.PodPatch), which touch nothing else.
// So each webhook is a plain admission.Handler, registered in the scaffold's shape.
package v1

import (
	batchv1 "k8s.io/api/batch/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/lockedjob/lockedjob/internal/guardgate"
)

// JobPath is where the API server sends a Job's admission review (the path of the marker below).
const JobPath = "/mutate-batch-v1-job"

// SetupJobWebhookWithManager registers the webhook for Jobs in the manager's webhook server.
func SetupJobWebhookWithManager(mgr ctrl.Manager) error {
	mgr.GetWebhookServer().Register(JobPath, &webhook.Admission{Handler: JobGate()})
	return nil
}

// The objectSelector of the webhook (the lock label present, not a LockedJob's Job) is added by
// config/webhook/kustomization.yaml: controller-gen's marker has no field for it.
// +kubebuilder:webhook:path=/mutate-batch-v1-job,mutating=true,failurePolicy=fail,sideEffects=None,groups=batch,resources=jobs,verbs=create,versions=v1,name=guard-job.lockedjob.dev,admissionReviewVersions=v1,reinvocationPolicy=Never

// JobGate suspends a guarded Job at its creation and gives its containers the lock's env: it
// answers with guardgate.JobPatch of the Job under review.
func JobGate() admission.Handler {
	return &gate[*batchv1.Job]{kind: "Job", answer: "guarded Job: suspended until its lock is held",
		newObject: func() *batchv1.Job { return &batchv1.Job{} }, patch: guardgate.JobPatch,
		log: logf.Log.WithName("job-gate")}
}
