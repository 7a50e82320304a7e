package controllers

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/controllers/internal/unit"
	"github.com/lockedjob/lockedjob/internal/testutil/k8sassets"
)

// TestCRDUpgradeKeepsOldObjectsWritable: LockedJobs stored under the CRD before issue 9 may break
// the new rules (a ttl of "1d", a renewInterval of 1ns, a suspended template). After the upgrade the
// operator must still be able to write their status and remove their finalizer, or their deletion
// hangs forever: spec.lock is immutable, so nobody could fix them either. Runs its own kube-apiserver,
// since it replaces the CRD.
//
// Not covered, and documented instead (docs/design.md, Migration): a template stored wrongly typed
// (parallelism "two"). The immutability rule compares the template at every write and cannot
// evaluate on it; such an object never decoded in the operator either, and must be deleted before
// the upgrade.
func TestCRDUpgradeKeepsOldObjectsWritable(t *testing.T) {
	g := NewWithT(t)
	assets, err := k8sassets.Dir()
	g.Expect(err).NotTo(HaveOccurred())
	env := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDInstallOptions:     envtest.CRDInstallOptions{Paths: []string{filepath.Join("testdata", "lockedjobs-crd-before-issue-9.yaml")}, ErrorIfPathMissing: true},
	}
	cfg, err := env.Start()
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = env.Stop() })
	scheme := unit.Scheme(t)
	g.Expect(apiextensionsv1.AddToScheme(scheme)).To(Succeed())
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	g.Expect(err).NotTo(HaveOccurred())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	oldObjects := map[string]struct {
		lock map[string]any
		edit func(jobSpec, pod map[string]any)
	}{
		"ttl-in-days":     {map[string]any{"ttl": "1d"}, nil},
		"renew-in-days":   {map[string]any{"ttl": "100h", "renewInterval": "1d"}, nil},
		"timeout-words":   {map[string]any{"acquireTimeout": "2 weeks"}, nil},
		"renew-1ns":       {map[string]any{"ttl": "1s", "renewInterval": "1ns"}, nil},
		"ttl-over-24h":    {map[string]any{"ttl": "48h"}, nil},
		"suspended":       {nil, func(js, _ map[string]any) { js["suspend"] = true }},
		"manual-selector": {nil, func(js, _ map[string]any) { js["manualSelector"] = true }},
		"no-restart":      {nil, func(_, pod map[string]any) { delete(pod, "restartPolicy") }},
	}
	for name, o := range oldObjects {
		lock := map[string]any{"name": "l"}
		maps.Copy(lock, o.lock)
		pod := map[string]any{"restartPolicy": "Never", "containers": []any{map[string]any{"name": "c", "image": "busybox"}}}
		jobSpec := map[string]any{"template": map[string]any{"spec": pod}}
		if o.edit != nil {
			o.edit(jobSpec, pod)
		}
		g.Expect(c.Create(ctx, lockedJobObject(name, []any{batchv1alpha1.FinalizerReleaseLock}, map[string]any{
			"lock": lock, "jobTemplate": map[string]any{"spec": jobSpec},
		}))).To(Succeed(), "create %s under the old CRD", name)
	}

	b, err := os.ReadFile(filepath.Join("..", "config", "crd", "bases", "batch.lockedjob.dev_lockedjobs.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	crd := &apiextensionsv1.CustomResourceDefinition{}
	g.Expect(yaml.Unmarshal(b, crd)).To(Succeed())
	installed := &apiextensionsv1.CustomResourceDefinition{}
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(crd), installed)).To(Succeed())
	crd.ResourceVersion = installed.ResourceVersion
	g.Expect(c.Update(ctx, crd)).To(Succeed())
	// The API server serves the new schema once it refuses what only the new CRD refuses.
	g.Eventually(func() error {
		return c.Create(ctx, lockedJobObject("probe", nil, map[string]any{
			"lock":        map[string]any{"name": "l", "ttl": "1d"},
			"jobTemplate": map[string]any{"spec": map[string]any{"template": map[string]any{"spec": map[string]any{"restartPolicy": "Never", "containers": []any{map[string]any{"name": "c", "image": "busybox"}}}}}},
		}), client.DryRunAll)
	}).WithContext(ctx).Should(HaveOccurred())

	for name := range oldObjects {
		obj := lockedJobObject(name, nil, nil)
		g.Expect(c.Status().Patch(ctx, obj, client.RawPatch(types.MergePatchType, []byte(`{"status":{"phase":"Failed","message":"after the upgrade"}}`)))).
			To(Succeed(), "status write of %s", name)
		g.Expect(c.Patch(ctx, obj, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))).
			To(Succeed(), "finalizer removal of %s", name)
	}
}

// lockedJobObject is a LockedJob in namespace default as a plain object, so it can hold what the
// typed one cannot decode.
func lockedJobObject(name string, finalizers []any, spec map[string]any) *unstructured.Unstructured {
	meta := map[string]any{"name": name, "namespace": "default"}
	if finalizers != nil {
		meta["finalizers"] = finalizers
	}
	obj := map[string]any{"apiVersion": batchv1alpha1.GroupVersion.String(), "kind": "LockedJob", "metadata": meta}
	if spec != nil {
		obj["spec"] = spec
	}
	return &unstructured.Unstructured{Object: obj}
}
