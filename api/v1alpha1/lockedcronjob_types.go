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

package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// OnBusyPolicy says what a LockedCronJob does at a scheduled time while its lock is busy.
// +kubebuilder:validation:Enum=Queue;Skip;Replace
type OnBusyPolicy string

const (
	// OnBusyQueue creates the run's LockedJob anyway: it waits in the lock's queue like any other.
	OnBusyQueue OnBusyPolicy = "Queue"
	// OnBusySkip creates nothing while every permit of the lock is held (by anyone; one for a lock
	// without a Lock) or a LockedJob of this LockedCronJob has not finished, and records a skipped run.
	OnBusySkip OnBusyPolicy = "Skip"
	// OnBusyReplace deletes the unfinished LockedJobs of this LockedCronJob (only its own), then
	// creates the new one, which acquires the lock once their pods are gone.
	OnBusyReplace OnBusyPolicy = "Replace"
)

// The schedule's admission rules. CEL checks the shape and the range of every value; what only the
// parser catches (a range that runs backwards, a step of 0, a date that never comes) is reported by
// the controller in the ScheduleValid condition. The value patterns follow github.com/robfig/cron/v3,
// the parser the controller uses (and the one CronJob uses): names of months and days in any case,
// "?" as "*", "N/step" as "N-max/step".
//
// Minute:       [0-5]?[0-9]
// Hour:         [01]?[0-9]|2[0-3]
// Day of month: 0?[1-9]|[12][0-9]|3[01]
// Month:        0?[1-9]|1[0-2]|jan|...|dec
// Day of week:  0?[0-6]|sun|...|sat
// Each field is a comma-separated list of "*", "?", V or V-V, each with an optional /step.

