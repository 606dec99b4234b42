package files

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func write(t *testing.T, path, s string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func mkfifo(t *testing.T, path string) string {
	t.Helper()
	if err := syscall.Mkfifo(path, 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	return path
}

// Only regular files are read: a directory, a FIFO (which would block an
// open until a writer came) and a device (/dev/zero never ends) are
// refused before they are opened, with the flag and the reason; a symbolic
// link to a regular file is followed.
func TestOpenInput(t *testing.T) {
	dir := t.TempDir()
	reg := write(t, filepath.Join(dir, "d.txt"), "hello")
	link := filepath.Join(dir, "link.txt")
	if err := os.Symlink(reg, link); err != nil {
		t.Fatal(err)
	}
	fifo := mkfifo(t, filepath.Join(dir, "fifo"))
	for _, tc := range []struct {
		path string
		want string // "" for success
	}{
		{reg, ""},
		{link, ""},
		{dir, "a directory"},
		{fifo, "a FIFO"},
		{"/dev/zero", "a device"},
		{filepath.Join(dir, "missing"), "no such file"},
	} {
		done := make(chan struct{})
		var f *os.File
		var size int64
		var err error
		go func() { f, size, err = OpenInput("--data", tc.path); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: OpenInput hangs", tc.path)
		}
		if tc.want == "" {
			if err != nil || size != 5 {
				t.Errorf("%s: size %d, %v", tc.path, size, err)
			} else {
				f.Close()
			}
			continue
		}
		var ie *InputError
		if !errors.As(err, &ie) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "--data "+tc.path) {
			t.Errorf("%s: %v, want an *InputError naming --data and %q", tc.path, err, tc.want)
		}
	}
}

// Check refuses, before any work, every output that would fail or destroy
// data, and compares files by identity, not by spelling.
func TestCheck(t *testing.T) {
	dir := t.TempDir()
	data := write(t, filepath.Join(dir, "d.txt"), "corpus")
	link := filepath.Join(dir, "link.txt")
	if err := os.Symlink("d.txt", link); err != nil {
		t.Fatal(err)
	}
	hard := filepath.Join(dir, "hard.txt")
	if err := os.Link(data, hard); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	readonly := write(t, filepath.Join(dir, "ro.jsonl"), "")
	if err := os.Chmod(readonly, 0o444); err != nil {
		t.Fatal(err)
	}
	dataIn := []Path{{"--data", data}}
	for _, tc := range []struct {
		name    string
		ins     []Path
		outs    []Path
		want    string // "" for success
		rootToo bool   // the check holds for root as well
	}{
		{"fine", dataIn, []Path{{"--out", filepath.Join(dir, "run.jsonl")}, {"--save", filepath.Join(dir, "m.bin")}}, "", true},
		{"missing directory", nil, []Path{{"--out", filepath.Join(dir, "no", "x.jsonl")}}, "does not exist", true},
		{"a directory", nil, []Path{{"--out", sub}}, "a directory", true},
		{"unwritable directory", nil, []Path{{"--out", "/proc/x.jsonl"}}, "cannot be written", true},
		{"read-only file", nil, []Path{{"--out", readonly}}, "cannot be written", false},
		{"out is data", dataIn, []Path{{"--out", data}}, "the same file as --data", true},
		{"out is data, respelt", dataIn, []Path{{"--out", filepath.Join(sub, "..", "d.txt")}}, "the same file as --data", true},
		{"out is a link to data", dataIn, []Path{{"--out", link}}, "the same file as --data", true},
		{"out is a hard link to data", dataIn, []Path{{"--out", hard}}, "the same file as --data", true},
		{"out is save", nil, []Path{{"--out", filepath.Join(dir, "z")}, {"--save", filepath.Join(sub, "..", "z")}}, "the same file as --out", true},
		{"missing input", []Path{{"--load", filepath.Join(dir, "nope.bin")}}, nil, "no such file", true},
		{"input is a directory", []Path{{"--data", sub}}, nil, "a directory", true},
		{"output to a device", nil, []Path{{"--out", "/dev/null"}}, "", true},
		{"empty names", []Path{{"--data", ""}}, []Path{{"--out", ""}}, "", true},
	} {
		if !tc.rootToo && os.Geteuid() == 0 {
			continue // root writes anything
		}
		err := Check(tc.ins, tc.outs)
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		var pe *PathError
		if !errors.As(err, &pe) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want a *PathError with %q", tc.name, err, tc.want)
		}
	}
	// Nothing is left behind by the check.
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".") {
			t.Errorf("the check left %s", e.Name())
		}
	}
}

