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

// TestOneDoorToRedis keeps the lock book the controller's only way to the lock library: outside
// lockbook*.go no file may name the library's client, build one of its call options, or reach into
// the book's client field. Types and errors of the library are fine everywhere.
func TestOneDoorToRedis(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") || strings.HasPrefix(name, "lockbook") {
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
				t.Errorf("%s uses redislock.%s: go through the lock book (lockbook_redis.go)", name, sel.Sel.Name)
			}
			if sel.Sel.Name == "redis" {
				t.Errorf("%s reaches into the lock book's client: go through its methods", name)
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
