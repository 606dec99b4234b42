// Package files is how trainmem touches the file system, so that nothing a
// user asked to keep is lost or overwritten:
//
//   - inputs are opened only when they are regular files (a FIFO, a device
//     or a directory is refused before it is opened, so nothing blocks) and
//     are read no further than the size they had when opened;
//   - every path of a run is checked before the work starts (Check): an
//     output in a missing or unwritable directory, an output that is a
//     directory, and an output that is the same file as an input or as
//     another output (compared by file identity, after symbolic links) are
//     refused;
//   - outputs are written through a symbolic link to its target, straight
//     into a device or FIFO (there is nothing to make atomic), and over a
//     regular file only atomically (WriteAtomic: a temporary file in the
//     same directory, synced, renamed over the target); a line-by-line
//     output (Lines, for JSON Lines records) replaces its target when the
//     first line is complete and appends each later line with one write,
//     so the file is whole at every moment;
//   - a temporary file in progress is known (RemoveTemps), so that a
//     process stopped by a signal leaves none behind.
//
// Error policy: every function returns errors. A path refused by Check is
// a *PathError, an input that cannot be used (missing, not a regular file,
// unreadable, or with content its reader rejects) an *InputError: both are
// the user's to fix, which the command line reports with exit status 2.
//
// The package imports nothing of trainmem's.
package files

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// InputError is an input file that cannot be used: it is missing, is not a
// regular file, cannot be read, or its content is not valid. Error is the
// message of Err, which names the file.
type InputError struct {
	Path string
	Err  error
}

func (e *InputError) Error() string { return e.Err.Error() }
func (e *InputError) Unwrap() error { return e.Err }

// BadInput wraps err, an error about the input file at path, as an
// *InputError (nil stays nil; an *InputError is returned as it is).
//
// An error of the operating system's (an *fs.PathError: EIO, ENOMEM) stays
// what it is: a failure while running, not bad input.
func BadInput(path string, err error) error {
	var ie *InputError
	var os *fs.PathError
	if err == nil || errors.As(err, &ie) || errors.As(err, &os) {
		return err
	}
	return &InputError{Path: path, Err: err}
}

// PathError is a path refused before any work: Flag is how the user gave
// it (e.g. "--out"), Problem what is wrong and what would do.
type PathError struct {
	Flag, Path, Problem string
}

func (e *PathError) Error() string {
	if e.Flag == "" {
		return fmt.Sprintf("%s: %s", e.Path, e.Problem)
	}
	return fmt.Sprintf("%s %s: %s", e.Flag, e.Path, e.Problem)
}

// Path is a path as the user gave it, with the flag that gave it.
type Path struct {
	Flag string // "--out"; may be empty
	Name string // the path; empty means not given
}

// kind names what a non-regular file is.
func kind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO (named pipe)"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeDevice != 0:
		return "a device"
	}
	return "not a regular file"
}

// statInput checks that path is an existing regular file (after symbolic
// links) and returns its information.
func statInput(p Path) (fs.FileInfo, error) {
	fi, err := os.Stat(p.Name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, &InputError{p.Name, &PathError{p.Flag, p.Name, "no such file"}}
	case err != nil:
		return nil, &InputError{p.Name, &PathError{p.Flag, p.Name, err.Error()}}
	case !fi.Mode().IsRegular():
		return nil, &InputError{p.Name, &PathError{p.Flag, p.Name, kind(fi.Mode()) + ": trainmem reads regular files only"}}
	}
	return fi, nil
}

// OpenInput opens the regular file at path for reading and returns it with
// its size. Anything that is not a regular file is refused before it is
// opened (opening a FIFO would wait for a writer); the file is checked
// again once open. Errors are *InputError.
func OpenInput(flag, path string) (*os.File, int64, error) {
	p := Path{flag, path}
	if _, err := statInput(p); err != nil {
		return nil, 0, err
	}
	f, err := openNonblocking(path)
	if err != nil {
		return nil, 0, &InputError{path, &PathError{flag, path, err.Error()}}
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = errors.New(kind(fi.Mode()) + ": trainmem reads regular files only")
	}
	if err != nil {
		f.Close()
		return nil, 0, &InputError{path, &PathError{flag, path, err.Error()}}
	}
	return f, fi.Size(), nil
}

