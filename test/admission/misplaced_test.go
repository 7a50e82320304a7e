package admission_test

import (
	"context"
	"reflect"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
)

// misplacedPolicy is the name of the policy of misplaced labels in config/guard, built alone.
const misplacedPolicy = "guard-misplaced"

// The fields the policy of misplaced labels names, for the lock label and a lock term.
const (
	jobLockLabel          = "metadata.labels['" + batchv1alpha1.LabelGuardLock + "']"
	podTemplateLockLabel  = "spec.template.metadata.labels['" + batchv1alpha1.LabelGuardLock + "']"
	jobTemplateLockLabel  = "spec.jobTemplate.metadata.labels['" + batchv1alpha1.LabelGuardLock + "']"
	cronPodTemplateLabel  = "spec.jobTemplate.spec.template.metadata.labels['" + batchv1alpha1.LabelGuardLock + "']"
	cronLockLabel         = "metadata.labels['" + batchv1alpha1.LabelGuardLock + "'] of a CronJob"
	jobTemplateAnnotation = "spec.jobTemplate.metadata.annotations['"
)

// put sets k in the map m points to, making the map if there is none: an object read back from
// the API server has none where it had no entry.
func put(m *map[string]string, k, v string) {
	if *m == nil {
		*m = map[string]string{}
	}
	(*m)[k] = v
}

// jobLabel labels the Job; templateLock labels its pod template for a lock.
func jobLabel(k, v string) func(*batchv1.Job) {
	return func(j *batchv1.Job) { put(&j.Labels, k, v) }
}

func templateLock(lock string) func(*batchv1.Job) {
	return func(j *batchv1.Job) { put(&j.Spec.Template.Labels, batchv1alpha1.LabelGuardLock, lock) }
}

// cronJob is a CronJob without any of our labels or annotations, and options that add them.
func cronJob(opts ...func(*batchv1.CronJob)) *batchv1.CronJob {
	c := &batchv1.CronJob{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "nightly-", Namespace: namespace},
		Spec: batchv1.CronJobSpec{
			Schedule: "0 3 * * *",
			JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{
				Spec: corev1.PodSpec{
					RestartPolicy: corev1.RestartPolicyNever,
					Containers:    []corev1.Container{{Name: "main", Image: "busybox"}},
				},
			}}},
		},
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

// lockOnCronJob labels the CronJob itself for lock db-migrate; lockOnCronPods the pod template of
// its Jobs; jobTemplateLabel labels its spec.jobTemplate.metadata.
func lockOnCronJob(c *batchv1.CronJob) { put(&c.Labels, batchv1alpha1.LabelGuardLock, "db-migrate") }

func lockOnCronPods(c *batchv1.CronJob) {
	put(&c.Spec.JobTemplate.Spec.Template.Labels, batchv1alpha1.LabelGuardLock, "db-migrate")
}

func jobTemplateLabel(k, v string) func(*batchv1.CronJob) {
	return func(c *batchv1.CronJob) { put(&c.Spec.JobTemplate.Labels, k, v) }
}

// cronAnnotate annotates the CronJob itself; jobTemplateAnnotate its spec.jobTemplate.metadata.
func cronAnnotate(k, v string) func(*batchv1.CronJob) {
	return func(c *batchv1.CronJob) { put(&c.Annotations, k, v) }
}

func jobTemplateAnnotate(k, v string) func(*batchv1.CronJob) {
	return func(c *batchv1.CronJob) { put(&c.Spec.JobTemplate.Annotations, k, v) }
}

// operatorsJob is a Job as a LockedJob (or a LockedCronJob's LockedJob) makes it
// (controllers/lockedjob/job.go): labelled batch.lockedjob.dev/lockedjob, annotated with its
// fence, lock, holder and slot, and here with a template whose pods a user labelled for the lock
// and whose Job carries a lock term.
func operatorsJob() *batchv1.Job {
	lockInfo := map[string]string{
		batchv1alpha1.AnnotationFencingToken: "1780000000000001",
		batchv1alpha1.AnnotationLock:         "db-migrate",
		batchv1alpha1.AnnotationHolder:       "default/nightly",
		batchv1alpha1.AnnotationSlot:         "0",
	}
	j := guardedJob(unguard, label(batchv1alpha1.LabelLockedJob, "nightly"),
		templateLock("db-migrate"),
		annotate(batchv1alpha1.AnnotationGuardTTL, "30s"),
		annotate(batchv1alpha1.AnnotationLockedJob, "nightly"))
	for k, v := range lockInfo {
		annotate(k, v)(j)
	}
	j.Spec.Template.Annotations = lockInfo
	return j
}

