package cuda

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestLeaf keeps the device contract a leaf: nothing in it may import
// another package of trainmem but a leaf of its own (cuda/enum: a package
// that imports nothing of trainmem either), so that every device, the model
// and the trainer can depend on it and it on none of them.
func TestLeaf(t *testing.T) {
	mod, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	module := strings.Fields(strings.SplitN(string(mod), "\n", 2)[0])[1]
	for _, p := range internalImports(t, ".", module) {
		dir := strings.TrimPrefix(p, module+"/cuda/")
		if dir == p || strings.Contains(dir, "/") {
			t.Errorf("the device contract imports %s: it imports no package of %s outside cuda/'s own leaves", p, module)
			continue
		}
		for _, q := range internalImports(t, dir, module) {
			t.Errorf("the device contract imports %s, which imports %s: a package the contract imports imports no package of %s", p, q, module)
		}
	}
}

// internalImports lists the packages of module that dir's Go files (tests
// aside) import.
func internalImports(t *testing.T, dir, module string) []string {
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no Go files in %s (%v)", dir, err)
	}
	var out []string
	seen := map[string]bool{}
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		ast, err := parser.ParseFile(fset, f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, im := range ast.Imports {
			p, _ := strconv.Unquote(im.Path.Value)
			if (p == module || strings.HasPrefix(p, module+"/")) && !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
		}
	}
	return out
}
