//go:build scale

package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/lockedjob/lockedjob/internal/testutil/k8sassets"
	"github.com/lockedjob/lockedjob/internal/testutil/kueuerun"
)

// Kueue as a mutex (issue 27): what a user who picks Kueue instead of lockedjob for exclusive
// work builds. One ClusterQueue per lock, StrictFIFO, whose quota admits one Job at a time, and a
// LocalQueue of the lock's name in the scenario's namespace; the Jobs are plain Jobs with the
// queue-name label, suspended by Kueue's webhook at creation and unsuspended by Kueue when it
// admits them. Kueue's manager is the one the repository builds (`make kueue-bin`), unmodified,
// with its webhooks and the controller concurrency of the Configuration it ships
// (kueuerun.Prepare), at its default log level.

const (
	// kueueNamespaceLabel marks the namespaces Kueue's webhooks act in: only the Kueue
	// scenarios', so the other scenarios' Jobs neither pay for Kueue's webhooks nor need Kueue
	// running.
	kueueNamespaceLabel = "scale.lockedjob.dev/kueue"
	// kueueFlavor is the one ResourceFlavor every ClusterQueue of the run draws on.
	kueueFlavor = "scale"
	// kueueStartTimeout bounds Kueue's start: certificates, caches, webhook server.
	kueueStartTimeout = 90 * time.Second
)

// kueueJobCPU is what each Job's one pod requests, and each ClusterQueue's quota: one Job at a
// time. Small enough that kwok's nodes fit every pod of a scenario at once.
var kueueJobCPU = resource.MustParse("10m")

// kueueRig is Kueue installed on the benchmark's cluster: its CRDs, webhook configurations and
// certificates, and the binary each Kueue scenario starts.
type kueueRig struct {
	setup *kueuerun.Setup
	bin   string
}

// installKueue installs Kueue's CRDs and prerequisites, once per run, before the first scenario.
func (b *bench) installKueue(ctx context.Context) error {
	bin, err := k8sassets.Kueue()
	if err != nil {
		return fmt.Errorf("kueue binary (make kueue-bin): %w", err)
	}
	setup, err := kueuerun.NewSetup(b.root)
	if err != nil {
		return err
	}
	crds, err := setup.CRDs()
	if err != nil {
		return err
	}
	log.Printf("installing Kueue %s (CRDs, webhooks for namespaces labelled %s)", k8sassets.KueueVersion, kueueNamespaceLabel)
	if err := kueuerun.InstallCRDs(ctx, b.k8s, crds, time.Minute); err != nil {
		return fmt.Errorf("install Kueue's CRDs: %w", err)
	}
	if err := setup.InstallPrerequisites(ctx, b.k8s, map[string]string{kueueNamespaceLabel: "true"}); err != nil {
		return fmt.Errorf("install Kueue's prerequisites: %w", err)
	}
	b.kueue = &kueueRig{setup: setup, bin: bin}
	return nil
}

