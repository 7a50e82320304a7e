package lockbook

import (
	"go/build"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const libraryPath = "github.com/lockedjob/lockedjob/internal/redislock"

// mayImportLibrary are the packages whose product code may import the lock library: the book,
// which is the operator's one door to Redis, and the manager's main, which builds the client the
// book is handed. Tests anywhere may use the library to put Redis in a state they need, and so may
// the reconcilers' unit-test helpers, which only tests may import (testOnly).
var mayImportLibrary = []string{
	"github.com/lockedjob/lockedjob/internal/lockbook",
	"github.com/lockedjob/lockedjob/internal/redislock",
	"github.com/lockedjob/lockedjob/cmd/manager",
	testOnly,
}

const testOnly = "github.com/lockedjob/lockedjob/controllers/internal/unit"

// TestOneDoorToRedis keeps the book the only way from the operator to the lock library: no other
// package's product code imports it (nor the test helpers that do), under any of the project's
// build tags.
func TestOneDoorToRedis(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	ctx := build.Default
	ctx.BuildTags = []string{"e2e", "fault", "scale"}
	checked := 0
	err = filepath.WalkDir(root, func(dir string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		if skipDir(root, dir, d.Name()) {
			return filepath.SkipDir
		}
		p, err := ctx.ImportDir(dir, 0)
		if err != nil {
			return nil // no Go files here
		}
		checked++
		path := "github.com/lockedjob/lockedjob/" + filepath.ToSlash(must(filepath.Rel(root, dir)))
		if slices.Contains(p.Imports, libraryPath) && !slices.Contains(mayImportLibrary, path) {
			t.Errorf("%s imports the lock library: go through the lock book (internal/lockbook)", path)
		}
		if slices.Contains(p.Imports, testOnly) {
			t.Errorf("%s imports %s, which only tests may import", path, testOnly)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 20 {
		t.Fatalf("checked only %d packages: is the module root at %s?", checked, root)
	}
}

// skipDir leaves out what is not the module's own code: hidden and testdata folders, and nested
// modules (their own go.mod), which cannot import this module's internal packages anyway.
func skipDir(root, dir, name string) bool {
	if dir == root {
		return false
	}
	if strings.HasPrefix(name, ".") || name == "testdata" || name == "bin" || name == "node_modules" {
		return true
	}
	_, err := os.Stat(filepath.Join(dir, "go.mod"))
	return err == nil
}

// must is for a path that cannot fail: Rel of a folder found under root.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