// TestMisplacedLabelIsRefused: a Job or CronJob whose lock label (or a lock term) sits where it
// guards nothing is refused at CREATE, by a message that names the field at fault and the one
// where the label belongs.
func TestMisplacedLabelIsRefused(t *testing.T) {
	eachPath(t, func(t *testing.T, k8s client.Client) {
		const lock = batchv1alpha1.LabelGuardLock
		for name, tc := range map[string]struct {
			obj  client.Object
			want []string
		}{
			"a Job labelled on its pod template only": {
				obj:  guardedJob(unguard, jobLabel("app", "migrate"), templateLock("db-migrate")),
				want: []string{podTemplateLockLabel, jobLockLabel + " of the Job is where the lock label belongs"},
			},
			"a Job with a lock term and no lock label": {
				obj:  guardedJob(unguard, annotate(batchv1alpha1.AnnotationGuardTTL, "30s")),
				want: []string{"metadata.annotations['" + batchv1alpha1.AnnotationGuardTTL + "'] is a term", jobLockLabel + " is not set"},
			},
			"a CronJob labelled on its own metadata": {
				obj:  cronJob(lockOnCronJob),
				want: []string{cronLockLabel + " is not copied to its Jobs", jobTemplateLockLabel + " is where"},
			},
			"a CronJob labelled on its own metadata and its pod template": {
				obj:  cronJob(lockOnCronJob, jobTemplateLabel("app", "migrate"), lockOnCronPods),
				want: []string{cronLockLabel + " is not copied to its Jobs", jobTemplateLockLabel + " is where"},
			},
			"a CronJob labelled for another lock than its Jobs": {
				obj:  cronJob(lockOnCronJob, jobTemplateLabel(lock, "db-backup")),
				want: []string{cronLockLabel + " is not copied to its Jobs", jobTemplateLockLabel + " is where"},
			},
			"a CronJob with a lock term on its own metadata": {
				obj: cronJob(jobTemplateLabel(lock, "db-migrate"), cronAnnotate(batchv1alpha1.AnnotationGuardScope, "Cluster")),
				want: []string{"metadata.annotations['" + batchv1alpha1.AnnotationGuardScope + "'] of a CronJob is not copied to its Jobs",
					jobTemplateAnnotation + batchv1alpha1.AnnotationGuardScope + "'] is where"},
			},
			"a CronJob with another lock term than its Jobs": {
				obj: cronJob(jobTemplateLabel(lock, "db-migrate"), cronAnnotate(batchv1alpha1.AnnotationGuardPriority, "10"),
					jobTemplateAnnotate(batchv1alpha1.AnnotationGuardPriority, "5")),
				want: []string{"metadata.annotations['" + batchv1alpha1.AnnotationGuardPriority + "'] of a CronJob is not copied to its Jobs"},
			},
			"a CronJob labelled on its pod template only": {
				obj:  cronJob(jobTemplateLabel("app", "migrate"), lockOnCronPods),
				want: []string{cronPodTemplateLabel + " goes to the pods", jobTemplateLockLabel + " is where"},
			},
			"a CronJob with a lock term on its jobTemplate and no lock label": {
				obj: cronJob(jobTemplateAnnotate(batchv1alpha1.AnnotationGuardOnLockLost, "Delete")),
				want: []string{jobTemplateAnnotation + batchv1alpha1.AnnotationGuardOnLockLost + "'] is a term",
					jobTemplateLockLabel + " is not set"},
			},
		} {
			t.Run(name, func(t *testing.T) {
				g := NewWithT(t)
				err := k8s.Create(context.Background(), tc.obj, client.DryRunAll)
				g.Expect(err).To(HaveOccurred())
				g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
				for _, w := range tc.want {
					g.Expect(err.Error()).To(ContainSubstring(w))
				}
				g.Expect(err.Error()).To(ContainSubstring(misplacedPolicy))
			})
		}
	})
}