// WriteAtomic replaces only regular files: a link is written through to
// its target (and stays a link), a device or FIFO is written straight into
// (and stays what it is), a directory is refused; a failed write leaves the
// target as it was and no temporary file; the replaced file's mode is kept.
func TestWriteAtomic(t *testing.T) {
	dir := t.TempDir()
	put := func(s string) func(io.Writer) error {
		return func(w io.Writer) error { _, err := io.WriteString(w, s); return err }
	}
	// Through a symbolic link, also a dangling one.
	tgt := write(t, filepath.Join(dir, "target"), "old")
	if err := os.Chmod(tgt, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	os.Symlink("target", link)
	if err := WriteAtomic(link, put("new")); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Lstat(link); fi.Mode()&fs.ModeSymlink == 0 {
		t.Error("the link was replaced by a file")
	}
	if b, _ := os.ReadFile(tgt); string(b) != "new" {
		t.Errorf("target holds %q", b)
	}
	if fi, _ := os.Stat(tgt); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want the replaced file's 0600", fi.Mode().Perm())
	}
	dangling := filepath.Join(dir, "dangling")
	os.Symlink("later", dangling)
	if err := WriteAtomic(dangling, put("x")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "later")); string(b) != "x" {
		t.Errorf("a dangling link's target holds %q", b)
	}
	// A device stays a device.
	if err := WriteAtomic("/dev/null", put("discarded")); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat("/dev/null"); fi.Mode()&fs.ModeCharDevice == 0 {
		t.Fatal("/dev/null is no longer a device")
	}
	// A FIFO is written into.
	fifo := mkfifo(t, filepath.Join(dir, "fifo"))
	got := make(chan string)
	go func() { b, _ := os.ReadFile(fifo); got <- string(b) }()
	if err := WriteAtomic(fifo, put("through the pipe")); err != nil {
		t.Fatal(err)
	}
	if s := <-got; s != "through the pipe" {
		t.Errorf("the FIFO's reader got %q", s)
	}
	if fi, _ := os.Lstat(fifo); fi.Mode()&fs.ModeNamedPipe == 0 {
		t.Error("the FIFO was replaced")
	}
	// A directory is refused.
	if err := WriteAtomic(dir, put("x")); err == nil {
		t.Error("a directory was written")
	}
	// A failed write changes nothing and leaves no temporary file.
	if err := WriteAtomic(tgt, func(w io.Writer) error { io.WriteString(w, "partial"); return errors.New("boom") }); err == nil {
		t.Error("the write's error was lost")
	}
	if b, _ := os.ReadFile(tgt); string(b) != "new" {
		t.Errorf("a failed write left %q", b)
	}
	noTemps(t, dir)
}

func noTemps(t *testing.T, dir string) {
	t.Helper()
	for _, name := range TempsIn(dir) {
		t.Errorf("temporary file %s left", name)
	}
}

