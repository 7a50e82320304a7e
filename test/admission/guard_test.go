package admission_test

import (
	"context"
	"fmt"
	"testing"

	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
)

// The names of the Job policies in config/guard, built alone (config/default prefixes them).
const (
	jobMutatePolicy   = "guard-mutate"
	jobValidatePolicy = "guard-validate"
)

// lockEnv is what every container of a guarded Job reads its lock from: the pod annotations the
// operator writes when it holds the lock.
var lockEnv = func() []corev1.EnvVar {
	var env []corev1.EnvVar
	for _, p := range [][2]string{
		{batchv1alpha1.EnvFencingToken, batchv1alpha1.AnnotationFencingToken},
		{batchv1alpha1.EnvLock, batchv1alpha1.AnnotationLock},
		{batchv1alpha1.EnvHolder, batchv1alpha1.AnnotationHolder},
		{batchv1alpha1.EnvSlot, batchv1alpha1.AnnotationSlot},
	} {
		env = append(env, corev1.EnvVar{Name: p[0], ValueFrom: &corev1.EnvVarSource{
			FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: fmt.Sprintf("metadata.annotations['%s']", p[1])},
		}})
	}
	return env
}()

// TestGuardedJobIsCreatedSuspendedWithTheLockEnv: every container and init container gets the
// four variables after its own, with or without an env list of its own; a copy of one of them in
// the template is dropped.
func TestGuardedJobIsCreatedSuspendedWithTheLockEnv(t *testing.T) {
	eachPath(t, func(t *testing.T, k8s client.Client) {
		g := NewWithT(t)
		j := guardedJob()
		g.Expect(k8s.Create(context.Background(), j)).To(Succeed())

		got := &batchv1.Job{}
		g.Expect(k8s.Get(context.Background(), client.ObjectKeyFromObject(j), got)).To(Succeed())
		g.Expect(got.Spec.Suspend).To(HaveValue(BeTrue()))
		pod := got.Spec.Template.Spec
		g.Expect(pod.InitContainers[0].Env).To(Equal(lockEnv))
		g.Expect(pod.InitContainers[1].Env).To(Equal(append([]corev1.EnvVar{{Name: "INIT", Value: "1"}}, lockEnv...)))
		g.Expect(pod.Containers[0].Env).To(Equal(lockEnv))
		g.Expect(pod.Containers[1].Env).To(Equal(append([]corev1.EnvVar{{Name: "SIDE", Value: "2"}, {Name: "AFTER", Value: "3"}}, lockEnv...)))
	})
}

// TestAKueueJobIsGuardedToo: a Job of a Kueue queue that asks for a lock is let in, suspended with
// the lock's env, as any guarded Job: the operator answers for its lock as Kueue's AdmissionCheck,
// and the fence Kueue writes into its pod template reaches the env by the same annotations.
func TestAKueueJobIsGuardedToo(t *testing.T) {
	eachPath(t, func(t *testing.T, k8s client.Client) {
		g := NewWithT(t)
		j := guardedJob(label("kueue.x-k8s.io/queue-name", "batch"))
		g.Expect(k8s.Create(context.Background(), j)).To(Succeed())
		g.Expect(j.Spec.Suspend).To(HaveValue(BeTrue()))
		g.Expect(j.Spec.Template.Spec.Containers[0].Env).To(Equal(lockEnv))
	})
}

// TestJobsTheGuardLeavesAlone: a Job without the lock label, and a LockedJob's own Job, are
// created as sent.
func TestJobsTheGuardLeavesAlone(t *testing.T) {
	eachPath(t, func(t *testing.T, k8s client.Client) {
		for name, j := range map[string]*batchv1.Job{
			"no lock label":   guardedJob(unguard),
			"a LockedJob's":   guardedJob(unguard, label(batchv1alpha1.LabelLockedJob, "nightly")),
			"label elsewhere": guardedJob(unguard, annotate(batchv1alpha1.LabelGuardLock, "db-migrate")),
		} {
			t.Run(name, func(t *testing.T) {
				g := NewWithT(t)
				sent := j.DeepCopy()
				g.Expect(k8s.Create(context.Background(), j)).To(Succeed())
				g.Expect(j.Spec.Suspend).To(HaveValue(BeFalse()), "the API server defaults suspend to false")
				g.Expect(j.Spec.Template.Spec.InitContainers[0].Env).To(BeEmpty())
				g.Expect(j.Spec.Template.Spec.Containers[1].Env).To(Equal(sent.Spec.Template.Spec.Containers[1].Env))
			})
		}
	})
}

