package data

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/metrics"
	"strings"
	"testing"
	"time"

	"trainmem/model/files"
)

// tokensOf reads every token of ds.
func tokensOf(ds *Dataset) []int32 {
	out := make([]int32, ds.Len())
	if err := ds.ReadAt(out, 0); err != nil {
		panic(err)
	}
	return out
}

func writeFile(t *testing.T, name string, b []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func tokenFile(t testing.TB, tokens []int32) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := WriteTokenFile(&b, tokens); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// withHeader returns a copy of file with header int i set to v.
func withHeader(file []byte, i int, v int32) []byte {
	b := bytes.Clone(file)
	binary.LittleEndian.PutUint32(b[4*i:], uint32(v))
	return b
}

func TestLoad(t *testing.T) {
	gpt2 := []int32{50256, 464, 2068, 7586, 21831, 0, 65535}
	for _, tc := range []struct {
		name, file string
		data       []byte
		vocab      int
		format     Format
		want       []int32
	}{
		{"text", "a.txt", []byte("Hi!\n"), 256, Text, []int32{'H', 'i', '!', '\n'}},
		{"text, any bytes", "a.dat", []byte{0, 255, 128}, 256, Text, []int32{0, 255, 128}},
		{"token file", "t.bin", tokenFile(t, gpt2), 65536, TokenFile, gpt2},
		{"token file by magic", "tokens", tokenFile(t, gpt2[:3]), 50257, TokenFile, gpt2[:3]},
		{"token file, upper-case extension", "T.BIN", tokenFile(t, []int32{7}), 256, TokenFile, []int32{7}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeFile(t, tc.file, tc.data)
			ds, err := Load(path, tc.vocab)
			if err != nil {
				t.Fatal(err)
			}
			if ds.Format != tc.format || ds.Source != path || fmt.Sprint(tokensOf(ds)) != fmt.Sprint(tc.want) {
				t.Errorf("got %s %s %v, want %s %s %v", ds.Format, ds.Source, tokensOf(ds), tc.format, path, tc.want)
			}
		})
	}
}