// Check refuses, before any work, the paths of a run that would fail or
// destroy data: an input that is not an existing regular file; an output
// that is a directory or a socket, an existing regular file without write
// permission, or a regular file (or a new one) in a directory that does not
// exist or cannot be written; and an output that is the same file as an
// input or as another output, by identity (device and inode after symbolic
// links, or directory and name for a file not yet there), not by spelling.
// Empty names are skipped. Errors are *PathError (or *InputError for an
// input).
func Check(inputs, outputs []Path) error {
	type known struct {
		p  Path
		id identity
	}
	var seen []known
	for _, in := range inputs {
		if in.Name == "" {
			continue
		}
		if _, err := statInput(in); err != nil {
			return err
		}
		id, err := identify(in.Name)
		if err != nil {
			return &InputError{in.Name, &PathError{in.Flag, in.Name, err.Error()}}
		}
		seen = append(seen, known{in, id})
	}
	for _, out := range outputs {
		if out.Name == "" {
			continue
		}
		if err := checkOutput(out); err != nil {
			return err
		}
		id, err := identify(out.Name)
		if err != nil {
			return &PathError{out.Flag, out.Name, err.Error()}
		}
		for _, k := range seen {
			if k.id.same(id) && !k.id.device() {
				what := "writing it would overwrite the input"
				if len(k.p.Flag) > 0 && containsPath(outputs, k.p) {
					what = "one output would replace the other"
				}
				return &PathError{out.Flag, out.Name, fmt.Sprintf("the same file as %s %s: %s (give another path)", k.p.Flag, k.p.Name, what)}
			}
		}
		seen = append(seen, known{out, id})
	}
	return nil
}

func containsPath(ps []Path, p Path) bool {
	for _, q := range ps {
		if q == p {
			return true
		}
	}
	return false
}

// checkOutput checks one output path (see Check).
func checkOutput(p Path) error {
	t, fi, direct, err := target(p.Name)
	if err != nil {
		return &PathError{p.Flag, p.Name, err.Error()}
	}
	if direct {
		if fi != nil && fi.Mode()&fs.ModeSocket != 0 {
			return &PathError{p.Flag, p.Name, kind(fi.Mode()) + ": give a file name"}
		}
		return nil // written straight into (a FIFO waits for its reader: openFIFO)
	}

	if fi != nil && !fi.Mode().IsRegular() {
		return &PathError{p.Flag, p.Name, kind(fi.Mode()) + ": give a file name"}
	}
	dir := filepath.Dir(t)
	dfi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return &PathError{p.Flag, p.Name, fmt.Sprintf("directory %s does not exist (create it first)", dir)}
	case err != nil:
		return &PathError{p.Flag, p.Name, err.Error()}
	case !dfi.IsDir():
		return &PathError{p.Flag, p.Name, fmt.Sprintf("%s is not a directory", dir)}
	}
	if fi != nil {
		f, err := os.OpenFile(t, os.O_WRONLY, 0) // opening for writing changes nothing
		if err != nil {
			return &PathError{p.Flag, p.Name, fmt.Sprintf("cannot be written (%v)", errors.Unwrap(err))}
		}
		f.Close()
	}
	// The file is written next to its target and renamed over it: the
	// directory itself must take a new file.
	probe, err := os.CreateTemp(dir, ".trainmem-check-*")
	if err != nil {
		return &PathError{p.Flag, p.Name, fmt.Sprintf("directory %s cannot be written (%v)", dir, errors.Unwrap(err))}
	}
	probe.Close()
	os.Remove(probe.Name())
	// The output is this process's while it runs (claim).
	if err := claim(t); err != nil {
		return &PathError{p.Flag, p.Name, err.Error()}
	}
	return nil
}

// maxLinks bounds how many symbolic links target follows, as the kernel's
// ELOOP does.
const maxLinks = 40

