package controllers

import (
	"maps"
	"os"
	"path/filepath"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
)

// The API server refuses a bad LockedCronJob with a message naming the field; what only the
// parser catches is the controller's (ScheduleValid, see lockedcronjob_controller_test.go). Each
// entry is a server-side dry run, so nothing is stored.
var _ = Describe("LockedCronJob validation", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	template := map[string]any{"spec": map[string]any{
		"lock": map[string]any{"name": "db"},
		"jobTemplate": map[string]any{"spec": map[string]any{"template": map[string]any{"spec": map[string]any{
			"restartPolicy": "Never",
			"containers":    []any{map[string]any{"name": "c", "image": "busybox"}},
		}}}},
	}}
	rawCron := func(name string, spec map[string]any) *unstructured.Unstructured {
		if _, ok := spec["lockedJobTemplate"]; !ok {
			spec["lockedJobTemplate"] = template
		}
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": batchv1alpha1.GroupVersion.String(),
			"kind":       "LockedCronJob",
			"metadata":   map[string]any{"name": name, "namespace": ns},
			"spec":       spec,
		}}
	}
	schedule := func(s string) map[string]any { return map[string]any{"schedule": s} }
	with := func(extra map[string]any) map[string]any {
		spec := schedule("0 3 * * *")
		maps.Copy(spec, extra)
		return spec
	}

	DescribeTable("refuses bad input with a message naming the field",
		func(spec map[string]any, wantInMessage string) {
			err := k8sClient.Create(ctx, rawCron("bad", spec), client.DryRunAll)
			Expect(err).To(HaveOccurred())
			Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
			Expect(err.Error()).To(ContainSubstring(wantInMessage))
		},
		Entry("minute 61", schedule("61 * * * *"), "the minute (1st field) takes 0-59"),
		Entry("hour 24", schedule("0 24 * * *"), "the hour (2nd field) takes 0-23"),
		Entry("day of month 0", schedule("0 0 0 * *"), "the day of month (3rd field) takes 1-31"),
		Entry("day of month 32 in a list", schedule("0 0 1,32 * *"), "the day of month (3rd field)"),
		Entry("month 13", schedule("0 0 1 13 *"), "the month (4th field) takes 1-12 or JAN-DEC"),
		Entry("unknown month name", schedule("0 0 1 JANUARY *"), "the month (4th field)"),
		Entry("day of week 7", schedule("0 0 * * 7"), "the day of week (5th field) takes 0-6"),
		Entry("a step that is not a number", schedule("*/x * * * *"), "the minute (1st field)"),
		Entry("four fields", schedule("* * * *"), "spec.schedule must have five fields"),
		Entry("six fields (seconds)", schedule("0 * * * * *"), "spec.schedule must have five fields"),
		Entry("unknown macro", schedule("@fortnightly"), "spec.schedule must have five fields"),
		Entry("@every", schedule("@every 5m"), "spec.schedule must have five fields"),
		Entry("empty schedule", schedule(""), "spec.schedule"),
		Entry("CRON_TZ in the schedule", schedule("CRON_TZ=UTC 0 3 * * *"), "spec.schedule must not carry a time zone (TZ= or CRON_TZ=): set spec.timeZone"),
		Entry("TZ in the schedule", schedule("TZ=Europe/Berlin 0 3 * * *"), "spec.schedule must not carry a time zone"),
		Entry("missing schedule", map[string]any{}, "spec.schedule"),
		Entry("time zone Local", with(map[string]any{"timeZone": "Local"}), "spec.timeZone must be an explicit IANA time zone"),
		Entry("time zone with spaces", with(map[string]any{"timeZone": "Central European Time"}), "spec.timeZone"),
		Entry("negative startingDeadlineSeconds", with(map[string]any{"startingDeadlineSeconds": -1}), "spec.startingDeadlineSeconds"),
		Entry("startingDeadlineSeconds 0 (no run could ever start)", with(map[string]any{"startingDeadlineSeconds": 0}), "spec.startingDeadlineSeconds"),
		Entry("negative successfulJobsHistoryLimit", with(map[string]any{"successfulJobsHistoryLimit": -1}), "spec.successfulJobsHistoryLimit"),
		Entry("failedJobsHistoryLimit over 100", with(map[string]any{"failedJobsHistoryLimit": 101}), "spec.failedJobsHistoryLimit"),
		Entry("unknown onBusy", with(map[string]any{"onBusy": "Later"}), "spec.onBusy"),
		Entry("missing lockedJobTemplate", with(map[string]any{"lockedJobTemplate": nil}), "spec.lockedJobTemplate"),
		Entry("bad lock name in the template", with(map[string]any{"lockedJobTemplate": map[string]any{"spec": map[string]any{
			"lock": map[string]any{"name": "Not_A_Name"}, "jobTemplate": template["spec"].(map[string]any)["jobTemplate"],
		}}}), "spec.lockedJobTemplate.spec.lock.name"),
		// The LockedJob's own rules hold inside the template, under the template's path.
		Entry("restartPolicy Always in the template", with(map[string]any{"lockedJobTemplate": map[string]any{"spec": map[string]any{
			"lock": map[string]any{"name": "db"},
			"jobTemplate": map[string]any{"spec": map[string]any{"template": map[string]any{"spec": map[string]any{
				"restartPolicy": "Always", "containers": []any{map[string]any{"name": "c", "image": "busybox"}},
			}}}},
		}}}), "spec.lockedJobTemplate.spec.jobTemplate.spec.template.spec.restartPolicy"),
		Entry("ttl under 1s in the template", with(map[string]any{"lockedJobTemplate": map[string]any{"spec": map[string]any{
			"lock": map[string]any{"name": "db", "ttl": "500ms"}, "jobTemplate": template["spec"].(map[string]any)["jobTemplate"],
		}}}), "spec.lock.ttl must be at least 1s"),
	)

	It("refuses a name too long for the LockedJobs it creates", func() {
		err := k8sClient.Create(ctx, rawCron(strings.Repeat("a", 243), schedule("0 3 * * *")), client.DryRunAll)
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
		Expect(err.Error()).To(ContainSubstring("metadata.name must be at most 242 characters"))
		Expect(k8sClient.Create(ctx, rawCron(strings.Repeat("a", 242), schedule("0 3 * * *")), client.DryRunAll)).To(Succeed())
	})

	It("accepts the sample in config/samples", func() {
		b, err := os.ReadFile(filepath.Join("..", "config", "samples", "batch_v1alpha1_lockedcronjob.yaml"))
		Expect(err).NotTo(HaveOccurred())
		u := &unstructured.Unstructured{}
		Expect(yaml.Unmarshal(b, &u.Object)).To(Succeed())
		u.SetNamespace(ns)
		Expect(k8sClient.Create(ctx, u, client.DryRunAll)).To(Succeed())
		Expect(u.GetKind()).To(Equal("LockedCronJob"))
	})

	DescribeTable("accepts what CronJob accepts",
		func(s string) {
			Expect(k8sClient.Create(ctx, rawCron("good", schedule(s)), client.DryRunAll)).To(Succeed())
		},
		Entry(nil, "*/15 2-5 * * MON-FRI"),
		Entry(nil, "0 9 * * 1-5"),
		Entry(nil, "0 0 1 jan,Jul *"),
		Entry(nil, "5/10 * * * *"),
		Entry(nil, "? * * * ?"),
		Entry(nil, "0 0 29 2 *"),
		Entry(nil, "  0   3 * * *  "),
		Entry(nil, "@hourly"),
		Entry(nil, "@midnight"),
		Entry(nil, "@annually"),
		// Passes admission; the parser refuses it (the ScheduleValid condition says why).
		Entry(nil, "30-10 * * * *"),
	)
})