// TestGuardAcceptsEveryValueTheLockAccepts: the bounds of each annotation are those of
// spec.lock, inclusive.
func TestGuardAcceptsEveryValueTheLockAccepts(t *testing.T) {
	eachPath(t, func(t *testing.T, k8s client.Client) {
		for name, opt := range map[string]func(*batchv1.Job){
			"lock name with dots":  label(batchv1alpha1.LabelGuardLock, "team-a.db.migrate"),
			"scope Namespace":      annotate(batchv1alpha1.AnnotationGuardScope, string(batchv1alpha1.LockScopeNamespace)),
			"scope Cluster":        annotate(batchv1alpha1.AnnotationGuardScope, string(batchv1alpha1.LockScopeCluster)),
			"priority -1000":       annotate(batchv1alpha1.AnnotationGuardPriority, "-1000"),
			"priority 1000":        annotate(batchv1alpha1.AnnotationGuardPriority, "1000"),
			"priority +7":          annotate(batchv1alpha1.AnnotationGuardPriority, "+7"),
			"ttl 1s":               annotate(batchv1alpha1.AnnotationGuardTTL, "1s"),
			"ttl 24h":              annotate(batchv1alpha1.AnnotationGuardTTL, "24h"),
			"ttl 1m30s":            annotate(batchv1alpha1.AnnotationGuardTTL, "1m30s"),
			"on-lock-lost Suspend": annotate(batchv1alpha1.AnnotationGuardOnLockLost, string(batchv1alpha1.LockLostSuspend)),
			"on-lock-lost Delete":  annotate(batchv1alpha1.AnnotationGuardOnLockLost, string(batchv1alpha1.LockLostDelete)),
			"on-lock-lost Ignore":  annotate(batchv1alpha1.AnnotationGuardOnLockLost, string(batchv1alpha1.LockLostIgnore)),
		} {
			t.Run(name, func(t *testing.T) {
				g := NewWithT(t)
				j := guardedJob(opt)
				g.Expect(k8s.Create(context.Background(), j, client.DryRunAll)).To(Succeed())
				g.Expect(j.Spec.Suspend).To(HaveValue(BeTrue()))
			})
		}
	})
}

