//go:build e2e

package e2e

import (
	"os/exec"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/lockedjob/lockedjob/test/utils"
)

// Scenario 8c: what `kubectl explain` tells a user of lockedjob's kinds, from the CRDs as installed
// (hack/crddesc keeps lockedjob's own descriptions and drops the Job schema's, which
// `kubectl explain job` has).
var _ = Describe("kubectl explain", func() {
	explain := func(field string) string {
		out, err := utils.Run(exec.Command(kubectlBin(), "--kubeconfig", suite.kubeconfig, "explain", field))
		Expect(err).NotTo(HaveOccurred(), out)
		return strings.Join(strings.Fields(out), " ") // kubectl wraps descriptions at its own width
	}

	DescribeTable("describes lockedjob's own fields",
		func(field, says string) {
			Expect(explain(field)).To(ContainSubstring(says))
		},
		Entry(nil, "lockedjob", "LockedJob runs a Job while holding a Redis lock"),
		Entry(nil, "lj.spec.lock.ttl", "ttl is the lease of the lock in Redis"),
		Entry(nil, "lj.spec.lock.onLockLost", "onLockLost is what happens to the running Job"),
		Entry(nil, "lj.status.fencingToken", "The Job's pods get it as LOCKEDJOB_FENCING_TOKEN."),
		Entry(nil, "lj.status.conditions.observedGeneration", "observedGeneration represents the .metadata.generation"),
		Entry(nil, "lj.spec.jobTemplate.spec", "`kubectl explain job.spec` describes its fields"),
		Entry(nil, "lockedcronjob.spec.onBusy", "onBusy is what a run does when the lock is busy"),
		Entry(nil, "locks.spec.permits", "Deleting the Lock sets the lock back to 1"),
		Entry(nil, "clusterlocks.status.lastFencingToken", "lastFencingToken is the last fencing token handed out for this lock"),
	)

	It("keeps the embedded Job's schema and leaves its descriptions to kubectl explain job", func() {
		out := explain("lj.spec.jobTemplate.spec.template.spec.containers.image")
		Expect(out).To(ContainSubstring("FIELD: image <string>"))
		Expect(out).To(ContainSubstring("DESCRIPTION: <empty>"))
	})
})
