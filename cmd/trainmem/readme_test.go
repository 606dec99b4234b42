package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"trainmem/model/files"
)

// readmeBegin and readmeEnd mark, in README.md, the memory table the main
// command prints.
const (
	readmeBegin = "<!-- begin: train's memory table -->\n```text\n"
	readmeEnd   = "```\n<!-- end: train's memory table -->"
)

// The README's first screen shows the memory table its first command
// (`go run ./cmd/trainmem train`, no flags) prints, as it prints it: the
// command is run here and its table compared with the README's, line for
// line (the allocator's bytes are exact, and the same on every machine);
// -update rewrites the README's block after review.
func TestREADMEMemoryTable(t *testing.T) {
	if testing.Short() {
		t.Skip("trains tiny for 200 steps")
	}
	out, _ := mustRun(t, "train")
	i := strings.Index(out, "where the memory went")
	if i < 0 {
		t.Fatalf("train printed no memory table:\n%s", out)
	}
	table := strings.TrimRight(out[i:], "\n") + "\n"
	path := filepath.Join("..", "..", "README.md")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	lo, hi := strings.Index(readme, readmeBegin), strings.Index(readme, readmeEnd)
	if lo < 0 || hi < lo {
		t.Fatalf("README.md has no block between %q and %q", readmeBegin, readmeEnd)
	}
	have := readme[lo+len(readmeBegin) : hi]
	if have == table {
		return
	}
	if *update {
		readme = readme[:lo+len(readmeBegin)] + table + readme[hi:]
		if err := files.WriteAtomic(path, func(w io.Writer) error { _, err := io.WriteString(w, readme); return err }); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("README.md's memory table is not what `trainmem train` prints (go test ./cmd/trainmem -run TestREADMEMemoryTable -update rewrites it after review):\n--- prints\n%s--- README\n%s", table, have)
}

// Every subcommand's -h gives each flag one line of help (they ran to 500
// characters), points to the guide, and the guide explains every flag
// (docs/guide.md names each as --name).
func TestFlagsHelp(t *testing.T) {
	guide, err := os.ReadFile(filepath.Join("..", "..", "docs", "guide.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range commandNames() {
		if name == "help" {
			continue
		}
		_, help, code := runArgs(t, name, "-h")
		if code != 0 {
			t.Errorf("%s -h: exit %d", name, code)
			continue
		}
		if !strings.Contains(help, guideFlags) {
			t.Errorf("%s -h does not point to %s", name, guideFlags)
		}
		flag := ""
		for _, line := range strings.Split(help, "\n") {
			if f, ok := strings.CutPrefix(line, "  -"); ok {
				flag = strings.Fields(f)[0]
				if !strings.Contains(string(guide), "--"+flag) {
					t.Errorf("%s --%s: docs/guide.md does not explain it", name, flag)
				}
				continue
			}
			if u, ok := strings.CutPrefix(line, "    \t"); ok {
				if n := len([]rune(u)); n > 150 {
					t.Errorf("%s --%s: %d characters of help, want one line of at most 150 (the rest in the guide)", name, flag, n)
				}
			}
		}
	}
}
