package controllers

import (
	"maps"
	"os"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
)

// The API server itself must refuse bad LockedJobs, with a message that names the field. Each
// entry is sent as a server-side dry run, so nothing is stored.
var _ = Describe("LockedJob validation", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	// rawLockedJob builds an object from a plain map, so specs can send what typed Go cannot
	// (unknown enum values, unparsable durations, missing fields).
	rawLockedJob := func(spec map[string]any) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": batchv1alpha1.GroupVersion.String(),
			"kind":       "LockedJob",
			"metadata":   map[string]any{"name": "bad", "namespace": ns},
			"spec":       spec,
		}}
		return u
	}
	// jobTemplateWith returns a valid jobTemplate changed by edit, which gets the template's maps.
	jobTemplateWith := func(edit func(tmpl, spec, pod map[string]any)) map[string]any {
		pod := map[string]any{
			"restartPolicy": "Never",
			"containers":    []any{map[string]any{"name": "c", "image": "busybox"}},
		}
		spec := map[string]any{"template": map[string]any{"spec": pod}}
		tmpl := map[string]any{"spec": spec}
		if edit != nil {
			edit(tmpl, spec, pod)
		}
		return tmpl
	}
	jobTemplate := jobTemplateWith(nil)
	lockWith := func(extra map[string]any) map[string]any {
		lock := map[string]any{"name": "ok"}
		maps.Copy(lock, extra)
		return lock
	}

	DescribeTable("refuses bad input with a message naming the field",
		func(spec map[string]any, wantInMessage string) {
			err := k8sClient.Create(ctx, rawLockedJob(spec), client.DryRunAll)
			Expect(err).To(HaveOccurred())
			Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
			Expect(err.Error()).To(ContainSubstring(wantInMessage))
		},
		Entry("missing lock name", map[string]any{"lock": map[string]any{}, "jobTemplate": jobTemplate}, "spec.lock.name"),
		Entry("missing lock", map[string]any{"jobTemplate": jobTemplate}, "spec.lock"),
		Entry("missing job template", map[string]any{"lock": lockWith(nil)}, "spec.jobTemplate"),
		Entry("job template without spec", map[string]any{"lock": lockWith(nil), "jobTemplate": map[string]any{}}, "spec.jobTemplate.spec"),
		Entry("invalid lock name", map[string]any{"lock": map[string]any{"name": "Not_A_Name"}, "jobTemplate": jobTemplate}, "spec.lock.name"),
		Entry("lock name too long", map[string]any{"lock": map[string]any{"name": string(make([]byte, 254))}, "jobTemplate": jobTemplate}, "spec.lock.name"),
		Entry("ttl under 1s", map[string]any{"lock": lockWith(map[string]any{"ttl": "500ms"}), "jobTemplate": jobTemplate}, "spec.lock.ttl must be at least 1s"),
		Entry("negative ttl", map[string]any{"lock": lockWith(map[string]any{"ttl": "-5s"}), "jobTemplate": jobTemplate}, "spec.lock.ttl"),
		Entry("unparsable ttl", map[string]any{"lock": lockWith(map[string]any{"ttl": "soon"}), "jobTemplate": jobTemplate}, "spec.lock.ttl"),
		Entry("renewInterval not under ttl/2", map[string]any{"lock": lockWith(map[string]any{"ttl": "10s", "renewInterval": "5s"}), "jobTemplate": jobTemplate}, "spec.lock.renewInterval must be less than half of spec.lock.ttl"),
		Entry("renewInterval against the default ttl", map[string]any{"lock": lockWith(map[string]any{"renewInterval": "20s"}), "jobTemplate": jobTemplate}, "spec.lock.renewInterval must be less than half"),
		Entry("negative renewInterval", map[string]any{"lock": lockWith(map[string]any{"renewInterval": "-1s"}), "jobTemplate": jobTemplate}, "spec.lock.renewInterval"),
		Entry("negative acquireTimeout", map[string]any{"lock": lockWith(map[string]any{"acquireTimeout": "-1m"}), "jobTemplate": jobTemplate}, "spec.lock.acquireTimeout"),
		Entry("unknown scope", map[string]any{"lock": lockWith(map[string]any{"scope": "Galaxy"}), "jobTemplate": jobTemplate}, "spec.lock.scope"),
		Entry("unknown policy", map[string]any{"lock": lockWith(map[string]any{"onLockLost": "Panic"}), "jobTemplate": jobTemplate}, "spec.lock.onLockLost"),
		Entry("priority out of range", map[string]any{"lock": lockWith(map[string]any{"priority": 5000}), "jobTemplate": jobTemplate}, "spec.lock.priority"),

		// Issue 9 item 23: durations the API server's own "duration" format accepts but Go cannot parse.
		Entry("ttl in days", map[string]any{"lock": lockWith(map[string]any{"ttl": "1d"}), "jobTemplate": jobTemplate}, "spec.lock.ttl"),
		Entry("ttl in words", map[string]any{"lock": lockWith(map[string]any{"ttl": "2 weeks"}), "jobTemplate": jobTemplate}, "spec.lock.ttl"),
		Entry("ttl with a space", map[string]any{"lock": lockWith(map[string]any{"ttl": "30 s"}), "jobTemplate": jobTemplate}, "spec.lock.ttl"),
		Entry("renewInterval with a space", map[string]any{"lock": lockWith(map[string]any{"renewInterval": "5 s"}), "jobTemplate": jobTemplate}, "spec.lock.renewInterval"),
		Entry("acquireTimeout in days", map[string]any{"lock": lockWith(map[string]any{"acquireTimeout": "1d"}), "jobTemplate": jobTemplate}, "spec.lock.acquireTimeout"),
		Entry("acquireTimeout past int64 nanoseconds", map[string]any{"lock": lockWith(map[string]any{"acquireTimeout": "2562048h"}), "jobTemplate": jobTemplate}, "spec.lock.acquireTimeout"),
		Entry("ttl past int64 nanoseconds", map[string]any{"lock": lockWith(map[string]any{"ttl": "9999999999999999999h"}), "jobTemplate": jobTemplate}, "spec.lock.ttl"),
		// Item 22: a ceiling for the ttl.
		Entry("ttl over 24h", map[string]any{"lock": lockWith(map[string]any{"ttl": "24h0m1s"}), "jobTemplate": jobTemplate}, "spec.lock.ttl must be at most 24h"),
		// Item 5: a floor for the renew interval.
		Entry("renewInterval under 100ms", map[string]any{"lock": lockWith(map[string]any{"ttl": "1s", "renewInterval": "99ms"}), "jobTemplate": jobTemplate}, "spec.lock.renewInterval must be at least 100ms"),
		Entry("renewInterval of 1ns", map[string]any{"lock": lockWith(map[string]any{"renewInterval": "1ns"}), "jobTemplate": jobTemplate}, "spec.lock.renewInterval must be at least 100ms"),
		Entry("renewInterval under ttl/100", map[string]any{"lock": lockWith(map[string]any{"ttl": "24h", "renewInterval": "14m23s"}), "jobTemplate": jobTemplate}, "spec.lock.renewInterval must be at least spec.lock.ttl/100"),
		Entry("renewInterval under the default ttl/100", map[string]any{"lock": lockWith(map[string]any{"renewInterval": "299ms"}), "jobTemplate": jobTemplate}, "spec.lock.renewInterval must be at least spec.lock.ttl/100"),

		// Item 23: the template is typed, so a wrongly typed field is refused, not stored.
		Entry("parallelism as a word", map[string]any{"lock": lockWith(nil), "jobTemplate": jobTemplateWith(func(_, spec, _ map[string]any) {
			spec["parallelism"] = "two"
		})}, "spec.jobTemplate.spec.parallelism"),
		Entry("numeric Job label value", map[string]any{"lock": lockWith(nil), "jobTemplate": jobTemplateWith(func(tmpl, _, _ map[string]any) {
			tmpl["metadata"] = map[string]any{"labels": map[string]any{"team": 7}}
		})}, "spec.jobTemplate.metadata.labels.team"),
		Entry("numeric pod label value", map[string]any{"lock": lockWith(nil), "jobTemplate": jobTemplateWith(func(_, spec, _ map[string]any) {
			spec["template"].(map[string]any)["metadata"] = map[string]any{"labels": map[string]any{"team": 7}}
		})}, "spec.jobTemplate.spec.template.metadata.labels.team"),
		Entry("containers as a string", map[string]any{"lock": lockWith(nil), "jobTemplate": jobTemplateWith(func(_, _, pod map[string]any) {
			pod["containers"] = "busybox"
		})}, "spec.jobTemplate.spec.template.spec.containers"),
		Entry("container without a name", map[string]any{"lock": lockWith(nil), "jobTemplate": jobTemplateWith(func(_, _, pod map[string]any) {
			pod["containers"] = []any{map[string]any{"image": "busybox"}}
		})}, "spec.jobTemplate.spec.template.spec.containers[0].name"),
		// Item 14: restart policies the Job API refuses only after the lock is acquired.
		Entry("restartPolicy Always", map[string]any{"lock": lockWith(nil), "jobTemplate": jobTemplateWith(func(_, _, pod map[string]any) {
			pod["restartPolicy"] = "Always"
		})}, "spec.jobTemplate.spec.template.spec.restartPolicy must be Never or OnFailure"),
		Entry("restartPolicy missing (the pod default is Always)", map[string]any{"lock": lockWith(nil), "jobTemplate": jobTemplateWith(func(_, _, pod map[string]any) {
			delete(pod, "restartPolicy")
		})}, "spec.jobTemplate.spec.template.spec.restartPolicy must be Never or OnFailure"),
		// Item 16: a manual selector hides the pods the operator waits for.
		Entry("manualSelector true", map[string]any{"lock": lockWith(nil), "jobTemplate": jobTemplateWith(func(_, spec, _ map[string]any) {
			spec["manualSelector"] = true
		})}, "spec.jobTemplate.spec.manualSelector must not be true"),
		Entry("selector set", map[string]any{"lock": lockWith(nil), "jobTemplate": jobTemplateWith(func(_, spec, _ map[string]any) {
			spec["selector"] = map[string]any{"matchLabels": map[string]any{"app": "x"}}
		})}, "spec.jobTemplate.spec.selector must not be set"),
		// Item 18: a suspended Job holds the lock while nothing runs.
		Entry("suspend true", map[string]any{"lock": lockWith(nil), "jobTemplate": jobTemplateWith(func(_, spec, _ map[string]any) {
			spec["suspend"] = true
		})}, "spec.jobTemplate.spec.suspend must not be true"),
		// Same for a Job another controller runs (its pods are not where the operator looks).
		Entry("managedBy another controller", map[string]any{"lock": lockWith(nil), "jobTemplate": jobTemplateWith(func(_, spec, _ map[string]any) {
			spec["managedBy"] = "example.com/elsewhere"
		})}, "spec.jobTemplate.spec.managedBy must be kubernetes.io/job-controller"),
	)

	DescribeTable("accepts every duration Go parses within the bounds",
		func(lock map[string]any) {
			Expect(k8sClient.Create(ctx, rawLockedJob(map[string]any{"lock": lockWith(lock), "jobTemplate": jobTemplate}), client.DryRunAll)).To(Succeed())
		},
		Entry("compound ttl", map[string]any{"ttl": "1h30m", "renewInterval": "1m", "acquireTimeout": "2h45m30.5s"}),
		Entry("fractions", map[string]any{"ttl": "1.5h", "renewInterval": ".5h", "acquireTimeout": "5.s"}),
		Entry("micro signs", map[string]any{"ttl": "2000000\u00b5s", "renewInterval": "100000\u03bcs"}),
		Entry("the bounds", map[string]any{"ttl": "24h", "renewInterval": "864s"}),
		Entry("the smallest lock", map[string]any{"ttl": "1s", "renewInterval": "100ms", "acquireTimeout": "1ns"}),
		Entry("the largest acquireTimeout", map[string]any{"acquireTimeout": "2562047h47m16.854775807s"}),
	)

	It("keeps every field of a full job template", func() {
		// The template has a schema now: whatever the schema lacks would be pruned silently.
		tmpl := jobTemplateWith(func(tmpl, spec, pod map[string]any) {
			tmpl["metadata"] = map[string]any{"labels": map[string]any{"team": "db"}, "annotations": map[string]any{"note": "n"}}
			spec["parallelism"] = int64(2)
			spec["completionMode"] = "Indexed"
			spec["completions"] = int64(4)
			spec["managedBy"] = "kubernetes.io/job-controller"
			spec["podFailurePolicy"] = map[string]any{"rules": []any{map[string]any{
				"action": "FailJob", "onExitCodes": map[string]any{"operator": "In", "values": []any{int64(42)}},
			}}}
			spec["template"].(map[string]any)["metadata"] = map[string]any{"labels": map[string]any{"app": "x"}, "annotations": map[string]any{"a": "b"}}
			pod["containers"] = []any{map[string]any{
				"name": "c", "image": "busybox",
				"resources": map[string]any{"requests": map[string]any{"cpu": "10m", "memory": int64(1048576)}},
				"ports":     []any{map[string]any{"containerPort": int64(8080)}},
				"env":       []any{map[string]any{"name": "A", "value": "1"}},
			}}
		})
		u := rawLockedJob(map[string]any{"lock": lockWith(nil), "jobTemplate": tmpl})
		Expect(k8sClient.Create(ctx, u, client.DryRunAll)).To(Succeed())
		got, _, err := unstructured.NestedMap(u.Object, "spec", "jobTemplate")
		Expect(err).NotTo(HaveOccurred())
		Expect(got).To(HaveKeyWithValue("metadata", tmpl["metadata"]))
		gotSpec := got["spec"].(map[string]any)
		for _, field := range []string{"parallelism", "completionMode", "completions", "managedBy", "podFailurePolicy"} {
			Expect(gotSpec).To(HaveKeyWithValue(field, tmpl["spec"].(map[string]any)[field]))
		}
		gotTemplate := gotSpec["template"].(map[string]any)
		Expect(gotTemplate).To(HaveKeyWithValue("metadata", map[string]any{"labels": map[string]any{"app": "x"}, "annotations": map[string]any{"a": "b"}}))
		gotContainer := gotTemplate["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)
		Expect(gotContainer).To(HaveKey("resources"))
		Expect(gotContainer).To(HaveKeyWithValue("env", []any{map[string]any{"name": "A", "value": "1"}}))
	})

	It("accepts every sample in config/samples", func() {
		files, err := filepath.Glob(filepath.Join("..", "config", "samples", "*.yaml"))
		Expect(err).NotTo(HaveOccurred())
		more, err := filepath.Glob(filepath.Join("..", "config", "samples", "*", "*.yaml"))
		Expect(err).NotTo(HaveOccurred())
		kinds := map[string]int{}
		for _, file := range append(files, more...) {
			if filepath.Base(file) == "kustomization.yaml" {
				continue
			}
			b, err := os.ReadFile(file)
			Expect(err).NotTo(HaveOccurred())
			for doc := range strings.SplitSeq(string(b), "\n---\n") {
				u := &unstructured.Unstructured{}
				Expect(yaml.Unmarshal([]byte(doc), &u.Object)).To(Succeed())
				if u.GetKind() != "ClusterLock" {
					u.SetNamespace(ns)
				}
				Expect(k8sClient.Create(ctx, u, client.DryRunAll)).To(Succeed(), "sample %s in %s", u.GetName(), file)
				kinds[u.GetKind()]++
			}
		}
		Expect(kinds).To(HaveKeyWithValue("LockedJob", BeNumerically(">=", 6)))
		Expect(kinds).To(HaveKey("Lock"))
		Expect(kinds).To(HaveKey("LockedCronJob"))
		// The guarded Job and CronJob of `make demo` (a CronJob's lock label on its jobTemplate).
		Expect(kinds).To(HaveKey("Job"))
		Expect(kinds).To(HaveKey("CronJob"))
	})

	It("accepts a good LockedJob and fills in the defaults", func() {
		lj := newLockedJob(ns, "good", "fine")
		Expect(k8sClient.Create(ctx, lj, client.DryRunAll)).To(Succeed())
		Expect(lj.Spec.Lock.Scope).To(Equal(batchv1alpha1.LockScopeNamespace))
		Expect(lj.Spec.Lock.OnLockLost).To(Equal(batchv1alpha1.LockLostSuspend))
		Expect(lj.Spec.Lock.TTL.Duration).To(Equal(30 * time.Second))
	})

	It("refuses changes to spec.lock and spec.jobTemplate", func() {
		lj := create(newLockedJob(ns, "fixed", "immutable"))
		// update retries on write conflicts (the controller updates the object too) and returns the
		// API server's verdict on the change.
		update := func(mutate func(*batchv1alpha1.LockedJob)) error {
			var err error
			Eventually(func() bool {
				changed := fetch(lj)
				mutate(changed)
				err = k8sClient.Update(ctx, changed, client.DryRunAll)
				return !apierrors.IsConflict(err)
			}).Should(BeTrue())
			return err
		}

		err := update(func(lj *batchv1alpha1.LockedJob) { lj.Spec.Lock.Name = "other" })
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
		Expect(err.Error()).To(ContainSubstring("spec.lock is immutable"))

		err = update(func(lj *batchv1alpha1.LockedJob) {
			lj.Spec.JobTemplate.Spec.Template.Spec.Containers = []corev1.Container{{Name: "x", Image: "other"}}
		})
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
		Expect(err.Error()).To(ContainSubstring("spec.jobTemplate is immutable"))

		Expect(update(func(lj *batchv1alpha1.LockedJob) {
			lj.Labels = map[string]string{"metadata": "may-change"}
		})).To(Succeed())
	})
})
