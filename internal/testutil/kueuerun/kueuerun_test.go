package kueuerun

import (
	"os"
	"path/filepath"
	"testing"

	"sigs.k8s.io/yaml"
)

// Kueue as the benchmark and test/kueue run it has the controller concurrency its manifests install,
// not controller-runtime's one reconcile at a time: a comparison with an under-provisioned Kueue
// would flatter lockedjob.
func TestPrepareRunsTheShippedControllerConcurrency(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewSetup(root)
	if err != nil {
		t.Fatal(err) // needs `make kueue-bin`, as make test-unit runs first
	}
	dir := t.TempDir()
	if _, err := s.Prepare(dir, filepath.Join(dir, "kubeconfig"), 0, 0); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Controller struct {
			GroupKindConcurrency map[string]int `json:"groupKindConcurrency"`
		} `json:"controller"`
	}
	if err := yaml.Unmarshal(raw, &cfg); err != nil {
		t.Fatalf("config.yaml: %v\n%s", err, raw)
	}
	for _, kind := range []string{"Job.batch", "Workload.kueue.x-k8s.io"} {
		if n := cfg.Controller.GroupKindConcurrency[kind]; n < 2 {
			t.Errorf("groupKindConcurrency[%s] = %d, want the shipped concurrency (5 in v0.17.0)\n%s", kind, n, raw)
		}
	}
}