func TestLoadErrors(t *testing.T) {
	good := tokenFile(t, []int32{1, 2, 3, 300})
	for _, tc := range []struct {
		name, file string
		data       []byte // nil: the file does not exist
		vocab      int
		want       []string
	}{
		{"missing", "nope.txt", nil, 256, []string{"nope.txt: no such file"}},
		{"empty text", "e.txt", []byte{}, 256, []string{"e.txt is empty"}},
		{"empty token file", "e.bin", tokenFile(t, nil), 50257, []string{"e.bin is empty", "0 tokens"}},
		{"text id beyond vocab", "a.txt", []byte("abcz"), 100, []string{"token id 122 at position 3", "vocabulary of 100"}},
		{"token id beyond vocab", "t.bin", good, 256, []string{"token id 300 at position 3", "vocabulary of 256", "GPT-2-vocabulary preset"}},
		{"short header", "t.bin", good[:100], 50257, []string{"bad token file header: 100 bytes, a header is 1024"}},
		{"text named .bin", "t.bin", []byte(strings.Repeat("hello ", 200)), 256, []string{"bad token file header: magic", "expected 20240520"}},
		{"checkpoint as data", "m.bin", withHeader(good, 0, CheckpointMagic), 50257, []string{"magic 20240326 is llm.c's model checkpoint magic"}},
		{"version", "t.bin", withHeader(good, 1, 2), 50257, []string{"version 2, expected 1"}},
		{"count too large", "t.bin", withHeader(good, 2, 5), 50257, []string{"declares 5 tokens (10 bytes) but 8 bytes follow"}},
		{"count negative", "t.bin", withHeader(good, 2, -1), 50257, []string{"token count -1 is negative"}},
		{"truncated", "t.bin", good[:len(good)-1], 50257, []string{"declares 4 tokens (8 bytes) but 7 bytes follow"}},
		{"bad vocab", "a.txt", []byte("a"), 0, []string{"vocabulary 0 must be positive"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), tc.file)
			if tc.data != nil {
				path = writeFile(t, tc.file, tc.data)
			}
			_, err := Load(path, tc.vocab)
			if err == nil {
				t.Fatalf("no error, want one containing %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestWriteTokenFileErrors(t *testing.T) {
	for _, tokens := range [][]int32{{1, 65536}, {-1}} {
		if err := WriteTokenFile(&bytes.Buffer{}, tokens); err == nil || !strings.Contains(err.Error(), "does not fit") {
			t.Errorf("WriteTokenFile(%v): %v, want an error", tokens, err)
		}
	}
}

func TestDefaultDataset(t *testing.T) {
	ds, err := DefaultDataset(256)
	if err != nil {
		t.Fatal(err)
	}
	// "Some tens of KB" of prose: between 20 and 100 KB, plain ASCII.
	if n := ds.Len(); n < 20<<10 || n > 100<<10 {
		t.Errorf("default corpus has %d tokens, want 20-100 KB", n)
	}
	for i, tok := range tokensOf(ds) {
		if tok >= 128 {
			t.Fatalf("default corpus byte %d at %d is not ASCII", tok, i)
		}
	}
	if _, err := DefaultDataset(100); err == nil || !strings.Contains(err.Error(), "default corpus: token id") {
		t.Errorf("DefaultDataset(100): %v, want a vocabulary error", err)
	}
}

func TestLoader(t *testing.T) {
	ids := make([]int32, 1000)
	for i := range ids {
		ids[i] = int32(i) // each token is its position
	}
	ds := FromTokens("counting", ids)
	const B, T = 4, 16
	a, err := NewLoader(ds, B, T, 7)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := NewLoader(ds, B, T, 7)
	c, _ := NewLoader(ds, B, T, 8)
	differ := false
	seenStart := map[int32]bool{}
	for range 500 {
		in, tg, _ := a.Batch()
		in2, tg2, _ := b.Batch()
		in3, _, _ := c.Batch()
		if fmt.Sprint(in, tg) != fmt.Sprint(in2, tg2) {
			t.Fatal("the same seed gave different batches")
		}
		differ = differ || fmt.Sprint(in) != fmt.Sprint(in3)
		for r := range B {
			row, trow := in[r*T:(r+1)*T], tg[r*T:(r+1)*T]
			seenStart[row[0]] = true
			for i := range T {
				// a window of consecutive tokens, targets one ahead
				if row[i] != row[0]+int32(i) || trow[i] != row[i]+1 {
					t.Fatalf("row %v targets %v: not a window with next-token targets", row, trow)
				}
			}
			if last := trow[T-1]; last >= int32(ds.Len()) {
				t.Fatalf("target %d beyond the data", last)
			}
		}
	}
	if !differ {
		t.Error("seeds 7 and 8 gave the same batches")
	}
	// 2000 draws over 984 possible starts: the first and the last start
	// (len-T-1) each appear with probability 1-(1-1/984)^2000 ≈ 0.87; the
	// test checks coverage of the range rather than both ends: at least 80%
	// of the starts appear (expected 87%).
	if len(seenStart) < 984*80/100 {
		t.Errorf("%d of 984 window starts drawn in 2000 rows, want at least 80%%", len(seenStart))
	}
	for s := range seenStart {
		if s < 0 || int(s) > int(ds.Len())-T-1 {
			t.Errorf("window start %d outside [0, %d]", s, int(ds.Len())-T-1)
		}
	}
	if err := a.Next(make([]int32, 3), make([]int32, B*T)); err == nil || !strings.Contains(err.Error(), "B·T = 64") {
		t.Errorf("Next with a short slice: %v", err)
	}
}

func TestLoaderErrors(t *testing.T) {
	ds := FromTokens("small.txt", make([]int32, 64))
	for _, tc := range []struct {
		B, T int
		want string
	}{
		{4, 16, "small.txt holds 64 tokens, shorter than one batch: batch 4 × sequence 16 needs at least 65"},
		{1, 64, "needs at least 65"},
		{0, 8, "batch 0"},
		{2, -1, "sequence length -1"},
	} {
		_, err := NewLoader(ds, tc.B, tc.T, 1)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewLoader(B=%d, T=%d): %v, want an error containing %q", tc.B, tc.T, err, tc.want)
		}
	}
	if _, err := NewLoader(ds, 3, 21, 1); err != nil {
		t.Errorf("63+1 tokens for a 3×21 batch: %v", err)
	}
}

// FuzzLoad: whatever a data file's bytes (a token file's header and body,
// or text), loading it never panics and never allocates more than a fixed
// bound (the file is read in chunks, never whole), and a dataset
// that loads gives whole batches of in-vocabulary tokens.
func FuzzLoad(f *testing.F) {
	good := tokenFile(f, []int32{50256, 464, 2068, 7586, 21831, 0, 65535, 1, 2, 3})
	f.Add(good, true)
	f.Add(good[:1030], true)
	f.Add(withHeader(good, 2, 1<<30), true)
	f.Add(withHeader(good, 2, -5), true)
	f.Add([]byte("some text to learn from, long enough for a batch"), false)
	dir := f.TempDir()
	const bound = 4 << 20 // Check's chunk: 2^18 tokens as bytes and as int32
	f.Fuzz(func(t *testing.T, b []byte, bin bool) {
		name := "f.txt"
		if bin {
			name = "f.bin"
		}
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		for _, vocab := range []int{256, 50257} {
			before := allocatedBytes()
			ds, err := Load(path, vocab)
			if alloc := allocatedBytes() - before; alloc > bound {
				t.Fatalf("a %d-byte file allocated %d bytes", len(b), alloc)
			}
			if err != nil {
				var ie *files.InputError
				if !errors.As(err, &ie) {
					t.Fatalf("%v is not an *files.InputError", err)
				}
				continue
			}
			if l, err := NewLoader(ds, 1, 2, 1); err == nil {
				in, tg, err := l.Batch()
				if err != nil {
					t.Fatal(err)
				}
				for _, x := range append(in, tg...) {
					if x < 0 || int(x) >= vocab {
						t.Fatalf("token %d outside the vocabulary of %d", x, vocab)
					}
				}
			}
			ds.Close()
		}
	})
}

// allocatedBytes is the bytes the heap has handed out since the process
// started (runtime/metrics, which needs no stop of the world).
func allocatedBytes() uint64 {
	m := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(m)
	return m[0].Value.Uint64()
}

// A data file that shrinks or changes during a run is an error naming it
// at the next batch, never a crash or an id beyond the vocabulary.
// loadedFile is a loader over a text file of "abcdefgh" repeated, against
// vocab, that has read one batch.
func loadedFile(t *testing.T, vocab int) (path string, l *Loader) {
	t.Helper()
	path = writeFile(t, "d.txt", bytes.Repeat([]byte("abcdefgh"), 1000))
	ds, err := Load(path, vocab)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ds.Close() })
	if l, err = NewLoader(ds, 4, 16, 1); err != nil {
		t.Fatal(err)
	}
	if _, _, err := l.Batch(); err != nil {
		t.Fatal(err)
	}
	return path, l
}