// target follows symbolic links from path to the file they lead to, which
// may not exist yet (a dangling link is written through to its target), and
// returns that path and its information (nil when absent). The directory
// part is resolved too, so that two spellings of one file give one target.
//
// direct is set when the file is not to be replaced but written straight
// into, through path itself: a device, a FIFO, a socket, or anything reached
// through a process's descriptor links (/dev/stdout, /dev/fd/N,
// /proc/PID/fd/N), which name an open file (a pipe, or the file a shell
// redirected to) rather than a place for a new one.
func target(path string) (t string, fi fs.FileInfo, direct bool, err error) {
	if fi, err := os.Stat(path); err == nil && !fi.Mode().IsRegular() && !fi.IsDir() {
		return path, fi, true, nil
	}
	p := path
	for range maxLinks {
		if dir, err := filepath.EvalSymlinks(filepath.Dir(p)); err == nil {
			p = filepath.Join(dir, filepath.Base(p))
		}
		fi, err := os.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			return p, nil, false, nil
		}
		if err != nil {
			return "", nil, false, err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			return p, fi, false, nil
		}
		if descriptorLink(p) {
			fi, err := os.Stat(path)
			return path, fi, true, err
		}
		dst, err := os.Readlink(p)
		if err != nil {
			return "", nil, false, err
		}
		if !filepath.IsAbs(dst) {
			dst = filepath.Join(filepath.Dir(p), dst)
		}
		p = dst
	}
	return "", nil, false, errors.New("too many levels of symbolic links")
}

// descriptorLink reports whether p is one of a process's descriptor links,
// /proc/PID/fd/N or /dev/fd/N.
func descriptorLink(p string) bool {
	dir := filepath.Dir(p)
	return dir == "/dev/fd" || (strings.HasPrefix(dir, "/proc/") && filepath.Base(dir) == "fd")
}

// identity is a file by what it is: an existing file's information (device
// and inode, compared by os.SameFile), or for a file not yet there its
// directory's information and its name.
type identity struct {
	file fs.FileInfo // the file, or its directory when name is set
	name string
}

func (a identity) same(b identity) bool {
	return a.name == b.name && os.SameFile(a.file, b.file)
}

// device reports whether the file is a character device (/dev/null), which
// any number of outputs may share.
func (a identity) device() bool {
	return a.name == "" && a.file.Mode()&fs.ModeCharDevice != 0
}

func identify(path string) (identity, error) {
	t, fi, _, err := target(path)
	if err != nil {
		return identity{}, err
	}
	if fi != nil {
		if fi, err = os.Stat(t); err != nil {
			return identity{}, err
		}
		return identity{file: fi}, nil
	}
	dfi, err := os.Stat(filepath.Dir(t))
	if err != nil {
		return identity{}, err
	}
	return identity{file: dfi, name: filepath.Base(t)}, nil
}

// temps are the temporary files being written, for RemoveTemps.
var temps struct {
	sync.Mutex
	names   map[string]bool
	closing bool // RemoveTemps ran: no new temporary file
}

func untrackTemp(name string) {
	temps.Lock()
	defer temps.Unlock()
	delete(temps.names, name)
}

// RemoveTemps removes every temporary file a write in progress holds, for a
// process about to exit on a signal; the writes' targets are left as they
// were, and no later write starts a temporary file.
func RemoveTemps() {
	temps.Lock()
	defer temps.Unlock()
	temps.closing = true
	for n := range temps.names {
		os.Remove(n)
		delete(temps.names, n)
	}
}

// tempMark is in the name of every temporary file: ".run.jsonl.tmp-123".
const tempMark = ".tmp-"

// TempsIn names the temporary files in dir (an unreadable dir has none):
// those of writes in progress and any that a killed process left behind.
// Tests use it to check that a write cleaned up after itself.
func TempsIn(dir string) []string {
	ents, _ := os.ReadDir(dir)
	var names []string
	for _, e := range ents {
		if strings.Contains(e.Name(), tempMark) {
			names = append(names, e.Name())
		}
	}
	return names
}

