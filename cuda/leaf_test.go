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
// another package of trainmem, so that every device, the model and the
// trainer can depend on it and it on none of them.
func TestLeaf(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("no Go files here (%v)", err)
	}
	mod, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	module := strings.Fields(strings.SplitN(string(mod), "\n", 2)[0])[1]
	fset := token.NewFileSet()
	for _, f := range files {
		ast, err := parser.ParseFile(fset, f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, im := range ast.Imports {
			p, _ := strconv.Unquote(im.Path.Value)
			if p == module || strings.HasPrefix(p, module+"/") {
				t.Errorf("%s imports %s: the device contract imports no package of %s", f, p, module)
			}
		}
	}
}