// startKueue starts Kueue's manager for scenario s and waits until its webhooks answer.
func (b *bench) startKueue(ctx context.Context, s scenario) (*supervisor, error) {
	dir := filepath.Join(b.work, "kueue-"+s.name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	launch, err := b.kueue.setup.Prepare(dir, b.kubeconfig, float32(b.opts.kueueQPS), b.opts.kueueBurst)
	if err != nil {
		return nil, err
	}
	op, err := startSupervisor(ctx, b.kueue.bin, launch.Args, launch.Env, filepath.Join(dir, "kueue"), 0)
	if err != nil {
		return nil, fmt.Errorf("start kueue: %w", err)
	}
	if err := b.kueue.setup.WaitReady(ctx, launch, op.exited(), kueueStartTimeout); err != nil {
		op.stop()
		return nil, fmt.Errorf("kueue: %w\n%s", err, tail(filepath.Join(dir, "kueue-1.log")))
	}
	op.pprofAddr = launch.PprofAddr
	return op, nil
}

// clusterQueueName is the ClusterQueue of lock in namespace ns: ClusterQueues are cluster-wide,
// so the namespace keeps two scenarios' apart.
func clusterQueueName(ns, lock string) string { return ns + "-" + lock }

// createKueueQueues creates, for every lock of s, a ClusterQueue that admits one Job at a time in
// the order the Jobs were created (StrictFIFO) and a LocalQueue of the lock's name in ns on it,
// and waits until every ClusterQueue is Active. This is set-up, before the scenario's clock.
func (b *bench) createKueueQueues(ctx context.Context, s scenario, ns string) error {
	flavor := kueuerun.Object("ResourceFlavor", "", kueueFlavor, map[string]any{})
	if err := b.k8s.Create(ctx, flavor); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create ResourceFlavor: %w", err)
	}
	locks := s.lockNames()
	start := time.Now()
	err := parallel(ctx, len(locks), createWorkers, func(ctx context.Context, i int) error {
		cq := kueuerun.Object("ClusterQueue", "", clusterQueueName(ns, locks[i]), map[string]any{
			"namespaceSelector": map[string]any{},
			"queueingStrategy":  "StrictFIFO",
			"resourceGroups": []any{map[string]any{
				"coveredResources": []any{"cpu"},
				"flavors": []any{map[string]any{
					"name":      kueueFlavor,
					"resources": []any{map[string]any{"name": "cpu", "nominalQuota": kueueJobCPU.String()}},
				}},
			}},
		})
		if err := b.k8s.Create(ctx, cq); err != nil {
			return fmt.Errorf("create ClusterQueue %s: %w", cq.GetName(), err)
		}
		lq := kueuerun.Object("LocalQueue", ns, locks[i], map[string]any{"clusterQueue": cq.GetName()})
		if err := b.k8s.Create(ctx, lq); err != nil {
			return fmt.Errorf("create LocalQueue %s: %w", lq.GetName(), err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	// A ClusterQueue admits nothing until Kueue finds it Active, and a LocalQueue's Jobs wait
	// until Kueue knows the LocalQueue.
	err = poll(ctx, b.timeout, 500*time.Millisecond, func() (bool, error) {
		active, err := b.countKueue(ctx, "ClusterQueue", "", ns+"-", "Active")
		if err != nil {
			return false, err
		}
		ready, err := b.countKueue(ctx, "LocalQueue", ns, "", "Active")
		return active == len(locks) && ready == len(locks), err
	})
	if err != nil {
		return fmt.Errorf("waiting for %d ClusterQueues and LocalQueues to be Active: %w", len(locks), err)
	}
	log.Printf("%s: %d Kueue ClusterQueues and LocalQueues Active in %s", s.name, len(locks), time.Since(start).Round(time.Millisecond))
	return nil
}

// countKueue counts the Kueue objects of kind in namespace ns (all for "") whose name starts with
// prefix and whose condition cond is True.
func (b *bench) countKueue(ctx context.Context, kind, ns, prefix, cond string) (int, error) {
	l := kueuerun.List(kind)
	if err := b.k8s.List(ctx, l, client.InNamespace(ns)); err != nil {
		return 0, fmt.Errorf("list %s: %w", kind, err)
	}
	n := 0
	for _, o := range l.Items {
		if !strings.HasPrefix(o.GetName(), prefix) {
			continue
		}
		conds, _, _ := unstructured.NestedSlice(o.Object, "status", "conditions")
		for _, c := range conds {
			m, _ := c.(map[string]any)
			if m["type"] == cond && m["status"] == string(metav1.ConditionTrue) {
				n++
			}
		}
	}
	return n, nil
}

// deleteKueueQueues waits until Kueue has let go of the scenario's Workloads (their Jobs are
// deleted by then), then deletes its LocalQueues and ClusterQueues and waits until they are gone.
func (b *bench) deleteKueueQueues(ctx context.Context, s scenario, ns string) error {
	gone := func(kind, ns, prefix string) func() (bool, error) {
		return func() (bool, error) {
			l := kueuerun.List(kind)
			if err := b.k8s.List(ctx, l, client.InNamespace(ns)); err != nil {
				return false, fmt.Errorf("list %s: %w", kind, err)
			}
			return !slices.ContainsFunc(l.Items, func(o unstructured.Unstructured) bool {
				return strings.HasPrefix(o.GetName(), prefix)
			}), nil
		}
	}
	if err := poll(ctx, b.timeout, 500*time.Millisecond, gone("Workload", ns, "")); err != nil {
		return fmt.Errorf("waiting for the Workloads of %s to go: %w", ns, err)
	}
	if err := b.k8s.DeleteAllOf(ctx, kueuerun.Object("LocalQueue", ns, "", nil), client.InNamespace(ns)); err != nil {
		return fmt.Errorf("delete LocalQueues: %w", err)
	}
	locks := s.lockNames()
	err := parallel(ctx, len(locks), createWorkers, func(ctx context.Context, i int) error {
		return client.IgnoreNotFound(b.k8s.Delete(ctx, kueuerun.Object("ClusterQueue", "", clusterQueueName(ns, locks[i]), nil)))
	})
	if err != nil {
		return fmt.Errorf("delete ClusterQueues: %w", err)
	}
	for _, w := range []struct{ kind, ns, prefix string }{{"LocalQueue", ns, ""}, {"ClusterQueue", "", ns + "-"}} {
		if err := poll(ctx, b.timeout, 500*time.Millisecond, gone(w.kind, w.ns, w.prefix)); err != nil {
			return fmt.Errorf("waiting for the %ss of %s to go: %w", w.kind, ns, err)
		}
	}
	return nil
}

// withKueueRequest gives the pod template's containers the request Kueue counts against a
// ClusterQueue's quota.
func withKueueRequest(t corev1.PodTemplateSpec) corev1.PodTemplateSpec {
	for i := range t.Spec.Containers {
		t.Spec.Containers[i].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: kueueJobCPU}
	}
	return t
}
