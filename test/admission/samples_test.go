package admission_test

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/test/utils"
)

// cronSample is the guarded CronJob of config/samples that `make demo` applies with
// LOCKEDJOB_DEMO_CRON=1 (hack/demo.sh, docs/demo.md).
const cronSample = "batch_v1_guarded_cronjob.yaml"

// TestSampleCronJobRunsAreGuarded: the guarded CronJob sample is let in (its lock label is where
// the gate looks, on spec.jobTemplate.metadata), and a run made from it as the CronJob controller
// makes one (the jobTemplate's labels and annotations, the CronJob as controller) is created
// suspended with the lock's env after the sample's own. Its shape is what the demo shows: the
// CronJob lets runs overlap (concurrencyPolicy Allow) and each run writes for longer than the
// minute between runs, so the next one waits for the lock.
func TestSampleCronJobRunsAreGuarded(t *testing.T) {
	root, err := utils.ProjectDir()
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	b, err := os.ReadFile(filepath.Join(root, "config", "samples", cronSample))
	NewWithT(t).Expect(err).NotTo(HaveOccurred())

	t.Run("shape", func(t *testing.T) {
		g := NewWithT(t)
		cron := &batchv1.CronJob{}
		g.Expect(yaml.UnmarshalStrict(b, cron)).To(Succeed())
		g.Expect(cron.Spec.ConcurrencyPolicy).To(Equal(batchv1.AllowConcurrent))
		g.Expect(cron.Spec.Schedule).To(Equal("* * * * *"))
		g.Expect(cron.Spec.JobTemplate.Labels).To(HaveKeyWithValue(batchv1alpha1.LabelGuardLock, "nightly-migration"))
		g.Expect(runLength(t, cron.Spec.JobTemplate.Spec.Template.Spec.Containers[0].Args)).To(
			BeNumerically(">", time.Minute+5*time.Second), "a run must outlast the minute to its next run, with room to spare")
	})

	eachPath(t, func(t *testing.T, k8s client.Client) {
		g := NewWithT(t)
		ctx := context.Background()
		cron := &batchv1.CronJob{}
		g.Expect(yaml.UnmarshalStrict(b, cron)).To(Succeed())
		cron.Namespace = namespace
		g.Expect(k8s.Create(ctx, cron)).To(Succeed())
		t.Cleanup(func() { _ = k8s.Delete(context.Background(), cron) })

		run := &batchv1.Job{
			ObjectMeta: metav1.ObjectMeta{
				Name:            cron.Name + "-29000000",
				Namespace:       namespace,
				Labels:          maps.Clone(cron.Spec.JobTemplate.Labels),
				Annotations:     maps.Clone(cron.Spec.JobTemplate.Annotations),
				OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(cron, batchv1.SchemeGroupVersion.WithKind("CronJob"))},
			},
			Spec: *cron.Spec.JobTemplate.Spec.DeepCopy(),
		}
		g.Expect(k8s.Create(ctx, run)).To(Succeed())
		t.Cleanup(func() { _ = k8s.Delete(context.Background(), run) })
		g.Expect(run.Spec.Suspend).To(HaveValue(BeTrue()))
		own := cron.Spec.JobTemplate.Spec.Template.Spec.Containers[0].Env
		g.Expect(run.Spec.Template.Spec.Containers[0].Env).To(Equal(append(slices.Clone(own), lockEnv...)))
	})
}

// runLength is how long fencedwriter writes with these args: --writes=N, --interval=D (its
// defaults 5 and 1s), N-1 intervals.
func runLength(t *testing.T, args []string) time.Duration {
	t.Helper()
	writes, interval := 5, time.Second
	for _, a := range args {
		k, v, _ := strings.Cut(a, "=")
		var err error
		switch k {
		case "--writes":
			writes, err = strconv.Atoi(v)
		case "--interval":
			interval, err = time.ParseDuration(v)
		}
		if err != nil {
			t.Fatalf("fencedwriter arg %q: %v", a, err)
		}
	}
	return time.Duration(writes-1) * interval
}