// TestGuardRefusesWhatCannotBeGuarded: each Job is refused at CREATE with a message that names
// the field at fault.
func TestGuardRefusesWhatCannotBeGuarded(t *testing.T) {
	eachPath(t, func(t *testing.T, k8s client.Client) {
		const (
			lockLabel = "metadata.labels['" + batchv1alpha1.LabelGuardLock + "']"
			scope     = "metadata.annotations['" + batchv1alpha1.AnnotationGuardScope + "']"
			priority  = "metadata.annotations['" + batchv1alpha1.AnnotationGuardPriority + "']"
			ttl       = "metadata.annotations['" + batchv1alpha1.AnnotationGuardTTL + "']"
			onLost    = "metadata.annotations['" + batchv1alpha1.AnnotationGuardOnLockLost + "']"
		)
		manualSelector := func(j *batchv1.Job) {
			j.Spec.ManualSelector = ptr.To(true)
			j.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "mine"}}
			j.Spec.Template.Labels = map[string]string{"app": "mine"}
		}
		for name, tc := range map[string]struct {
			opt  func(*batchv1.Job)
			want string
		}{
			"a manual selector":              {manualSelector, "spec.manualSelector must not be true"},
			"a lock name with upper case":    {label(batchv1alpha1.LabelGuardLock, "DB_Migrate"), lockLabel + " must be a lock name"},
			"a lock name with an empty part": {label(batchv1alpha1.LabelGuardLock, "db..migrate"), lockLabel + " must be a lock name"},
			"an empty lock name":             {label(batchv1alpha1.LabelGuardLock, ""), lockLabel + " must be a lock name"},
			"a scope in lower case":          {annotate(batchv1alpha1.AnnotationGuardScope, "cluster"), scope + " must be Namespace or Cluster"},
			"an empty scope":                 {annotate(batchv1alpha1.AnnotationGuardScope, ""), scope + " must be Namespace or Cluster"},
			"a priority above 1000":          {annotate(batchv1alpha1.AnnotationGuardPriority, "1001"), priority + " must be an integer from -1000 to 1000"},
			"a priority below -1000":         {annotate(batchv1alpha1.AnnotationGuardPriority, "-1001"), priority + " must be an integer"},
			"a priority of many digits":      {annotate(batchv1alpha1.AnnotationGuardPriority, "99999999999999999999"), priority + " must be an integer"},
			"a priority that is a word":      {annotate(batchv1alpha1.AnnotationGuardPriority, "high"), priority + " must be an integer"},
			"a ttl below 1s":                 {annotate(batchv1alpha1.AnnotationGuardTTL, "999ms"), ttl + " must be a Go duration from 1s to 24h"},
			"a ttl above 24h":                {annotate(batchv1alpha1.AnnotationGuardTTL, "24h0m0.001s"), ttl + " must be a Go duration"},
			"a ttl in days":                  {annotate(batchv1alpha1.AnnotationGuardTTL, "1d"), ttl + " must be a Go duration"},
			"a ttl without a unit":           {annotate(batchv1alpha1.AnnotationGuardTTL, "30"), ttl + " must be a Go duration"},
			"an on-lock-lost in lower case":  {annotate(batchv1alpha1.AnnotationGuardOnLockLost, "suspend"), onLost + " must be Suspend, Delete or Ignore"},
			"a LockedJob's Job with a lock":  {label(batchv1alpha1.LabelLockedJob, "nightly"), lockLabel + " must not be set on a Job of a LockedJob"},
		} {
			t.Run(name, func(t *testing.T) {
				g := NewWithT(t)
				g.Expect(k8s.Create(context.Background(), guardedJob(tc.opt))).To(MatchError(ContainSubstring(tc.want)))
			})
		}
	})
}

// TestGuardRefusesAnUnboundedTTL: a duration past what an int64 of nanoseconds holds matches
// DurationPattern, and duration() fails on it; the Job is refused all the same (failurePolicy
// Fail), by an error that names the annotation's rule.
func TestGuardRefusesAnUnboundedTTL(t *testing.T) {
	eachPath(t, func(t *testing.T, k8s client.Client) {
		g := NewWithT(t)
		err := k8s.Create(context.Background(), guardedJob(annotate(batchv1alpha1.AnnotationGuardTTL, "9999999999999999999h")))
		g.Expect(err).To(MatchError(ContainSubstring(batchv1alpha1.AnnotationGuardTTL)))
	})
}

