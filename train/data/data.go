// Package data supplies training tokens: a text file read as bytes (for the
// vocabulary-256 presets), an llm.c token file (for GPT-2-vocabulary
// presets), or, without a file, a default corpus built into the binary; and a
// deterministic loader that cuts them into batches of inputs and next-token
// targets.
//
// Error policy: every function returns errors (never panics on bad input);
// an error names the source, the bad value and what is valid, and an error
// about a file (or a dataset too small for a batch) is a *files.InputError.
package data

import (
	_ "embed"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"time"

	"trainmem/model/files"
)

// TokenFileMagic and TokenFileVersion identify an llm.c token file: a header
// of 256 little-endian int32 (magic, version, token count, then zeros)
// followed by the tokens as little-endian uint16.
const (
	TokenFileMagic   = 20240520
	TokenFileVersion = 1
)

// CheckpointMagic is llm.c's model-file magic, recognised to say so when a
// checkpoint is given as data.
const CheckpointMagic = 20240326

const headerBytes = 256 * 4

// Format says how a Dataset's tokens were read.
type Format string

// The formats.
const (
	Text      Format = "text"    // bytes of a text file, one token per byte
	TokenFile Format = "llm.c"   // llm.c token file (.bin)
	Default   Format = "default" // the built-in corpus, as bytes
	Tokens    Format = "tokens"  // token ids given in memory (FromTokens)
)

// Dataset is a token sequence and where it came from. A file's tokens are
// not loaded: the file stays open and each batch reads its windows with
// ReadAt, so a multi-gigabyte token file costs no memory, and a file that
// shrinks or changes during a run is an error naming it, never a crash or
// an out-of-vocabulary id. Close closes the file.
type Dataset struct {
	Source string // the file name, or "default corpus"
	Format Format

	f     *os.File // Text, TokenFile: the file
	off   int64    // where the tokens start in it (the token file's header)
	n     int64    // tokens in the file
	width int64    // bytes a token: 1 (text) or 2 (uint16)
	vocab int      // the vocabulary the file was checked against
	// size and mod are the file's when it was opened: a file rewritten in
	// place (same size, every byte a valid token) is caught by its
	// modification time.
	size int64
	mod  time.Time

	bytes []byte  // Default: one token a byte
	ids   []int32 // Tokens
}

// Len is the number of tokens.
func (d *Dataset) Len() int64 {
	switch {
	case d.f != nil:
		return d.n
	case d.ids != nil:
		return int64(len(d.ids))
	}
	return int64(len(d.bytes))
}

// ReadAt fills dst with the tokens from position start (start+len(dst) ≤
// Len). A file read again that has changed since it was checked (shorter,
// or holding an id the vocabulary does not) is an error naming it.
func (d *Dataset) ReadAt(dst []int32, start int64) error {
	if start < 0 || start+int64(len(dst)) > d.Len() {
		return fmt.Errorf("data: %s: tokens %d to %d requested of %d", d.Source, start, start+int64(len(dst)), d.Len())
	}
	switch {
	case d.ids != nil:
		copy(dst, d.ids[start:])
		return nil
	case d.f == nil:
		for i, c := range d.bytes[start : start+int64(len(dst))] {
			dst[i] = int32(c)
		}
		return nil
	}
	if fi, err := d.f.Stat(); err == nil && (!fi.ModTime().Equal(d.mod) || fi.Size() != d.size) {
		return fmt.Errorf("data: %s changed while it was read: written at %s, after the run opened it (%s)", d.Source, fi.ModTime().Format(time.RFC3339Nano), d.mod.Format(time.RFC3339Nano))
	}
	buf := make([]byte, int64(len(dst))*d.width)
	if n, err := d.f.ReadAt(buf, d.off+start*d.width); n < len(buf) {
		if err == nil || errors.Is(err, io.EOF) {
			return fmt.Errorf("data: %s changed while it was read: it ends before token %d, and had %d tokens when it was checked", d.Source, start+int64(n)/d.width, d.n)
		}
		return fmt.Errorf("data: reading %s: %w", d.Source, err)
	}
	for i := range dst {
		if d.width == 2 {
			dst[i] = int32(binary.LittleEndian.Uint16(buf[2*i:]))
		} else {
			dst[i] = int32(buf[i])
		}
		if int(dst[i]) >= d.vocab {
			return fmt.Errorf("data: %s changed while it was read: token id %d at position %d is not below the model's vocabulary of %d", d.Source, dst[i], start+int64(i), d.vocab)
		}
	}
	return nil
}

// Close closes the file, if any. The dataset is empty afterwards.
func (d *Dataset) Close() error {
	d.bytes, d.ids, d.n = nil, nil, 0
	if d.f == nil {
		return nil
	}
	f := d.f
	d.f = nil
	return f.Close()
}

