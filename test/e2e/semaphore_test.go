//go:build e2e

package e2e

import (
	"slices"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	scalemeasure "github.com/lockedjob/lockedjob/test/scale/measure"
	"github.com/lockedjob/lockedjob/test/testkit"
)

// Scenario 10: a semaphore. A Lock declares two permits; six LockedJobs share the lock. Judged from
// the pods' Running intervals the watch recorded: never more than two run at once, two do at some
// point, each slot runs one at a time with fences rising within the slot.
var _ = Describe("A semaphore of two permits", Ordered, func() {
	var s *scenario
	names := []string{"s1", "s2", "s3", "s4", "s5", "s6"}

	BeforeAll(func() {
		s = newScenario("s10-semaphore", false)
		s.startManager(true)
	})

	It("runs two Jobs at a time, each slot one at a time with rising fences", func(ctx SpecContext) {
		pool := &batchv1alpha1.Lock{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "pool"},
			Spec: batchv1alpha1.LockViewSpec{Permits: 2}}
		Expect(suite.k8s.Create(ctx, pool)).To(Succeed())
		for _, n := range names {
			s.create(s.newLockedJob(n, testkit.LockedJobOptions{Lock: "pool", Run: 2 * time.Second}))
		}
		slots := map[string]int{} // Job name -> slot
		for _, n := range names {
			lj := s.eventuallyPhase(n, batchv1alpha1.PhaseSucceeded, 90*time.Second)
			s.expectFenceEverywhere(lj)
			Expect(lj.Status.Slot).NotTo(BeNil(), "%s records its slot", n)
			Expect(*lj.Status.Slot).To(BeNumerically("<", 2))
			slots[lj.Status.JobName] = int(*lj.Status.Slot)
		}

		runs := s.eventuallyAllComplete(ctx, len(names))

		By("never running more than two pods at once, and two at some point")
		type edge struct {
			at    time.Time
			delta int
		}
		var edges []edge
		for _, r := range runs {
			pod := s.rec.History().PodsOf(r.Name)[0]
			Expect(r.Job.Annotations).To(HaveKeyWithValue(batchv1alpha1.AnnotationSlot, strconv.Itoa(slots[r.Name])))
			edges = append(edges, edge{pod.Added, +1}, edge{pod.Succeeded, -1})
		}
		// Ends before starts at the same instant: a pod that ended as another began did not overlap it.
		slices.SortFunc(edges, func(a, b edge) int {
			if c := a.at.Compare(b.at); c != 0 {
				return c
			}
			return a.delta - b.delta
		})
		running, most := 0, 0
		for _, e := range edges {
			running += e.delta
			most = max(most, running)
		}
		Expect(most).To(Equal(2), "most pods running at once")

		By("running each slot one at a time, its fences rising in run order")
		var gaps []time.Duration
		for slot := range 2 {
			var inSlot []testkit.JobRecord
			for _, r := range runs {
				if slots[r.Name] == slot {
					inSlot = append(inSlot, r)
				}
			}
			Expect(inSlot).NotTo(BeEmpty(), "slot %d was used", slot)
			for i := 1; i < len(inSlot); i++ {
				prev, run := inSlot[i-1], inSlot[i]
				Expect(run.Fence).To(BeNumerically(">", prev.Fence), "slot %d: fence of %s vs %s", slot, run.Name, prev.Name)
				prevPod, pod := s.rec.History().PodsOf(prev.Name)[0], s.rec.History().PodsOf(run.Name)[0]
				Expect(pod.Added).To(BeTemporally(">=", prevPod.Succeeded), "slot %d: pod %s started beside %s", slot, pod.Name, prevPod.Name)
				gaps = append(gaps, run.Added.Sub(prevPod.Succeeded))
			}
		}
		parts := make([]string, 0, len(gaps))
		for _, g := range gaps {
			parts = append(parts, ms(g))
		}
		measure("scenario 10 semaphore handoff gap per slot (pod succeeded seen -> next Job of the slot created seen): p50 %s, max %s; all: %s",
			ms(scalemeasure.Percentile(gaps, 50)), ms(slices.Max(gaps)), strings.Join(parts, " "))

		By("showing the permits on the declared Lock")
		Eventually(func(g Gomega) {
			g.Expect(suite.k8s.Get(ctx, client.ObjectKeyFromObject(pool), pool)).To(Succeed())
			g.Expect(pool.Status.Permits).To(Equal(int32(2)))
			g.Expect(pool.Status.InUse).To(BeZero())
		}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())

		By("making the lock plain again when its Lock is deleted")
		Expect(suite.k8s.Delete(ctx, pool)).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(suite.k8s.Get(ctx, client.ObjectKeyFromObject(pool), &batchv1alpha1.Lock{}))
		}).WithContext(ctx).WithTimeout(30 * time.Second).Should(BeTrue())
		Expect(s.rdb[0].Exists(ctx, s.redisKey("pool")+":permits").Val()).To(BeZero(), "the lock's permits are gone with its Lock")
	}, SpecTimeout(3*time.Minute))
})