// TestGuardRefusesAChangedLock: on UPDATE the lock label and the scope are fixed (a lock changed
// under its holder would let two Jobs run), and a changed annotation is judged as at CREATE.
func TestGuardRefusesAChangedLock(t *testing.T) {
	eachPath(t, func(t *testing.T, k8s client.Client) {
		for name, tc := range map[string]struct {
			opt  func(*batchv1.Job)
			want string // empty: the update is let in
		}{
			"another lock":             {label(batchv1alpha1.LabelGuardLock, "db-backup"), "metadata.labels['" + batchv1alpha1.LabelGuardLock + "'] must not change or be removed"},
			"the lock label taken off": {unguard, "metadata.labels['" + batchv1alpha1.LabelGuardLock + "'] must not change or be removed"},
			"scope Cluster":            {annotate(batchv1alpha1.AnnotationGuardScope, "Cluster"), "metadata.annotations['" + batchv1alpha1.AnnotationGuardScope + "'] must not change"},
			"a bad ttl":                {annotate(batchv1alpha1.AnnotationGuardTTL, "forever"), "metadata.annotations['" + batchv1alpha1.AnnotationGuardTTL + "'] must be a Go duration"},
			"a Kueue queue added":      {label("kueue.x-k8s.io/queue-name", "batch"), "metadata.labels['kueue.x-k8s.io/queue-name'] must not be added to or taken off"},
			// Namespace is the default: the lock's key stays the same.
			"scope Namespace spelt out": {opt: annotate(batchv1alpha1.AnnotationGuardScope, "Namespace")},
			"another label":             {opt: label("team", "a")},
			"a good priority":           {opt: annotate(batchv1alpha1.AnnotationGuardPriority, "10")},
		} {
			t.Run(name, func(t *testing.T) {
				g := NewWithT(t)
				ctx := context.Background()
				j := guardedJob()
				g.Expect(k8s.Create(ctx, j)).To(Succeed())
				tc.opt(j)
				err := k8s.Update(ctx, j)
				if tc.want == "" {
					g.Expect(err).NotTo(HaveOccurred())
					return
				}
				g.Expect(err).To(MatchError(ContainSubstring(tc.want)))
			})
		}
	})
}

// TestLabelAddedByUpdateDoesNotSuspend: the mutating policy acts on CREATE only. A Job that
// exists may have started already, and suspending it would not undo what it ran unguarded; its
// pod template is immutable, so the lock's env could not be added either. The label is still
// judged (here: accepted); guarding such a Job is the reconciler's decision, not admission's.
func TestLabelAddedByUpdateDoesNotSuspend(t *testing.T) {
	eachPath(t, func(t *testing.T, k8s client.Client) {
		g := NewWithT(t)
		ctx := context.Background()
		j := guardedJob(unguard)
		g.Expect(k8s.Create(ctx, j)).To(Succeed())
		label(batchv1alpha1.LabelGuardLock, "db-migrate")(j)
		g.Expect(k8s.Update(ctx, j)).To(Succeed())

		got := &batchv1.Job{}
		g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(j), got)).To(Succeed())
		g.Expect(got.Labels).To(HaveKeyWithValue(batchv1alpha1.LabelGuardLock, "db-migrate"))
		g.Expect(got.Spec.Suspend).To(HaveValue(BeFalse()))
		g.Expect(got.Spec.Template.Spec.Containers[0].Env).To(BeEmpty())
	})
}

// TestGuardFailsClosed: a guarded Job is not let in when the gate cannot run, as the API server
// holds the policies, and as it holds the webhook.
func TestGuardFailsClosed(t *testing.T) {
	t.Run(pathPolicy, func(t *testing.T) {
		g := NewWithT(t)
		ctx := context.Background()
		k8s := pathNamed(t, pathPolicy).k8s
		m := &admissionregistrationv1.MutatingAdmissionPolicy{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Name: jobMutatePolicy}, m)).To(Succeed())
		g.Expect(m.Spec.FailurePolicy).To(HaveValue(Equal(admissionregistrationv1.Fail)))
		g.Expect(m.Spec.ReinvocationPolicy).To(Equal(admissionregistrationv1.NeverReinvocationPolicy))
		validatingFailsClosed(t, k8s, jobValidatePolicy, jobValidatePolicy+"-binding")
	})
	t.Run(pathWebhook, func(t *testing.T) {
		k8s := pathNamed(t, pathWebhook).k8s
		hook := webhookNamed(t, k8s, "guard-job.lockedjob.dev")
		g := NewWithT(t)
		g.Expect(hook.ObjectSelector).To(Equal(&metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: batchv1alpha1.LabelGuardLock, Operator: metav1.LabelSelectorOpExists},
			{Key: batchv1alpha1.LabelLockedJob, Operator: metav1.LabelSelectorOpDoesNotExist},
		}}), "the policy's objectSelector")
		validatingFailsClosed(t, k8s, jobValidatePolicy, jobValidatePolicy+"-binding")
	})
}