// createTemp makes the temporary file that will replace the regular file
// (or new file) t, tracked for RemoveTemps; it fails once RemoveTemps has
// run (the process is about to exit). The file is made and tracked under
// the lock RemoveTemps takes, so that a signal between the two cannot
// leave it behind (TestSecondSignalDuringSave, on a loaded machine, saw
// one left when the second signal came just as the file appeared).
func createTemp(t string) (*os.File, error) {
	temps.Lock()
	defer temps.Unlock()
	if temps.closing {
		return nil, errors.New("the process is stopping")
	}
	f, err := os.CreateTemp(filepath.Dir(t), "."+filepath.Base(t)+tempMark+"*")
	if err != nil {
		return nil, err
	}
	if temps.names == nil {
		temps.names = map[string]bool{}
	}
	temps.names[f.Name()] = true
	return f, nil
}

// dropTemp closes and removes a temporary file after a failure.
func dropTemp(f *os.File) {
	f.Close()
	os.Remove(f.Name())
	untrackTemp(f.Name())
}

// replace gives the synced temporary file tmp the mode mode and renames it
// over t, then syncs the directory (a failure there leaves a complete
// file).
func replace(tmp *os.File, t string, mode fs.FileMode) error {
	if err := os.Chmod(tmp.Name(), mode); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), t); err != nil {
		return err
	}
	untrackTemp(tmp.Name())
	if d, err := os.Open(filepath.Dir(t)); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// modeOf is the mode a replacement of t gets: the replaced file's, or 0644
// for a new file.
func modeOf(fi fs.FileInfo) fs.FileMode {
	if fi != nil {
		return fi.Mode().Perm()
	}
	return 0o644
}

// interrupted is closed by Interrupt: waits for a FIFO's reader end, with
// interruptCause.
var (
	interruptOnce  sync.Once
	interrupted    = make(chan struct{})
	interruptCause error
)

// Interrupt ends every wait for a FIFO's reader (openFIFO), so that a run
// asked to stop is not held by an output no process reads; the write
// fails, naming the FIFO, and its error wraps cause (the signal), so that
// the run exits as a stopped run does. The command line calls it on the
// first signal.
func Interrupt(cause error) {
	interruptOnce.Do(func() {
		interruptCause = cause
		close(interrupted)
	})
}

// openDirect opens path to write straight into it (see target): appending,
// so that a file behind a descriptor link (a shell's redirection) keeps what
// was written before; a FIFO waits for its reader (openFIFO).
func openDirect(path string) (*os.File, error) {
	if fi, err := os.Stat(path); err == nil && fi.Mode()&fs.ModeNamedPipe != 0 {
		return openFIFO(path)
	}
	return os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
}