//go:embed corpus.txt
var corpus string

// DefaultCorpus returns the built-in corpus as text: English prose written
// for trainmem (generated deterministically by corpus_gen_test.go; nothing is
// downloaded). It is varied enough to be worth learning and regular enough
// that the tiny preset's byte-level loss halves within a couple of hundred
// steps.
func DefaultCorpus() string { return corpus }

// DefaultDataset is the built-in corpus as byte tokens, checked against the
// vocabulary like any file.
func DefaultDataset(vocab int) (*Dataset, error) {
	ds := &Dataset{Source: "default corpus", Format: Default, bytes: []byte(corpus)}
	if err := ds.Check(vocab); err != nil {
		return nil, err
	}
	return ds, nil
}

// FromTokens is a dataset of token ids held in memory (tests, generated
// data); tokens is used as it is, not copied.
func FromTokens(source string, tokens []int32) *Dataset {
	return &Dataset{Source: source, Format: Tokens, ids: tokens}
}

// Load opens the tokens of path for a model of the given vocabulary. A
// file that starts with the token-file magic, or whose name ends in .bin,
// is an llm.c token file (and must be a valid one); any other file is text,
// one token per byte. Every token must be below vocab (checked here, the
// file read in chunks). Only a regular file is read (a FIFO, a device or a
// directory is refused before it is opened), and no further than the size
// it has when opened; errors about the file are *files.InputError and name
// it.
func Load(path string, vocab int) (*Dataset, error) {
	if vocab <= 0 {
		return nil, fmt.Errorf("data: vocabulary %d must be positive", vocab)
	}
	f, size, err := files.OpenInput("--data", path)
	if err != nil {
		return nil, err
	}
	ds := &Dataset{Source: path, f: f, vocab: vocab, Format: Text, n: size, width: 1, size: size}
	if fi, err := f.Stat(); err == nil {
		ds.mod, ds.size = fi.ModTime(), fi.Size()
	}
	fail := func(err error) (*Dataset, error) {
		ds.Close()
		return nil, files.BadInput(path, err)
	}
	if size == 0 {
		return fail(fmt.Errorf("data: %s is empty", path))
	}
	head := make([]byte, min(size, headerBytes))
	if _, err := io.ReadFull(io.NewSectionReader(f, 0, size), head); err != nil {
		return fail(fmt.Errorf("data: reading %s: %w", path, err))
	}
	magic := len(head) >= 4 && binary.LittleEndian.Uint32(head) == TokenFileMagic
	if magic || strings.EqualFold(filepath.Ext(path), ".bin") {
		ds.Format, ds.off, ds.width = TokenFile, headerBytes, 2
		if ds.n, err = tokenFileCount(path, head, size); err != nil {
			return fail(err)
		}
	}
	if err := ds.Check(vocab); err != nil {
		return fail(err)
	}
	return ds, nil
}

// tokenFileCount checks an llm.c token file's header against the file's
// size and returns its token count.
func tokenFileCount(path string, head []byte, size int64) (int64, error) {
	if size < headerBytes {
		return 0, fmt.Errorf("data: %s: bad token file header: %d bytes, a header is %d", path, size, headerBytes)
	}
	magic := int32(binary.LittleEndian.Uint32(head[0:]))
	version := int32(binary.LittleEndian.Uint32(head[4:]))
	count := int64(int32(binary.LittleEndian.Uint32(head[8:])))
	switch magic {
	case TokenFileMagic:
	case CheckpointMagic:
		return 0, fmt.Errorf("data: %s: bad token file header: magic %d is llm.c's model checkpoint magic (expected %d); was a checkpoint given as data?", path, magic, TokenFileMagic)
	default:
		return 0, fmt.Errorf("data: %s: bad token file header: magic %d, expected %d (llm.c token file); text files must not end in .bin", path, magic, TokenFileMagic)
	}
	if version != TokenFileVersion {
		return 0, fmt.Errorf("data: %s: bad token file header: version %d, expected %d", path, version, TokenFileVersion)
	}
	if count < 0 {
		return 0, fmt.Errorf("data: %s: bad token file header: token count %d is negative", path, count)
	}
	if body := size - headerBytes; body != 2*count {
		return 0, fmt.Errorf("data: %s: bad token file header: it declares %d tokens (%d bytes) but %d bytes follow the header", path, count, 2*count, body)
	}
	if count == 0 {
		return 0, fmt.Errorf("data: %s is empty: its header declares 0 tokens", path)
	}
	return count, nil
}

