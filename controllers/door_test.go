package controllers

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestOneDoorToRedis keeps the lock book (internal/lockbook) the reconcilers' only way to the lock
// library: no file of the package may name the library's client, build one or build one of its
// call options. The book's own client is out of this package's reach (an unexported field of
// internal/lockbook); the test guards the rest while the package still imports the library for its
// types and errors, which are fine.
func TestOneDoorToRedis(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if pkg, ok := sel.X.(*ast.Ident); ok && pkg.Name == "redislock" && reachesPast(sel.Sel.Name) {
				t.Errorf("%s uses redislock.%s: go through the lock book (internal/lockbook)", name, sel.Sel.Name)
			}
			return true
		})
	}
	if checked < 10 {
		t.Fatalf("checked only %d files: is the test running in controllers/?", checked)
	}
}

// reachesPast reports whether a library name gives access to Redis rather than naming a type, an
// error or a value the library returned.
func reachesPast(name string) bool {
	return name == "Client" || name == "New" || name == "NewRedlock" || strings.HasPrefix(name, "With")
}