// WriteAtomic writes what write writes to path. A regular file (or a new
// one) is replaced atomically: write goes to a temporary file in the same
// directory, which is synced and renamed over the target only when write
// and the sync succeed, keeping the replaced file's mode; on any error the
// temporary file is removed and the target is untouched. A symbolic link is
// written through to its target; a device or FIFO is written straight into;
// a directory or socket is refused.
func WriteAtomic(path string, write func(io.Writer) error) (err error) {
	t, fi, direct, err := target(path)
	if err != nil {
		return fmt.Errorf("files: writing %s: %w", path, err)
	}
	if fi != nil && fi.IsDir() {
		return fmt.Errorf("files: writing %s: it is a directory", path)
	}
	if direct {
		f, err := openDirect(path)
		if err != nil {
			return fmt.Errorf("files: writing %s: %w", path, err)
		}
		if err := written(f, write); err != nil {
			f.Close()
			return fmt.Errorf("%w (writing %s)", err, path)
		}
		return f.Close()
	}
	tmp, err := createTemp(t)
	if err != nil {
		return fmt.Errorf("files: writing %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			dropTemp(tmp)
		}
	}()
	if err := written(tmp, write); err != nil {
		return fmt.Errorf("%w (writing %s)", err, path)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("files: writing %s: sync: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("files: writing %s: %w", path, err)
	}
	if err := replace(tmp, t, modeOf(fi)); err != nil {
		return fmt.Errorf("files: writing %s: %w", path, err)
	}
	return nil
}

// written runs write on f and fails with the first write error f gave,
// whether write returned it or not: some writers (an SVG encoder's) drop
// their errors, and a plot onto a full disk was said to be written.
func written(f io.Writer, write func(io.Writer) error) error {
	w := &FirstError{W: f}
	if err := write(w); err != nil {
		return err
	}
	if w.Err != nil {
		return fmt.Errorf("files: %w", w.Err)
	}
	return nil
}

// FirstError is a writer that keeps its first write error (a short write
// is io.ErrShortWrite) and refuses every write after it: whoever wrote
// through it can tell afterwards that the output is not whole, even where
// a writer between them dropped the error.
type FirstError struct {
	W   io.Writer
	Err error
}

func (f *FirstError) Write(p []byte) (int, error) {
	if f.Err != nil {
		return 0, f.Err
	}
	n, err := f.W.Write(p)
	if err == nil && n < len(p) {
		err = io.ErrShortWrite
	}
	f.Err = err
	return n, err
}

// Lines writes a file one line at a time (JSON Lines records as a run
// makes them) so that it is whole at every moment: nothing is touched until
// the first line, which is written to a temporary file that then replaces
// the target (as WriteAtomic does); every later line is appended with one
// write. A symbolic link is followed to its target; a device or FIFO is
// written straight into.
type Lines struct {
	path    string
	f       *os.File
	regular bool  // f replaced a regular file (else it is written straight into)
	size    int64 // bytes of whole lines written
	n       int
	err     error
}

// CreateLines makes a Lines writer for path; nothing is opened yet.
func CreateLines(path string) *Lines { return &Lines{path: path} }

// Count is the number of lines written.
func (l *Lines) Count() int { return l.n }

// WriteLine writes line (a newline is added) as one write.
func (l *Lines) WriteLine(line []byte) error {
	if l.err != nil {
		return l.err
	}
	buf := make([]byte, len(line)+1)
	copy(buf, line)
	buf[len(line)] = '\n'
	if l.f == nil {
		l.err = l.first(buf)
		if l.err == nil {
			l.size = int64(len(buf))
			l.n++
		}
		return l.err
	}
	if _, err := l.f.Write(buf); err != nil {
		// A short write (a full disk) must not leave half a line.
		if l.regular {
			l.f.Truncate(l.size)
			l.f.Seek(l.size, io.SeekStart)
		}
		l.err = fmt.Errorf("files: writing %s: %w", l.path, err)
		return l.err
	}
	l.size += int64(len(buf))
	l.n++
	return nil
}

// first opens the target with its first line.
func (l *Lines) first(buf []byte) error {
	t, fi, direct, err := target(l.path)
	if err != nil {
		return fmt.Errorf("files: writing %s: %w", l.path, err)
	}
	if fi != nil && fi.IsDir() {
		return fmt.Errorf("files: writing %s: it is a directory", l.path)
	}
	if direct {
		f, err := openDirect(l.path)
		if err == nil {
			_, err = f.Write(buf)
		}
		if err != nil {
			if f != nil {
				f.Close()
			}
			return fmt.Errorf("files: writing %s: %w", l.path, err)
		}
		l.f = f
		return nil
	}
	tmp, err := createTemp(t)
	if err == nil {
		if _, err = tmp.Write(buf); err == nil {
			if err = tmp.Sync(); err == nil {
				err = replace(tmp, t, modeOf(fi))
			}
		}
		if err != nil {
			dropTemp(tmp)
		}
	}
	if err != nil {
		return fmt.Errorf("files: writing %s: %w", l.path, err)
	}
	l.f, l.regular = tmp, true // renamed: the same open file, now at the target
	return nil
}

// Close syncs and closes the file (nothing to do when no line was
// written). A line written after Close is an error.
func (l *Lines) Close() error {
	f := l.f
	l.f = nil
	if l.err == nil {
		l.err = fmt.Errorf("files: writing %s: already closed", l.path)
	}
	if f == nil {
		return nil
	}
	if l.regular {
		if err := f.Sync(); err != nil {
			f.Close()
			return fmt.Errorf("files: writing %s: sync: %w", l.path, err)
		}
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("files: writing %s: %w", l.path, err)
	}
	return nil
}