// TestWellPlacedLabelIsLetIn: the lock label where it guards (a Job's metadata, a CronJob's
// jobTemplate), also repeated on the pod template or the CronJob with the same value (as
// kustomize's labels write it), the operator's own Jobs and Jobs and CronJobs without our keys are
// let in.
func TestWellPlacedLabelIsLetIn(t *testing.T) {
	eachPath(t, func(t *testing.T, k8s client.Client) {
		const lock = batchv1alpha1.LabelGuardLock
		for name, obj := range map[string]client.Object{
			"an unlabelled Job":                  guardedJob(unguard),
			"a guarded Job":                      guardedJob(),
			"a guarded Job with its terms":       guardedJob(annotate(batchv1alpha1.AnnotationGuardTTL, "30s")),
			"a guarded Job, its pods labelled":   guardedJob(templateLock("db-migrate")),
			"a guarded Job, its pods relabelled": guardedJob(templateLock("another")),
			"the operator's Job":                 operatorsJob(),
			// The Job API gives a Job without labels its pod template's (TestJobWithoutLabelsIsGuardedByItsPodTemplate).
			"a Job without labels, its pods labelled": guardedJob(unguard, templateLock("db-migrate")),
			"a Job annotated with its lock":           guardedJob(unguard, annotate(batchv1alpha1.AnnotationLock, "db-migrate")),
			"an unlabelled CronJob":                   cronJob(),
			"a guarded CronJob":                       cronJob(jobTemplateLabel(lock, "db-migrate")),
			"a guarded CronJob with its terms": cronJob(jobTemplateLabel(lock, "db-migrate"),
				jobTemplateAnnotate(batchv1alpha1.AnnotationGuardScope, "Cluster")),
			"a guarded CronJob, its pods labelled": cronJob(jobTemplateLabel(lock, "db-migrate"), lockOnCronPods),
			// Its Jobs have no labels of their own, so they take their pod template's.
			"a CronJob whose Jobs have no labels, its pods labelled": cronJob(lockOnCronPods),
			"a CronJob labelled alike on itself and its pods, its Jobs not": cronJob(lockOnCronJob,
				lockOnCronPods),
			"a CronJob labelled everywhere alike": cronJob(lockOnCronJob, jobTemplateLabel(lock, "db-migrate"),
				lockOnCronPods),
			"a CronJob annotated on both alike": cronJob(jobTemplateLabel(lock, "db-migrate"),
				cronAnnotate(batchv1alpha1.AnnotationGuardTTL, "1m"), jobTemplateAnnotate(batchv1alpha1.AnnotationGuardTTL, "1m")),
		} {
			t.Run(name, func(t *testing.T) {
				g := NewWithT(t)
				g.Expect(k8s.Create(context.Background(), obj, client.DryRunAll)).To(Succeed())
			})
		}
	})
}

// TestJobWithoutLabelsIsGuardedByItsPodTemplate: the Job API gives a Job that has no labels of its
// own its pod template's before admission, so one labelled only on its pod template reaches the
// gate labelled, and is created suspended with the lock's environment; a CronJob's Job whose
// jobTemplate has no labels is such a Job. The policy of misplaced labels relies on it.
func TestJobWithoutLabelsIsGuardedByItsPodTemplate(t *testing.T) {
	eachPath(t, func(t *testing.T, k8s client.Client) {
		g := NewWithT(t)
		j := guardedJob(unguard, templateLock("db-migrate"))
		g.Expect(k8s.Create(context.Background(), j, client.DryRunAll)).To(Succeed())
		g.Expect(j.Labels).To(HaveKeyWithValue(batchv1alpha1.LabelGuardLock, "db-migrate"))
		g.Expect(j.Spec.Suspend).To(HaveValue(BeTrue()))
		g.Expect(j.Spec.Template.Spec.Containers[0].Env).To(Equal(lockEnv))
	})
}

