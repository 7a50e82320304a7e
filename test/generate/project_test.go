package generate_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/lockedjob/lockedjob/test/utils"
)

// project is the part of kubebuilder's PROJECT file that names places in the tree. Its config
// (version 3) has no field for where main or the controllers live: the go/v4 plugin assumes
// cmd/main.go and internal/controller/, and CONTRIBUTING.md says how `kubebuilder create api`
// is run against this tree's cmd/manager/main.go and controllers/ instead.
type project struct {
	Domain    string `json:"domain"`
	Repo      string `json:"repo"`
	Resources []struct {
		Group      string `json:"group"`
		Version    string `json:"version"`
		Kind       string `json:"kind"`
		Path       string `json:"path"`
		Controller bool   `json:"controller"`
	} `json:"resources"`
	Plugins struct {
		Helm *struct {
			Manifests string `json:"manifests"`
			Output    string `json:"output"`
		} `json:"helm.kubebuilder.io/v2-alpha"`
	} `json:"plugins"`
}

// scaffoldMarkers are the markers `kubebuilder create api` inserts at, by file: without them the
// recipe in CONTRIBUTING.md wires nothing. A reconciler is set up in controllers.Setup, so the
// builder marker is there rather than in the main.
var scaffoldMarkers = map[string][]string{
	"cmd/manager/main.go":       {"imports", "scheme"},
	"controllers/setup.go":      {"builder"},
	"controllers/suite_test.go": {"imports", "scheme"},
}

// TestProjectNamesTheTree checks every place PROJECT names against the tree: the module, each
// resource's API package (its group and kind), the reconciler package of each resource with a
// controller, the Helm plugin's input (written by `make build-installer`) and output, and the
// scaffold markers kubebuilder needs.
func TestProjectNamesTheTree(t *testing.T) {
	root, err := utils.ProjectDir()
	if err != nil {
		t.Fatal(err)
	}
	var p project
	b, err := os.ReadFile(filepath.Join(root, "PROJECT"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &p); err != nil {
		t.Fatalf("PROJECT: %v", err)
	}

	if mod := modulePath(t, root); p.Repo != mod {
		t.Errorf("PROJECT repo %q, go.mod module %q", p.Repo, mod)
	}
	if len(p.Resources) == 0 {
		t.Error("PROJECT names no resource")
	}
	for _, r := range p.Resources {
		dir, ok := strings.CutPrefix(r.Path, p.Repo+"/")
		if !ok {
			t.Errorf("%s: path %q is not in module %s", r.Kind, r.Path, p.Repo)
			continue
		}
		api := goSources(t, filepath.Join(root, dir))
		if !regexp.MustCompile(`(?m)^type ` + r.Kind + ` struct`).MatchString(api) {
			t.Errorf("%s: no type %s in %s", r.Kind, r.Kind, dir)
		}
		if group := r.Group + "." + p.Domain; !strings.Contains(api, "+groupName="+group+"\n") {
			t.Errorf("%s: %s does not declare +groupName=%s", r.Kind, dir, group)
		}
		// One package per reconciler: controllers/<kind, lower case>/.
		if pkg := filepath.Join("controllers", strings.ToLower(r.Kind)); r.Controller && !regexp.MustCompile(`(?m)^type `+r.Kind+`Reconciler struct`).MatchString(goSources(t, filepath.Join(root, pkg))) {
			t.Errorf("%s: PROJECT says it has a controller, %s/ has no %sReconciler", r.Kind, pkg, r.Kind)
		}
	}

	if h := p.Plugins.Helm; h == nil {
		t.Error("PROJECT has no helm.kubebuilder.io/v2-alpha plugin, which `make helm-chart` runs")
	} else {
		if _, err := os.Stat(filepath.Join(root, h.Output, "chart", "Chart.yaml")); err != nil {
			t.Errorf("helm plugin output: %v", err)
		}
		// The plugin's input is not committed: `make build-installer` writes it.
		makefile, err := os.ReadFile(filepath.Join(root, "Makefile"))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(makefile), "> "+h.Manifests+"\n") {
			t.Errorf("helm plugin manifests %q: the Makefile's build-installer does not write it", h.Manifests)
		}
	}

	for file, markers := range scaffoldMarkers {
		b, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			t.Error(err)
			continue
		}
		for _, m := range markers {
			if !strings.Contains(string(b), "// +kubebuilder:scaffold:"+m+"\n") {
				t.Errorf("%s lacks the marker // +kubebuilder:scaffold:%s", file, m)
			}
		}
	}
}

// modulePath reads the module path from go.mod.
func modulePath(t *testing.T, root string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if mod, ok := strings.CutPrefix(line, "module "); ok {
			return strings.TrimSpace(mod)
		}
	}
	t.Fatal("go.mod has no module line")
	return ""
}

// goSources returns the non-test Go files of dir, concatenated.
func goSources(t *testing.T, dir string) string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var all strings.Builder
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		all.Write(b)
	}
	if all.Len() == 0 {
		t.Errorf("no Go source in %s", dir)
	}
	return all.String()
}
