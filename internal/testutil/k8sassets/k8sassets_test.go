package k8sassets_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"k8s.io/client-go/discovery"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/lockedjob/lockedjob/internal/testutil/k8sassets"
)

func fakeAssets(t *testing.T, names ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, n := range names {
		if err := os.WriteFile(filepath.Join(dir, n), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestDirPrefersKubebuilderAssets(t *testing.T) {
	dir := fakeAssets(t, "kube-apiserver", "etcd", "kubectl")
	t.Setenv("KUBEBUILDER_ASSETS", dir)
	got, err := k8sassets.Dir()
	if err != nil || got != dir {
		t.Fatalf("Dir() = %q, %v; want %q", got, err, dir)
	}
}

func TestDirFallsBackToCache(t *testing.T) {
	cache := t.TempDir()
	def := filepath.Join(cache, "k8s-"+k8sassets.K8sVersion)
	if err := os.MkdirAll(def, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"kube-apiserver", "etcd", "kubectl"} {
		if err := os.WriteFile(filepath.Join(def, n), nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("K8S_BIN_DIR", "")
	t.Setenv("LOCKEDJOB_CACHE", cache)
	t.Setenv("KUBEBUILDER_ASSETS", fakeAssets(t, "etcd")) // incomplete: ignored
	got, err := k8sassets.Dir()
	if err != nil || got != def {
		t.Fatalf("Dir() = %q, %v; want %q", got, err, def)
	}
}

func TestDirErrorSaysWhatToRun(t *testing.T) {
	t.Setenv("K8S_BIN_DIR", "")
	t.Setenv("LOCKEDJOB_CACHE", t.TempDir())
	t.Setenv("KUBEBUILDER_ASSETS", "")
	_, err := k8sassets.Dir()
	if err == nil || !strings.Contains(err.Error(), "make k8s-bin") {
		t.Fatalf("Dir() error = %v; want one that says to run `make k8s-bin`", err)
	}
}

// The version here names the cache folder; it must match the script's pin.
func TestVersionMatchesScripts(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "hack", "lib", "k8s-common.sh"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^K8S_VERSION="([^"]+)"`).FindSubmatch(b)
	if m == nil || string(m[1]) != k8sassets.K8sVersion {
		t.Fatalf("hack/lib/k8s-common.sh K8S_VERSION = %q, k8sassets.K8sVersion = %q", m, k8sassets.K8sVersion)
	}
}

func TestKueueErrorSaysWhatToRun(t *testing.T) {
	t.Setenv("KUEUE_BIN_DIR", t.TempDir())
	_, err := k8sassets.Kueue()
	if err == nil || !strings.Contains(err.Error(), "make kueue-bin") {
		t.Fatalf("Kueue() error = %v; want one that says to run `make kueue-bin`", err)
	}
}

// The Kueue version names its cache folder; it must match the script's and the wrapper's pin.
func TestKueueVersionMatchesScripts(t *testing.T) {
	root := filepath.Join("..", "..", "..", "hack")
	b, err := os.ReadFile(filepath.Join(root, "lib", "k8s-common.sh"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^KUEUE_VERSION="([^"]+)"`).FindSubmatch(b)
	if m == nil || string(m[1]) != k8sassets.KueueVersion {
		t.Fatalf("hack/lib/k8s-common.sh KUEUE_VERSION = %q, k8sassets.KueueVersion = %q", m, k8sassets.KueueVersion)
	}
	b, err = os.ReadFile(filepath.Join(root, "kueue", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^\s*sigs\.k8s\.io/kueue ` + regexp.QuoteMeta(k8sassets.KueueVersion) + `\b`).Match(b) {
		t.Fatalf("hack/kueue/go.mod does not require sigs.k8s.io/kueue %s", k8sassets.KueueVersion)
	}
}

// TestEnvtestStarts starts controller-runtime's envtest on the binaries built
// by hack/k8s-bin.sh and stops it again.
func TestEnvtestStarts(t *testing.T) {
	dir, err := k8sassets.Dir()
	if err != nil {
		t.Fatal(err)
	}
	env := &envtest.Environment{BinaryAssetsDirectory: dir}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("envtest start with assets %s: %v", dir, err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("envtest stop: %v", err)
		}
	})
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	v, err := dc.ServerVersion()
	if err != nil {
		t.Fatalf("server version: %v", err)
	}
	if v.GitVersion != k8sassets.K8sVersion {
		t.Fatalf("kube-apiserver reports %q, want %q (version stamp missing?)", v.GitVersion, k8sassets.K8sVersion)
	}
}