// TestMisplacedLabelAddedByUpdateIsRefused: on UPDATE, what the update brings in is judged as at
// CREATE.
func TestMisplacedLabelAddedByUpdateIsRefused(t *testing.T) {
	eachPath(t, func(t *testing.T, k8s client.Client) {
		const lock = batchv1alpha1.LabelGuardLock
		ctx := context.Background()
		t.Run("a lock term on an unlabelled Job", func(t *testing.T) {
			g := NewWithT(t)
			j := guardedJob(unguard)
			g.Expect(k8s.Create(ctx, j)).To(Succeed())
			annotate(batchv1alpha1.AnnotationGuardPriority, "10")(j)
			g.Expect(k8s.Update(ctx, j)).To(MatchError(ContainSubstring("metadata.annotations['" + batchv1alpha1.AnnotationGuardPriority + "'] is a term")))
		})
		unlabelled := cronJob(jobTemplateLabel("team", "a"))
		guarded := cronJob(jobTemplateLabel(lock, "db-migrate"))
		for name, tc := range map[string]struct {
			from *batchv1.CronJob
			opt  func(*batchv1.CronJob)
			want string
		}{
			"the lock label on the CronJob":  {unlabelled, lockOnCronJob, cronLockLabel},
			"the lock label on its pods":     {unlabelled, lockOnCronPods, cronPodTemplateLabel},
			"a lock term on the CronJob":     {guarded, cronAnnotate(batchv1alpha1.AnnotationGuardTTL, "1m"), "metadata.annotations['" + batchv1alpha1.AnnotationGuardTTL + "'] of a CronJob"},
			"a lock term on its jobTemplate": {unlabelled, jobTemplateAnnotate(batchv1alpha1.AnnotationGuardTTL, "1m"), jobTemplateAnnotation + batchv1alpha1.AnnotationGuardTTL + "'] is a term"},
			"the lock label moved off its Jobs": {guarded, func(c *batchv1.CronJob) {
				delete(c.Spec.JobTemplate.Labels, lock)
				lockOnCronJob(c)
			}, cronLockLabel},
		} {
			t.Run(name, func(t *testing.T) {
				g := NewWithT(t)
				c := tc.from.DeepCopy()
				g.Expect(k8s.Create(ctx, c)).To(Succeed())
				tc.opt(c)
				g.Expect(k8s.Update(ctx, c)).To(MatchError(ContainSubstring(tc.want)))
			})
		}
	})
}

// TestMisplacedLabelLetInBeforeThePolicy: a Job or CronJob created while the policy was not in
// force (here: its binding taken away) can still be updated in what the policy does not judge,
// lose its finalizers, be deleted, and be fixed; what an update adds in the wrong place is refused.
func TestMisplacedLabelLetInBeforeThePolicy(t *testing.T) {
	eachPath(t, func(t *testing.T, k8s client.Client) {
		const lock, finalizer = batchv1alpha1.LabelGuardLock, "example.com/keep"
		ctx := context.Background()
		podLabelled := guardedJob(unguard, jobLabel("app", "migrate"), templateLock("db-migrate"))
		termed := guardedJob(unguard, annotate(batchv1alpha1.AnnotationGuardTTL, "30s"))
		cronLabelled := cronJob(lockOnCronJob, cronAnnotate(batchv1alpha1.AnnotationGuardTTL, "1m"))
		objs := []client.Object{podLabelled, termed, cronLabelled}
		for _, o := range objs {
			o.SetFinalizers([]string{finalizer})
		}
		letInWithoutThePolicy(t, k8s, objs...)

		g := NewWithT(t)
		g.Expect(update(ctx, k8s, podLabelled, func() { jobLabel("team", "a")(podLabelled) })).To(Succeed(), "another label")
		g.Expect(update(ctx, k8s, termed, func() { annotate(batchv1alpha1.AnnotationGuardPriority, "10")(termed) })).To(
			MatchError(ContainSubstring("metadata.annotations['"+batchv1alpha1.AnnotationGuardPriority+"'] is a term")), "a second term")
		g.Expect(update(ctx, k8s, termed, func() { annotate(batchv1alpha1.AnnotationGuardTTL, "1m")(termed) })).To(Succeed(), "the term it had, changed")
		g.Expect(update(ctx, k8s, cronLabelled, func() { cronLabelled.Spec.Schedule = "0 4 * * *" })).To(Succeed(), "another schedule")
		g.Expect(update(ctx, k8s, cronLabelled, func() { cronAnnotate(batchv1alpha1.AnnotationGuardScope, "Cluster")(cronLabelled) })).To(
			MatchError(ContainSubstring("metadata.annotations['"+batchv1alpha1.AnnotationGuardScope+"'] of a CronJob")), "a second term")
		g.Expect(update(ctx, k8s, cronLabelled, func() { jobTemplateLabel(lock, "db-migrate")(cronLabelled) })).To(Succeed(), "the label put where it belongs too")

		for _, o := range objs {
			g.Expect(update(ctx, k8s, o, func() { o.SetFinalizers(nil) })).To(Succeed(), "%s: finalizers removed", o.GetName())
			// Background: a Job's default, orphan, leaves a finalizer for a garbage collector that does not run here.
			g.Expect(k8s.Delete(ctx, o, client.PropagationPolicy(metav1.DeletePropagationBackground))).To(Succeed())
			g.Eventually(func() error { return k8s.Get(ctx, client.ObjectKeyFromObject(o), o) }).WithTimeout(timeout).
				Should(Satisfy(apierrors.IsNotFound), "%s is deleted", o.GetName())
		}
	})
}

