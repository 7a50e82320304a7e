package controllers

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	sreconcile "github.com/lockedjob/lockedjob/controllers/internal/reconcile"
	"github.com/lockedjob/lockedjob/controllers/internal/unit"
	"github.com/lockedjob/lockedjob/internal/testutil/k8sassets"
)

// TestOptionalKindsAreLeftOutWhileTheirCRDsAreMissing: on an API server that serves only the
// LockedJob CRD (an operator upgraded before its CRDs), the per-lock view and the schedules set up
// nothing, so the manager does not wait for caches of kinds nobody serves; with every CRD, both
// are there.
func TestOptionalKindsAreLeftOutWhileTheirCRDsAreMissing(t *testing.T) {
	g := NewWithT(t)
	assets, err := k8sassets.Dir()
	g.Expect(err).NotTo(HaveOccurred())
	bases := filepath.Join("..", "config", "crd", "bases")
	for name, crds := range map[string]string{
		"LockedJob CRD only": filepath.Join(bases, "batch.lockedjob.dev_lockedjobs.yaml"),
		"every CRD":          bases,
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			env := &envtest.Environment{BinaryAssetsDirectory: assets,
				CRDInstallOptions: envtest.CRDInstallOptions{Paths: []string{crds}, ErrorIfPathMissing: true}}
			cfg, err := env.Start()
			g.Expect(err).NotTo(HaveOccurred())
			t.Cleanup(func() { _ = env.Stop() })
			// A short cache-sync timeout: a watch of a kind nobody serves fails the manager within it.
			mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: unit.Scheme(t), Metrics: metricsserver.Options{BindAddress: "0"},
				Controller: config.Controller{CacheSyncTimeout: 2 * time.Second, SkipNameValidation: ptr.To(true)}})
			g.Expect(err).NotTo(HaveOccurred())

			missing := sreconcile.UnservedKind(mgr, "Lock", "ClusterLock", "LockedCronJob")
			if crds != bases {
				g.Expect(missing).To(Equal("Lock"))
				g.Expect(sreconcile.UnservedKind(mgr, "LockedCronJob")).To(Equal("LockedCronJob"))
			} else {
				g.Expect(missing).To(BeEmpty())
			}
			g.Expect(sreconcile.UnservedKind(mgr, "LockedJob")).To(BeEmpty())

			book, _, _ := unit.Locks(t)
			ctx, cancel := context.WithCancel(context.Background())
			g.Expect(Setup(ctx, mgr, book, Options{Identity: testIdentity, Controllers: []string{LockView, LockedCronJob}})).To(Succeed())
			var startErr error
			stopped := make(chan struct{})
			go func() { startErr = mgr.Start(ctx); close(stopped) }()
			t.Cleanup(func() { cancel(); <-stopped })
			g.Consistently(stopped).WithTimeout(5*time.Second).ShouldNot(BeClosed(),
				func() string {
					return fmt.Sprintf("the manager stopped (a controller waited for a kind nobody serves?): %v", startErr)
				})
		})
	}
}
