//go:build e2e

package e2e

import (
	"os/exec"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/test/testkit"
	"github.com/lockedjob/lockedjob/test/utils"
)

// Scenario 8b: what users drive the operator with besides a LockedJob: a schedule, and the kubectl
// plugin, each against the local cluster and a real manager.
var _ = Describe("A LockedCronJob, watched with the kubectl plugin", Ordered, func() {
	var (
		s      *scenario
		plugin string
	)

	BeforeAll(func() {
		s = newScenario("s9-schedule", false)
		s.startManager(true)
		plugin = filepath.Join(suite.work, "kubectl-lockedjob")
		cmd := exec.Command("go", "build", "-o", plugin, "./cmd/kubectl-lockedjob")
		cmd.Dir = suite.root
		_, err := utils.Run(cmd)
		Expect(err).NotTo(HaveOccurred())
	})

	kubectlLockedjob := func(args ...string) (string, error) {
		return utils.Run(exec.Command(plugin, append([]string{"--kubeconfig", suite.kubeconfig, "-n", s.ns}, args...)...))
	}

	It("starts a run at the next minute under the lock; the plugin shows the lock and waits for the run", func(ctx SpecContext) {
		run := s.newLockedJob("unused", testkit.LockedJobOptions{Lock: "nightly", Run: 2 * time.Second})
		lcj := &batchv1alpha1.LockedCronJob{
			ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "every-minute"},
			Spec: batchv1alpha1.LockedCronJobSpec{
				Schedule:          "* * * * *",
				LockedJobTemplate: batchv1alpha1.LockedJobTemplate{Spec: run.Spec},
			},
		}
		Expect(suite.k8s.Create(ctx, lcj)).To(Succeed())
		// Deleted before the scenario's teardown, so no run starts while it cleans up.
		DeferCleanup(func(ctx SpecContext) {
			Expect(client.IgnoreNotFound(suite.k8s.Delete(ctx, lcj))).To(Succeed())
		})

		By("creating the run's LockedJob at the next minute")
		var name string
		Eventually(func(g Gomega) {
			var list batchv1alpha1.LockedJobList
			g.Expect(suite.k8s.List(ctx, &list, client.InNamespace(s.ns),
				client.MatchingLabels{batchv1alpha1.LabelLockedCronJob: lcj.Name})).To(Succeed())
			g.Expect(list.Items).NotTo(BeEmpty())
			name = list.Items[0].Name
		}).WithContext(ctx).WithTimeout(75 * time.Second).WithPolling(500 * time.Millisecond).Should(Succeed())

		By("kubectl lockedjob locks showing the lock while the run holds it or has just held it")
		out, err := kubectlLockedjob("locks")
		Expect(err).NotTo(HaveOccurred(), out)
		Expect(out).To(ContainSubstring("nightly"))

		By("kubectl lockedjob wait returning 0 once the run succeeded")
		out, err = kubectlLockedjob("wait", name, "--timeout=60s")
		Expect(err).NotTo(HaveOccurred(), out)
		Expect(out).To(ContainSubstring("Succeeded"))
		Expect(s.get(name).Status.Phase).To(Equal(batchv1alpha1.PhaseSucceeded))

		By("kubectl lockedjob why telling how it ended")
		out, err = kubectlLockedjob("why", name)
		Expect(err).NotTo(HaveOccurred(), out)
		Expect(out).To(ContainSubstring("It ended Succeeded"))

		By("recording the run in the LockedCronJob's status")
		Eventually(func(g Gomega) {
			g.Expect(suite.k8s.Get(ctx, client.ObjectKeyFromObject(lcj), lcj)).To(Succeed())
			g.Expect(lcj.Status.LastScheduleTime).NotTo(BeNil())
			g.Expect(lcj.Status.LastSuccessfulTime).NotTo(BeNil())
		}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
	}, SpecTimeout(3*time.Minute))
})