// LockedCronJobSpec is a schedule and the LockedJob it creates at each scheduled time.
// +kubebuilder:validation:XValidation:rule="!has(self.timeZone) || !self.timeZone.matches('^(?i)local$')",message="spec.timeZone must be an explicit IANA time zone such as Europe/Berlin, not Local",fieldPath=".timeZone"
type LockedCronJobSpec struct {
	// schedule is when to run, in cron format: five fields (minute hour day-of-month month
	// day-of-week, e.g. "*/15 2-5 * * MON-FRI") or a macro (@yearly, @annually, @monthly, @weekly,
	// @daily, @midnight, @hourly). Times are in spec.timeZone.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:XValidation:rule="!self.contains('TZ=')",message="spec.schedule must not carry a time zone (TZ= or CRON_TZ=): set spec.timeZone"
	// +kubebuilder:validation:XValidation:rule="self.contains('TZ=') || self.matches('^ *(@(yearly|annually|monthly|weekly|daily|midnight|hourly)|[^ ]+ +[^ ]+ +[^ ]+ +[^ ]+ +[^ ]+) *$')",message="spec.schedule must have five fields (minute hour day-of-month month day-of-week) or be one of @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^ *[^ @]+ +[^ ]+ +[^ ]+ +[^ ]+ +[^ ]+ *$') || self.matches('^ *((([*?]|([0-5]?[0-9])(-([0-5]?[0-9]))?)(/[0-9]+)?),)*(([*?]|([0-5]?[0-9])(-([0-5]?[0-9]))?)(/[0-9]+)?) ')",message="spec.schedule: the minute (1st field) takes 0-59, *, ranges (a-b), lists (a,b) and steps (/n)"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^ *[^ @]+ +[^ ]+ +[^ ]+ +[^ ]+ +[^ ]+ *$') || self.matches('^ *[^ ]+ +((([*?]|([01]?[0-9]|2[0-3])(-([01]?[0-9]|2[0-3]))?)(/[0-9]+)?),)*(([*?]|([01]?[0-9]|2[0-3])(-([01]?[0-9]|2[0-3]))?)(/[0-9]+)?) ')",message="spec.schedule: the hour (2nd field) takes 0-23, *, ranges (a-b), lists (a,b) and steps (/n)"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^ *[^ @]+ +[^ ]+ +[^ ]+ +[^ ]+ +[^ ]+ *$') || self.matches('^ *[^ ]+ +[^ ]+ +((([*?]|(0?[1-9]|[12][0-9]|3[01])(-(0?[1-9]|[12][0-9]|3[01]))?)(/[0-9]+)?),)*(([*?]|(0?[1-9]|[12][0-9]|3[01])(-(0?[1-9]|[12][0-9]|3[01]))?)(/[0-9]+)?) ')",message="spec.schedule: the day of month (3rd field) takes 1-31, *, ?, ranges (a-b), lists (a,b) and steps (/n)"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^ *[^ @]+ +[^ ]+ +[^ ]+ +[^ ]+ +[^ ]+ *$') || self.matches('^(?i) *[^ ]+ +[^ ]+ +[^ ]+ +((([*?]|(0?[1-9]|1[0-2]|jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)(-(0?[1-9]|1[0-2]|jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec))?)(/[0-9]+)?),)*(([*?]|(0?[1-9]|1[0-2]|jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)(-(0?[1-9]|1[0-2]|jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec))?)(/[0-9]+)?) ')",message="spec.schedule: the month (4th field) takes 1-12 or JAN-DEC, *, ranges (a-b), lists (a,b) and steps (/n)"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^ *[^ @]+ +[^ ]+ +[^ ]+ +[^ ]+ +[^ ]+ *$') || self.matches('^(?i) *[^ ]+ +[^ ]+ +[^ ]+ +[^ ]+ +((([*?]|(0?[0-6]|sun|mon|tue|wed|thu|fri|sat)(-(0?[0-6]|sun|mon|tue|wed|thu|fri|sat))?)(/[0-9]+)?),)*(([*?]|(0?[0-6]|sun|mon|tue|wed|thu|fri|sat)(-(0?[0-6]|sun|mon|tue|wed|thu|fri|sat))?)(/[0-9]+)?) *$')",message="spec.schedule: the day of week (5th field) takes 0-6 (0 is Sunday) or SUN-SAT, *, ?, ranges (a-b), lists (a,b) and steps (/n)"
	Schedule string `json:"schedule"`

	// timeZone is the IANA time zone the schedule is read in, e.g. "Europe/Berlin". Default UTC.
	// A name the operator's time zone database does not know shows in the ScheduleValid condition.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[A-Za-z][-+_A-Za-z0-9]*(/[-+_A-Za-z0-9]+)*$`
	TimeZone *string `json:"timeZone,omitempty"`

	// startingDeadlineSeconds is how late a run may still start, in seconds after its scheduled
	// time. A run missed by more (the operator was down or busy, the LockedCronJob suspended) is
	// not made up. Absent: the most recent missed run starts, however late. Never more than one
	// missed run starts. At least 1: the operator wakes at the scheduled time, never before it.
	// +optional
	// +kubebuilder:validation:Minimum=1
	StartingDeadlineSeconds *int64 `json:"startingDeadlineSeconds,omitempty"`

	// suspend stops creating runs; LockedJobs already created go on. Default false.
	// +optional
	// +kubebuilder:default=false
	Suspend *bool `json:"suspend,omitempty"`

	// successfulJobsHistoryLimit is how many succeeded LockedJobs to keep. Default 3.
	// +optional
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	SuccessfulJobsHistoryLimit *int32 `json:"successfulJobsHistoryLimit,omitempty"`

	// failedJobsHistoryLimit is how many failed (or LockLost) LockedJobs to keep. Default 1.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	FailedJobsHistoryLimit *int32 `json:"failedJobsHistoryLimit,omitempty"`

	// onBusy is what a run does when the lock is busy: Queue (default: create the LockedJob, which
	// waits in line), Skip (create nothing and count a skipped run while every permit of the lock is
	// held, by anyone, or an earlier run of this LockedCronJob has not finished) or Replace (delete the unfinished
	// LockedJobs of this LockedCronJob, only its own, and create the new one).
	// +optional
	// +kubebuilder:default=Queue
	OnBusy OnBusyPolicy `json:"onBusy,omitempty"`

	// lockedJobTemplate is the LockedJob to create at each scheduled time: its lock and its Job.
	// +required
	LockedJobTemplate LockedJobTemplate `json:"lockedJobTemplate"`
}

// LockedJobTemplate is the metadata and spec of the LockedJobs a LockedCronJob creates.
type LockedJobTemplate struct {
	// metadata holds labels and annotations for the LockedJob.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the LockedJob's spec: the lock and the Job template.
	// +required
	Spec LockedJobSpec `json:"spec"`
}

// Condition types of a LockedCronJob.
const (
	// ConditionScheduleValid: the schedule and time zone parse, and the schedule has a next time.
	// False with reason InvalidSchedule or InvalidTimeZone and the parser's words otherwise: nothing
	// runs until the spec is fixed.
	ConditionScheduleValid = "ScheduleValid"
	// ConditionScopeAllowed: the operator lets this namespace use the lock scope of
	// spec.lockedJobTemplate (spec.lock.scope Cluster is allowed only in the namespaces it trusts).
	// False with reason ScopeNotAllowed otherwise: no run is created, and the lock is not looked
	// at, until the template's scope or the operator's configuration changes.
	ConditionScopeAllowed = "ScopeAllowed"
)