func TestFileChangedDuringRun(t *testing.T) {
	path, l := loadedFile(t, 200) // bytes up to 'h' (104): below 200
	if err := os.WriteFile(path, bytes.Repeat([]byte{250}, 8000), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := l.Batch(); err == nil || !strings.Contains(err.Error(), "changed while it was read") || !strings.Contains(err.Error(), path) {
		t.Errorf("a rewritten file: %v", err)
	}
	if err := os.Truncate(path, 10); err != nil {
		t.Fatal(err)
	}
	if _, _, err := l.Batch(); err == nil || !strings.Contains(err.Error(), "changed while it was read") || !strings.Contains(err.Error(), path) {
		t.Errorf("a shortened file: %v", err)
	}
}

// A text file rewritten in place with other valid bytes (same size, every
// byte a token of the vocabulary) is caught too, by its modification
// time: before, README's promise held only for ids past the vocabulary.
func TestFileRewrittenInPlace(t *testing.T) {
	path, l := loadedFile(t, 256)
	time.Sleep(10 * time.Millisecond) // a modification time of its own
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(bytes.Repeat([]byte("hgfedcba"), 1000), 0); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, _, err := l.Batch(); err == nil || !strings.Contains(err.Error(), "changed while it was read") || !strings.Contains(err.Error(), path) {
		t.Errorf("a file rewritten in place: %v", err)
	}
}
