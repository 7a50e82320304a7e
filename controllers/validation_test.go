package controllers

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

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
	jobTemplate := map[string]any{"spec": map[string]any{"template": map[string]any{"spec": map[string]any{
		"restartPolicy": "Never",
		"containers":    []any{map[string]any{"name": "c", "image": "busybox"}},
	}}}}
	lockWith := func(extra map[string]any) map[string]any {
		lock := map[string]any{"name": "ok"}
		for k, v := range extra {
			lock[k] = v
		}
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
	)

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