// Condition and event reasons of a LockedCronJob.
const (
	ReasonScheduleValid   = "ScheduleValid"
	ReasonInvalidSchedule = "InvalidSchedule"
	ReasonInvalidTimeZone = "InvalidTimeZone"
	// ReasonScopeAllowed: the template's lock scope is allowed in this namespace (ScopeAllowed
	// True); ReasonScopeNotAllowed tells the opposite.
	ReasonScopeAllowed = "ScopeAllowed"
	// ReasonRunCreated: the LockedJob of a scheduled run was created.
	ReasonRunCreated = "Created"
	// ReasonSkipped: a run was skipped because the lock was busy (onBusy Skip).
	ReasonSkipped = "Skipped"
	// ReasonReplaced: unfinished LockedJobs of this LockedCronJob were deleted for a new run
	// (onBusy Replace).
	ReasonReplaced = "Replaced"
)

// Labels and annotations a LockedCronJob puts on the LockedJobs it creates.
const (
	// LabelLockedCronJob names the LockedCronJob that created a LockedJob: its name, or, when the
	// name is longer than a label value may be, a prefix of it and a hash of the whole.
	LabelLockedCronJob = "batch.lockedjob.dev/lockedcronjob"
	// AnnotationScheduledTime is the scheduled time of the run a LockedJob was created for (RFC 3339).
	AnnotationScheduledTime = "batch.lockedjob.dev/scheduled-time"
)

// LockedCronJobStatus is what the operator observed and did.
type LockedCronJobStatus struct {
	// active lists the LockedJobs of this LockedCronJob that have not finished.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	Active []corev1.ObjectReference `json:"active,omitempty"`

	// lastScheduleTime is the scheduled time of the last run a LockedJob was created for.
	// +optional
	LastScheduleTime *metav1.Time `json:"lastScheduleTime,omitempty"`

	// lastSuccessfulTime is when the last LockedJob of this LockedCronJob succeeded.
	// +optional
	LastSuccessfulTime *metav1.Time `json:"lastSuccessfulTime,omitempty"`

	// nextScheduleTime is the next scheduled time; absent while suspended, invalid or not allowed
	// its lock scope.
	// +optional
	NextScheduleTime *metav1.Time `json:"nextScheduleTime,omitempty"`

	// lastSkippedTime is the scheduled time of the last run skipped because the lock was busy.
	// +optional
	LastSkippedTime *metav1.Time `json:"lastSkippedTime,omitempty"`

	// skippedRuns counts the runs skipped because the lock was busy (onBusy Skip).
	// +optional
	// +kubebuilder:validation:Minimum=0
	SkippedRuns int64 `json:"skippedRuns,omitempty"`

	// observedGeneration is the generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions: ScheduleValid, ScopeAllowed.
	// +listType=map
	// +listMapKey=type
	// +optional
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=lcj,categories=all;lockedjob
// +kubebuilder:printcolumn:name="Schedule",type=string,JSONPath=`.spec.schedule`
// +kubebuilder:printcolumn:name="Suspend",type=boolean,JSONPath=`.spec.suspend`
// +kubebuilder:printcolumn:name="On-Busy",type=string,JSONPath=`.spec.onBusy`
// +kubebuilder:printcolumn:name="Active",type=string,JSONPath=`.status.active[*].name`,description="LockedJobs of this LockedCronJob that have not finished"
// +kubebuilder:printcolumn:name="Last Schedule",type=date,JSONPath=`.status.lastScheduleTime`
// A string, not a date: kubectl prints a future date as <invalid>.
// +kubebuilder:printcolumn:name="Next",type=string,JSONPath=`.status.nextScheduleTime`,description="Next scheduled time"
// +kubebuilder:printcolumn:name="Last Success",type=date,JSONPath=`.status.lastSuccessfulTime`
// +kubebuilder:printcolumn:name="Skipped",type=integer,JSONPath=`.status.skippedRuns`,description="Runs skipped because the lock was busy"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 242",message="metadata.name must be at most 242 characters: the LockedJobs it creates are named <name>-<unix minutes>"

// LockedCronJob creates a LockedJob at each scheduled time, so scheduled work respects the lock:
// it waits in line, skips, or replaces its own earlier run while the lock is busy (spec.onBusy).
type LockedCronJob struct {
	metav1.TypeMeta `json:",inline"`

	// metadata is standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitzero"`

	// spec is the schedule and the LockedJob template.
	// +required
	Spec LockedCronJobSpec `json:"spec"`

	// status is what the operator observed.
	// +optional
	Status LockedCronJobStatus `json:"status,omitzero"`
}

// +kubebuilder:object:root=true

// LockedCronJobList contains a list of LockedCronJob.
type LockedCronJobList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitzero"`
	Items           []LockedCronJob `json:"items"`
}

func init() {
	SchemeBuilder.Register(func(s *runtime.Scheme) error {
		s.AddKnownTypes(SchemeGroupVersion, &LockedCronJob{}, &LockedCronJobList{})
		return nil
	})
}