// TestMisplacedPolicyFailsOpen: unlike the gate's policies, the policy of misplaced labels lets a
// write in when it cannot run: it sees every Job and CronJob of the cluster, and is a guard-rail,
// not the gate. What it judges, it denies.
func TestMisplacedPolicyFailsOpen(t *testing.T) {
	eachPath(t, func(t *testing.T, k8s client.Client) {
		g := NewWithT(t)
		ctx := context.Background()
		v := &admissionregistrationv1.ValidatingAdmissionPolicy{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Name: misplacedPolicy}, v)).To(Succeed())
		g.Expect(v.Spec.FailurePolicy).To(HaveValue(Equal(admissionregistrationv1.Ignore)))
		g.Expect(v.Spec.MatchConditions).NotTo(BeEmpty(), "every Job and CronJob reaches it: the match conditions keep the cost down")
		vb := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Name: misplacedPolicy + "-binding"}, vb)).To(Succeed())
		g.Expect(vb.Spec.PolicyName).To(Equal(misplacedPolicy))
		g.Expect(vb.Spec.ValidationActions).To(Equal([]admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}))
	})
}

// update writes mutate's change to o, read fresh first (into a zeroed o: decoding into a map
// keeps the entries it had).
func update(ctx context.Context, k8s client.Client, o client.Object, mutate func()) error {
	key := client.ObjectKeyFromObject(o)
	v := reflect.ValueOf(o).Elem()
	v.Set(reflect.Zero(v.Type()))
	if err := k8s.Get(ctx, key, o); err != nil {
		return err
	}
	mutate()
	return k8s.Update(ctx, o)
}

// letInWithoutThePolicy creates objs while the policy of misplaced labels is not bound, as objects
// created before it was installed, then binds it again and waits until it is in force.
func letInWithoutThePolicy(t *testing.T, k8s client.Client, objs ...client.Object) {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	binding := policy(t, misplacedPolicy+"-binding")
	probe := func() error {
		return k8s.Create(ctx, guardedJob(unguard, jobLabel("app", "probe"), templateLock("probe")), client.DryRunAll)
	}
	g.Expect(k8s.Delete(ctx, binding.DeepCopy())).To(Succeed())
	rebind := func() {
		g.Expect(client.IgnoreAlreadyExists(k8s.Create(ctx, binding.DeepCopy()))).To(Succeed())
		g.Eventually(probe).WithTimeout(timeout).WithPolling(100*time.Millisecond).Should(HaveOccurred(), "the policy is in force again")
	}
	defer rebind()
	g.Eventually(probe).WithTimeout(timeout).WithPolling(100*time.Millisecond).Should(Succeed(), "the policy is out of force")
	for _, o := range objs {
		g.Expect(k8s.Create(ctx, o)).To(Succeed(), "%T %s", o, o.GetGenerateName())
	}
}
