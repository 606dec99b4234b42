package main

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestLayers keeps the packages' dependencies one way, as
// docs/architecture.md draws them.
//   - The command line reaches package train (and zero's run loop under
//     it) only through bench, so that what the command line runs is what
//     bench reports; its tests may reach further in.
//   - The device contract (cuda) is a leaf, so that every device, the
//     model and the trainer can depend on it and it on none of them: it
//     imports no package of trainmem but its own leaf cuda/enum, which
//     imports none, in its tests too.
func TestLayers(t *testing.T) {
	mod, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	module := strings.Fields(strings.SplitN(string(mod), "\n", 2)[0])[1]
	for _, rule := range []struct {
		dir     string
		tests   bool                   // the rule holds for the _test.go files too
		allowed func(path string) bool // of the module's packages
		why     string
	}{
		{".", false, func(p string) bool { return p != module+"/train" }, "the command line reaches it through bench"},
		{"../../cuda", true, func(p string) bool { return p == module+"/cuda/enum" }, "the device contract imports no package of " + module + " but cuda/enum"},
		{"../../cuda/enum", true, func(string) bool { return false }, "the device contract imports cuda/enum, so it imports no package of " + module},
	} {
		files, err := filepath.Glob(filepath.Join(rule.dir, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("no Go files in %s (%v)", rule.dir, err)
		}
		fset := token.NewFileSet()
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") && !rule.tests {
				continue
			}
			ast, err := parser.ParseFile(fset, f, nil, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			for _, im := range ast.Imports {
				p, _ := strconv.Unquote(im.Path.Value)
				if (p == module || strings.HasPrefix(p, module+"/")) && !rule.allowed(p) {
					t.Errorf("%s imports %s: %s", f, p, rule.why)
				}
			}
		}
	}
}