// WriteTokenFile writes tokens (each in [0, 65535]) as an llm.c token file.
func WriteTokenFile(w io.Writer, tokens []int32) error {
	if len(tokens) > 1<<31-1 {
		return fmt.Errorf("data: %d tokens exceed a token file's int32 count", len(tokens))
	}
	buf := make([]byte, headerBytes+2*len(tokens))
	binary.LittleEndian.PutUint32(buf[0:], TokenFileMagic)
	binary.LittleEndian.PutUint32(buf[4:], TokenFileVersion)
	binary.LittleEndian.PutUint32(buf[8:], uint32(len(tokens)))
	for i, t := range tokens {
		if t < 0 || t > 0xFFFF {
			return fmt.Errorf("data: token %d at position %d does not fit a token file's uint16", t, i)
		}
		binary.LittleEndian.PutUint16(buf[headerBytes+2*i:], uint16(t))
	}
	_, err := w.Write(buf)
	return err
}

// Check returns an error naming the first token that is not in [0, vocab):
// its id, its position and the vocabulary. Byte tokens need no look when
// vocab is at least 256, uint16 ones when it is at least 65536; a file is
// read in chunks of checkChunk tokens.
func (d *Dataset) Check(vocab int) error {
	n := d.Len()
	if n == 0 {
		return fmt.Errorf("data: %s is empty", d.Source)
	}
	wide := d.Format == TokenFile || d.ids != nil
	if (!wide && vocab >= 256) || (d.Format == TokenFile && vocab >= 1<<16) {
		return nil
	}
	saved := d.vocab
	d.vocab = 1 << 31 // ReadAt's own check off: this one names the position
	defer func() { d.vocab = saved }()
	buf := make([]int32, min(n, checkChunk))
	for at := int64(0); at < n; at += int64(len(buf)) {
		chunk := buf[:min(int64(len(buf)), n-at)]
		if err := d.ReadAt(chunk, at); err != nil {
			return err
		}
		for i, t := range chunk {
			if t < 0 || int(t) >= vocab {
				hint := ""
				if d.Format == TokenFile && vocab <= 256 {
					hint = "; token files hold GPT-2 token ids: use a GPT-2-vocabulary preset, or a text file for this one"
				}
				return fmt.Errorf("data: %s: token id %d at position %d is not below the model's vocabulary of %d%s", d.Source, t, at+int64(i), vocab, hint)
			}
		}
	}
	return nil
}

// checkChunk is how many tokens Check reads at a time.
const checkChunk = 1 << 18

// Loader cuts a dataset into batches: each of the B rows is a window of T+1
// consecutive tokens starting at a uniformly random position, inputs its
// first T, targets its last T (the next token of each input). The windows
// come from a PCG stream seeded by the seed, so the same seed gives the same
// batches on every run and machine.
type Loader struct {
	ds     *Dataset
	B, T   int
	rng    *rand.Rand
	window []int32 // T+1 tokens, read at once
}

// NewLoader makes a loader of batches of B sequences of T tokens. The
// dataset must hold at least one window, T+1 tokens, and one batch's worth
// of tokens, B·T+1, so that a batch is not mostly repeats.
func NewLoader(ds *Dataset, B, T int, seed uint64) (*Loader, error) {
	if B <= 0 || T <= 0 {
		return nil, fmt.Errorf("data: batch %d and sequence length %d must be positive", B, T)
	}
	if need := int64(B)*int64(T) + 1; ds.Len() < need {
		return nil, files.BadInput(ds.Source, fmt.Errorf("data: %s holds %d tokens, shorter than one batch: batch %d × sequence %d needs at least %d", ds.Source, ds.Len(), B, T, need))
	}
	return &Loader{ds: ds, B: B, T: T, rng: rand.New(rand.NewPCG(seed, 0x7472616d))}, nil
}

// Next fills inputs and targets (each B·T, row-major (b, t)) with the next
// batch.
func (l *Loader) Next(inputs, targets []int32) error {
	n := l.B * l.T
	if len(inputs) != n || len(targets) != n {
		return fmt.Errorf("data: Next wants inputs and targets of B·T = %d tokens, got %d and %d", n, len(inputs), len(targets))
	}
	starts := int(l.ds.Len()) - l.T // window starts 0..len-T-1
	if len(l.window) != l.T+1 {
		l.window = make([]int32, l.T+1)
	}
	for b := range l.B {
		s := int64(l.rng.IntN(starts))
		if err := l.ds.ReadAt(l.window, s); err != nil {
			return err
		}
		copy(inputs[b*l.T:(b+1)*l.T], l.window[:l.T])
		copy(targets[b*l.T:(b+1)*l.T], l.window[1:])
	}
	return nil
}

// Batch returns the next batch in new slices (tests and examples; a run
// uses Next, which reports a data file that changed under it).
func (l *Loader) Batch() (inputs, targets []int32, err error) {
	inputs, targets = make([]int32, l.B*l.T), make([]int32, l.B*l.T)
	return inputs, targets, l.Next(inputs, targets)
}