// Lines: nothing is touched before the first line (an old file stays
// until then), the file is whole JSON Lines after every line, and a link
// is written through.
func TestLines(t *testing.T) {
	dir := t.TempDir()
	out := write(t, filepath.Join(dir, "run.jsonl"), "old run\n")
	link := filepath.Join(dir, "link.jsonl")
	os.Symlink("run.jsonl", link)
	l := CreateLines(link)
	if b, _ := os.ReadFile(out); string(b) != "old run\n" {
		t.Fatalf("before the first line the file holds %q", b)
	}
	for i, line := range []string{`{"step":1}`, `{"step":2}`, `{"step":3}`} {
		if err := l.WriteLine([]byte(line)); err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(out)
		lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
		if len(lines) != i+1 || lines[i] != line || !strings.HasSuffix(string(b), "\n") {
			t.Fatalf("after line %d the file holds %q", i+1, b)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.WriteLine([]byte("late")); err == nil {
		t.Error("a line written after Close")
	}
	if fi, _ := os.Lstat(link); fi.Mode()&fs.ModeSymlink == 0 {
		t.Error("the link was replaced")
	}
	if l.Count() != 3 {
		t.Errorf("Count %d", l.Count())
	}
	noTemps(t, dir)
	// Nothing written: nothing created.
	none := filepath.Join(dir, "none.jsonl")
	if err := CreateLines(none).Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(none); !errors.Is(err, fs.ErrNotExist) {
		t.Error("a Lines with no line created its file")
	}
	// Into a FIFO.
	fifo := mkfifo(t, filepath.Join(dir, "fifo"))
	got := make(chan []string)
	go func() {
		f, err := os.Open(fifo)
		if err != nil {
			got <- nil
			return
		}
		defer f.Close()
		var ls []string
		for sc := bufio.NewScanner(f); sc.Scan(); {
			ls = append(ls, sc.Text())
		}
		got <- ls
	}()
	lf := CreateLines(fifo)
	lf.WriteLine([]byte("a"))
	lf.WriteLine([]byte("b"))
	if err := lf.Close(); err != nil {
		t.Fatal(err)
	}
	if ls := <-got; strings.Join(ls, ",") != "a,b" {
		t.Errorf("the FIFO's reader got %v", ls)
	}
}

// RemoveTemps removes the temporary file of a write in progress (what a
// process stopped by a signal calls before it exits).
func TestRemoveTemps(t *testing.T) {
	dir := t.TempDir()
	started, release := make(chan struct{}), make(chan struct{})
	done := make(chan error)
	go func() {
		done <- WriteAtomic(filepath.Join(dir, "m.bin"), func(w io.Writer) error {
			io.WriteString(w, "half")
			close(started)
			<-release
			return errors.New("stopped")
		})
	}()
	<-started
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Fatalf("%d files while writing, want the temporary one", len(ents))
	}
	RemoveTemps()
	noTemps(t, dir)
	close(release)
	<-done
	noTemps(t, dir)
}

// A process's descriptor links (/dev/stdout, /dev/fd/N, /proc/self/fd/N)
// name an open file: it is written straight into, appending, never replaced
// by a new one (a shell's redirected log keeps its inode and its start); a
// pipe behind one works; several outputs may share /dev/null.
func TestDescriptorLinks(t *testing.T) {
	dir := t.TempDir()
	log := write(t, filepath.Join(dir, "shell.log"), "the shell's start\n")
	f, err := os.OpenFile(log, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	before, _ := os.Stat(log)
	for _, link := range []string{fmt.Sprintf("/proc/self/fd/%d", f.Fd()), fmt.Sprintf("/dev/fd/%d", f.Fd())} {
		if err := Check(nil, []Path{{"--out", link}}); err != nil {
			t.Fatalf("%s: %v", link, err)
		}
		if err := WriteAtomic(link, func(w io.Writer) error { _, err := io.WriteString(w, "record\n"); return err }); err != nil {
			t.Fatal(err)
		}
	}
	after, _ := os.Stat(log)
	if !os.SameFile(before, after) {
		t.Error("the redirected file was replaced by a new one")
	}
	if b, _ := os.ReadFile(log); string(b) != "the shell's start\nrecord\nrecord\n" {
		t.Errorf("the log holds %q", b)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan string)
	go func() { b, _ := io.ReadAll(r); got <- string(b) }()
	l := CreateLines(fmt.Sprintf("/proc/self/fd/%d", w.Fd()))
	if err := l.WriteLine([]byte(`{"step":1}`)); err != nil {
		t.Fatal(err)
	}
	l.Close()
	w.Close()
	if s := <-got; s != "{\"step\":1}\n" {
		t.Errorf("the pipe carried %q", s)
	}
	if err := Check(nil, []Path{{"--out", "/dev/null"}, {"--save", "/dev/null"}}); err != nil {
		t.Errorf("two outputs into /dev/null: %v", err)
	}
}

// After RemoveTemps (a process stopping on its second signal), no write
// starts a temporary file that would be left behind.
func TestNoTempsAfterRemoveTemps(t *testing.T) {
	defer func() { temps.Lock(); temps.closing = false; temps.Unlock() }()
	RemoveTemps()
	dir := t.TempDir()
	if err := WriteAtomic(filepath.Join(dir, "m.bin"), func(io.Writer) error { return nil }); err == nil {
		t.Error("a write started after RemoveTemps")
	}
	noTemps(t, dir)
}

// A writer that drops its errors (svgo's, under the plots' SVG canvas) no
// longer makes a write onto a full disk look done: WriteAtomic fails with
// the first write error its file gave. /dev/full, reached through a link,
// is the full disk.
func TestWriteAtomicKeepsDroppedErrors(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full here")
	}
	link := filepath.Join(t.TempDir(), "plot.svg")
	if err := os.Symlink("/dev/full", link); err != nil {
		t.Fatal(err)
	}
	err := WriteAtomic(link, func(w io.Writer) error {
		fmt.Fprint(w, "<svg/>") // the error dropped, as svgo does
		return nil
	})
	if err == nil || !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("a write onto a full disk whose writer dropped the error: %v, want ENOSPC", err)
	}
}
