package main

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestReachesTrainThroughBench keeps the layers as docs/architecture.md
// draws them: the command line reaches package train (and zero's run
// loop under it) only through bench, so that what the command line runs is
// what bench reports. Tests may reach further in.
func TestReachesTrainThroughBench(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("no Go files here (%v)", err)
	}
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
			if p, _ := strconv.Unquote(im.Path.Value); p == "trainmem/train" {
				t.Errorf("%s imports %s: the command line reaches it through bench", f, p)
			}
		}
	}
}
