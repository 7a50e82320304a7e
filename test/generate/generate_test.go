// Package generate_test checks what the code generators and kubebuilder rely on: that
// `make generate` writes the committed generated files on any day (the licence header once held
// a YEAR placeholder that the Makefile filled with `date +%Y`, so on 1 January every generated
// file changed and `make verify` failed), and that PROJECT names the places the tree really has.
package generate_test

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lockedjob/lockedjob/test/utils"
)

// fakeYear is a year no committed file was generated in.
const fakeYear = "2031"

// copied are the files `make generate` reads: the Makefile and what it includes or parses, the
// module files controller-gen loads packages with, the header, and the API package tree.
var copied = []string{
	"Makefile",
	"hack/make/cluster.mk",
	"hack/make/kind.mk",
	"hack/lib/k8s-common.sh",
	"hack/boilerplate.go.txt",
	"go.mod",
	"go.sum",
	"api",
}

// TestGenerateIgnoresTheClock runs `make generate` in a copy of the tree with a `date` that says
// it is 1 January of fakeYear, and wants api/ unchanged, byte for byte.
func TestGenerateIgnoresTheClock(t *testing.T) {
	root, err := utils.ProjectDir()
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	for _, p := range copied {
		copyTree(t, filepath.Join(root, p), filepath.Join(work, p))
	}
	path := fakeDatePath(t)
	if got := strings.TrimSpace(runIn(t, work, path, "date", "+%Y")); got != fakeYear {
		t.Fatalf("the fake date says year %q, want %s: the check would prove nothing", got, fakeYear)
	}

	// The three variables are set so that parsing the Makefile runs no cluster script (nor
	// hack/kueue-bin.sh, which is not copied); LOCALBIN is the checkout's, so the pinned
	// controller-gen is the one `make generate` uses there.
	runIn(t, work, path, "make", "-s", "generate", "LOCALBIN="+filepath.Join(root, "bin"),
		"K8S_BIN_DIR="+filepath.Join(work, "no-k8s-bin"), "KUEUE_BIN_DIR="+filepath.Join(work, "no-kueue-bin"),
		"CLUSTER_KUBECONFIG="+filepath.Join(work, "no-kubeconfig"))

	want, got := readTree(t, filepath.Join(root, "api")), readTree(t, filepath.Join(work, "api"))
	for name, content := range got {
		switch old, ok := want[name]; {
		case !ok:
			t.Errorf("make generate on 1 January %s wrote a new file api/%s", fakeYear, name)
		case !bytes.Equal(old, content):
			t.Errorf("make generate on 1 January %s changed api/%s:\n%s", fakeYear, name, firstDiff(old, content))
		}
	}
	for name := range want {
		if _, ok := got[name]; !ok {
			t.Errorf("make generate on 1 January %s removed api/%s", fakeYear, name)
		}
	}
}

// fakeDatePath returns a PATH whose first folder holds a `date` that runs the real one as of
// 1 January of fakeYear, the way the Makefile's $(shell date ...) or controller-gen would see it.
func fakeDatePath(t *testing.T) string {
	t.Helper()
	real, err := exec.LookPath("date")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	script := "#!/bin/sh\nexec '" + real + "' -d '" + fakeYear + "-01-01T00:00:01Z' \"$@\"\n"
	if err := os.WriteFile(filepath.Join(dir, "date"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir + string(os.PathListSeparator) + os.Getenv("PATH")
}

// runIn runs name in dir with PATH path and fails the test with its output if it fails. The make
// variables of an enclosing `make test-unit` are dropped: the inner make would take them over its
// own command line.
func runIn(t *testing.T, dir, path, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(lookIn(t, path, name), args...)
	cmd.Dir = dir
	for _, kv := range os.Environ() {
		switch k, _, _ := strings.Cut(kv, "="); k {
		case "PATH", "MAKEFLAGS", "MAKELEVEL", "MFLAGS", "GOWORK":
		default:
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "PATH="+path, "GOWORK=off")
	out, err := utils.Run(cmd)
	if err != nil {
		t.Fatal(err) // names the command line and carries its output
	}
	return out
}

// lookIn finds the executable name in the folders of path: exec.Command would look in this
// process's PATH, which has no fake date.
func lookIn(t *testing.T, path, name string) string {
	t.Helper()
	for _, dir := range filepath.SplitList(path) {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return p
		}
	}
	t.Fatalf("%s not found in %s", name, path)
	return ""
}

// copyTree copies the file or folder src to dst.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o644)
	})
	if err != nil {
		t.Fatalf("copy %s: %v", src, err)
	}
}

// readTree returns every file below dir by its path relative to dir.
func readTree(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		files[rel] = b
		return err
	})
	if err != nil {
		t.Fatalf("read %s: %v", dir, err)
	}
	return files
}

// firstDiff shows the first line where a and b differ.
func firstDiff(a, b []byte) string {
	al, bl := strings.Split(string(a), "\n"), strings.Split(string(b), "\n")
	for i := range max(len(al), len(bl)) {
		var x, y string
		if i < len(al) {
			x = al[i]
		}
		if i < len(bl) {
			y = bl[i]
		}
		if x != y {
			return fmt.Sprintf("line %d:\n- %s\n+ %s", i+1, x, y)
		}
	}
	return "(same lines, different bytes)"
}