// validatingFailsClosed: the validating policy of that name refuses what it cannot judge, and its
// binding denies.
func validatingFailsClosed(t *testing.T, k8s client.Client, name, binding string) {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	v := &admissionregistrationv1.ValidatingAdmissionPolicy{}
	g.Expect(k8s.Get(ctx, client.ObjectKey{Name: name}, v)).To(Succeed())
	g.Expect(v.Spec.FailurePolicy).To(HaveValue(Equal(admissionregistrationv1.Fail)))
	vb := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
	g.Expect(k8s.Get(ctx, client.ObjectKey{Name: binding}, vb)).To(Succeed())
	g.Expect(vb.Spec.ValidationActions).To(Equal([]admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}))
}

// webhookNamed is the webhook of that name in the webhook path's configuration, after checking
// what both of its webhooks share with the policies: CREATE only, failurePolicy Fail, never
// reinvoked, no side effects.
func webhookNamed(t *testing.T, k8s client.Client, name string) admissionregistrationv1.MutatingWebhook {
	t.Helper()
	g := NewWithT(t)
	c := &admissionregistrationv1.MutatingWebhookConfiguration{}
	g.Expect(k8s.Get(context.Background(), client.ObjectKey{Name: webhookConfiguration}, c)).To(Succeed())
	g.Expect(c.Webhooks).To(HaveLen(2))
	for _, h := range c.Webhooks {
		if h.Name != name {
			continue
		}
		g.Expect(h.FailurePolicy).To(HaveValue(Equal(admissionregistrationv1.Fail)))
		g.Expect(h.ReinvocationPolicy).To(HaveValue(Equal(admissionregistrationv1.NeverReinvocationPolicy)))
		g.Expect(h.SideEffects).To(HaveValue(Equal(admissionregistrationv1.SideEffectClassNone)))
		g.Expect(h.Rules).To(HaveLen(1))
		g.Expect(h.Rules[0].Operations).To(Equal([]admissionregistrationv1.OperationType{admissionregistrationv1.Create}))
		g.Expect(h.ClientConfig.CABundle).NotTo(BeEmpty(), "the rotator injected its CA")
		return h
	}
	t.Fatalf("%s has no webhook %s", webhookConfiguration, name)
	return admissionregistrationv1.MutatingWebhook{}
}

// TestGuardRulesAreTheLockRules: the validating policy spells the lock name's and the duration's
// patterns of api/v1alpha1, the ones the LockedJob CRD checks spec.lock with.
func TestGuardRulesAreTheLockRules(t *testing.T) {
	g := NewWithT(t)
	all := expressions(t, policy(t, jobValidatePolicy))
	g.Expect(all).To(ContainSubstring("'" + batchv1alpha1.LockNamePattern + "'"))
	g.Expect(all).To(ContainSubstring("'" + batchv1alpha1.DurationPattern + "'"))
}

// TestSuspendedGuardedJobTakesTheLockAnnotations: what the operator will do once it holds the
// lock is allowed on a guarded Job that never ran: write the pod template's annotations the env
// reads, then unsuspend it; the guard lets both updates in.
func TestSuspendedGuardedJobTakesTheLockAnnotations(t *testing.T) {
	eachPath(t, func(t *testing.T, k8s client.Client) {
		g := NewWithT(t)
		ctx := context.Background()
		j := guardedJob()
		g.Expect(k8s.Create(ctx, j)).To(Succeed())
		j.Spec.Template.Annotations = map[string]string{
			batchv1alpha1.AnnotationFencingToken: "1780000000000001",
			batchv1alpha1.AnnotationLock:         "db-migrate",
			batchv1alpha1.AnnotationHolder:       "default/" + j.Name,
			batchv1alpha1.AnnotationSlot:         "0",
		}
		g.Expect(k8s.Update(ctx, j)).To(Succeed())
		j.Spec.Suspend = ptr.To(false)
		g.Expect(k8s.Update(ctx, j)).To(Succeed())
		g.Expect(j.Spec.Template.Annotations).To(HaveKeyWithValue(batchv1alpha1.AnnotationFencingToken, "1780000000000001"))
	})
}
