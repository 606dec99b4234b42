package model

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime/metrics"
	"slices"
	"strings"
	"testing"
)

// ckptConfig has a vocabulary that is not a multiple of 128 (300 → 384), so
// that padding is exercised, and 3 layers, so that a mix-up of llm.c's
// per-kind order with trainmem's per-block order shows.
var ckptConfig = Config{Name: "ckpt-test", Layers: 3, Hidden: 16, Heads: 2, Vocab: 300, Context: 12}

func randomParams(cfg Config, seed uint64) []float32 {
	rng := rand.New(rand.NewPCG(seed, 1))
	p := make([]float32, cfg.NumParams())
	for i := range p {
		p[i] = float32(rng.NormFloat64())
	}
	return p
}

// llmcFile writes an llm.c model file from first principles (the layout in
// llm.c's train_gpt2.c: param_sizes in order wte, wpe, ln1w, ln1b, qkvw,
// qkvb, attprojw, attprojb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb, lnfw,
// lnfb), independently of checkpoint.go, with header values hdr[0..7] and
// padded rows filled with pad.
func llmcFile(cfg Config, params []float32, hdr [8]int32, pad float32) []byte {
	var b bytes.Buffer
	header := make([]int32, 256)
	copy(header, hdr[:])
	binary.Write(&b, binary.LittleEndian, header)
	get := func(name string) []float32 {
		p, _ := cfg.ParamByName(name)
		return params[p.Offset : p.Offset+p.Count]
	}
	put := func(v []float32) { binary.Write(&b, binary.LittleEndian, v) }
	put(get("wte"))
	vp := int(hdr[7])
	if hdr[1] == 1 {
		vp = cfg.Vocab
	}
	for range (vp - cfg.Vocab) * cfg.Hidden {
		put([]float32{pad})
	}
	put(get("wpe"))
	for _, kind := range []string{"ln1.w", "ln1.b", "attn.qkv.w", "attn.qkv.b", "attn.proj.w", "attn.proj.b",
		"ln2.w", "ln2.b", "mlp.fc.w", "mlp.fc.b", "mlp.proj.w", "mlp.proj.b"} {
		for l := range cfg.Layers {
			put(get(fmt.Sprintf("h%d.%s", l, kind)))
		}
	}
	put(get("lnf.w"))
	put(get("lnf.b"))
	return b.Bytes()
}

// withValue is params with element i of the row name set to v.
func withValue(cfg Config, params []float32, name string, i int64, v float32) []float32 {
	p, ok := cfg.ParamByName(name)
	if !ok {
		panic("no row " + name)
	}
	out := slices.Clone(params)
	out[p.Offset+i] = v
	return out
}

func header(cfg Config, version, vp int32) [8]int32 {
	return [8]int32{CheckpointMagic, version, int32(cfg.Context), int32(cfg.Vocab), int32(cfg.Layers), int32(cfg.Heads), int32(cfg.Hidden), vp}
}

func equalBits(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

func TestCheckpointRoundTrip(t *testing.T) {
	for _, cfg := range []Config{ckptConfig, mustPreset(t, "tiny")} {
		t.Run(cfg.Name, func(t *testing.T) {
			params := randomParams(cfg, 3)
			path := filepath.Join(t.TempDir(), "model.bin")
			if err := SaveCheckpoint(path, cfg, params); err != nil {
				t.Fatal(err)
			}
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			// The bytes are exactly those of an llm.c version 3 file
			// written independently, padded rows zero.
			want := llmcFile(cfg, params, header(cfg, 3, int32(PaddedVocab(cfg.Vocab))), 0)
			if !bytes.Equal(data, want) {
				t.Fatalf("file differs from llm.c's layout (%d bytes, want %d)", len(data), len(want))
			}
			got, err := LoadCheckpoint(path, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if !equalBits(got, params) {
				t.Fatal("parameters changed in the round trip")
			}
			hc, err := CheckpointConfig(path)
			if err != nil {
				t.Fatal(err)
			}
			want2 := cfg
			want2.Name = "checkpoint"
			if hc != want2 {
				t.Errorf("CheckpointConfig %+v, want %+v", hc, want2)
			}
			matches, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".*tmp*"))
			if len(matches) > 0 {
				t.Errorf("temporary files left behind: %v", matches)
			}
		})
	}
	if got := PaddedVocab(50257); got != 50304 {
		t.Errorf("PaddedVocab(50257) = %d, want 50304 (llm.c's gpt2_124M.bin)", got)
	}
}

// TestCheckpointReadsLLMC reads files laid out as llm.c writes them: version
// 3 with padded rows holding garbage (dropped), and version 1 (unpadded).
func TestCheckpointReadsLLMC(t *testing.T) {
	cfg := ckptConfig
	params := randomParams(cfg, 4)
	for _, tc := range []struct {
		name string
		file []byte
	}{
		{"version 3", llmcFile(cfg, params, header(cfg, 3, 384), 7.5)},
		{"version 3, larger padding", llmcFile(cfg, params, header(cfg, 3, 512), -1)},
		{"version 1", llmcFile(cfg, params, header(cfg, 1, 0), 0)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ReadCheckpoint(bytes.NewReader(tc.file), int64(len(tc.file)), cfg)
			if err != nil {
				t.Fatal(err)
			}
			if !equalBits(got, params) {
				t.Fatal("parameters differ")
			}
		})
	}
}

func TestCheckpointErrors(t *testing.T) {
	cfg := ckptConfig
	params := randomParams(cfg, 5)
	good := llmcFile(cfg, params, header(cfg, 3, 384), 0)
	withHeader := func(i int, v int32) []byte {
		b := bytes.Clone(good)
		binary.LittleEndian.PutUint32(b[4*i:], uint32(v))
		return b
	}
	other := cfg
	other.Layers, other.Heads = 2, 4
	untied := cfg
	untied.Untied = true
	rms, noBias, swiglu := cfg, cfg, cfg
	rms.Norm, noBias.NoBias, swiglu.MLP = NormRMS, true, MLPSwiGLU
	for _, tc := range []struct {
		name string
		file []byte
		cfg  Config
		want []string
	}{
		{"empty", nil, cfg, []string{"truncated: 0 bytes, expected at least the 1024-byte header"}},
		{"short header", good[:100], cfg, []string{"truncated: 100 bytes"}},
		{"wrong magic", withHeader(0, 12345), cfg, []string{"neither an llm.c GPT-2 checkpoint (its first int32 12345, where llm.c's magic is 20240326)", "nor a safetensors index"}},
		{"token file", withHeader(0, TokenFileMagic), cfg, []string{"magic 20240520 is llm.c's token file magic (expected 20240326)", "data file"}},
		{"version 2", withHeader(1, 2), cfg, []string{"unsupported checkpoint version 2", "valid: 3", "1"}},
		{"version 5", withHeader(1, 5), cfg, []string{"unsupported checkpoint version 5"}},
		{"truncated params", good[:len(good)-10], cfg, []string{fmt.Sprintf("truncated: %d bytes, expected %d", len(good)-10, len(good))}},
		{"truncated after header", good[:1024], cfg, []string{fmt.Sprintf("truncated: 1024 bytes, expected %d", len(good))}},
		{"trailing bytes", append(bytes.Clone(good), 1, 2, 3), cfg, []string{fmt.Sprintf("has %d bytes, expected %d", len(good)+3, len(good)), "3 trailing bytes"}},
		{"other shape", good, other, []string{"layers 3, config has 2", "heads 2, config has 4"}},
		{"other context", withHeader(2, 13), cfg, []string{"max seq len (context) 13, config has 12"}},
		{"padded below vocab", withHeader(7, 299), cfg, []string{"padded vocabulary 299 smaller than vocabulary 300"}},
		{"invalid heads", withHeader(5, 3), cfg, []string{"invalid shape", "heads 3 does not divide hidden 16"}},
		{"untied", good, untied, []string{"untied head", "cannot hold"}},
		{"rmsnorm", good, rms, []string{"rmsnorm norms", "cannot hold"}},
		{"no bias", good, noBias, []string{"has no linear biases, which", "cannot hold"}},
		{"swiglu", good, swiglu, []string{"has a swiglu MLP of 256, which", "cannot hold"}},
		// A NaN or infinite weight was accepted and blamed on --lr at the
		// first step: refused at load, by its tensor and place.
		{"NaN weight", llmcFile(cfg, withValue(cfg, params, "h1.attn.proj.w", 7, float32(math.NaN())), header(cfg, 3, 384), 0), cfg, []string{"parameter h1.attn.proj.w: element 7 is NaN", "valid: finite weights"}},
		{"infinite weight", llmcFile(cfg, withValue(cfg, params, "wte", 0, float32(math.Inf(-1))), header(cfg, 3, 384), 0), cfg, []string{"parameter wte: element 0 is -Inf"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadCheckpoint(bytes.NewReader(tc.file), int64(len(tc.file)), tc.cfg)
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
	// Loading a missing file names it.
	missing := filepath.Join(t.TempDir(), "nope.bin")
	if _, err := LoadCheckpoint(missing, cfg); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("LoadCheckpoint of a missing file: %v, want an error naming it", err)
	}
	// Writing an untied model or the wrong number of values fails before
	// anything is created.
	dir := t.TempDir()
	for _, tc := range []struct {
		cfg    Config
		params []float32
		want   string
	}{
		{untied, randomParams(untied, 1), "untied head"},
		{rms, randomParams(rms, 1), "rmsnorm norms"},
		{cfg, params[:10], fmt.Sprintf("10 parameters, want %d", cfg.NumParams())},
	} {
		err := SaveCheckpoint(filepath.Join(dir, "x.bin"), tc.cfg, tc.params)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("SaveCheckpoint: %v, want an error containing %q", err, tc.want)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("failed saves left %d files", len(entries))
	}
}

// llmcLayout's offsets, computed from the shape, against the parameter
// table: every tensor once, in llm.c's order (each kind across the
// layers), at its table offset, plus the padding rows.
func TestLLMCLayoutAgainstTable(t *testing.T) {
	for _, cfg := range []Config{ckptConfig, {Name: "x", Layers: 1, Hidden: 8, Heads: 2, Vocab: 5, Context: 3}} {
		at := map[string]Param{}
		for _, p := range cfg.Params() {
			at[p.Name] = p
		}
		var want []segment
		seg := func(name string) { p := at[name]; want = append(want, segment{p.Offset, p.Count}) }
		vp := PaddedVocab(cfg.Vocab)
		seg("wte")
		want = append(want, segment{-1, int64(vp-cfg.Vocab) * int64(cfg.Hidden)})
		seg("wpe")
		for _, k := range blockKinds {
			for l := range cfg.Layers {
				seg(fmt.Sprintf("h%d.%s", l, k.name))
			}
		}
		seg("lnf.w")
		seg("lnf.b")
		var got []segment
		llmcLayout(cfg, vp, func(s segment) error { got = append(got, s); return nil })
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s:\n got  %v\n want %v", cfg.Name, got, want)
		}
	}
}

// FuzzReadCheckpoint: whatever a file's bytes (header and body), reading it
// never panics and never allocates more than the file's size plus a fixed
// bound (the 1 MiB read buffer and small change): the header is checked
// against the size before the parameters are allocated. A file that reads
// has exactly its shape's parameters.
func FuzzReadCheckpoint(f *testing.F) {
	cfg := Config{Name: "small", Layers: 1, Hidden: 4, Heads: 2, Vocab: 5, Context: 3}
	good := llmcFile(cfg, randomParams(cfg, 1), header(cfg, 3, 128), 0)
	f.Add(good)
	f.Add(good[:2000])
	f.Add(good[:1024])
	f.Add(bytes.Repeat([]byte{0xff}, 1024))
	for _, h := range [][8]int32{
		{CheckpointMagic, 3, 1 << 24, 1 << 24, 16384, 1, 1 << 20, 1 << 24},
		{CheckpointMagic, 3, 1024, 50257, 12, 12, 768, 50304},
		{CheckpointMagic, 1, 64, 1<<31 - 1, 2, 4, 64, 0},
		{CheckpointMagic, 3, 4, 4, 16384, 1, 1, 4},
	} {
		b := make([]byte, 1024+64)
		for i, v := range h {
			binary.LittleEndian.PutUint32(b[4*i:], uint32(v))
		}
		f.Add(b)
	}
	const bound = 2 << 20
	f.Fuzz(func(t *testing.T, b []byte) {
		before := allocatedBytes()
		c := cfg
		if h, err := ReadCheckpointHeader(bytes.NewReader(b)); err == nil {
			c = h.Config()
		}
		params, err := ReadCheckpoint(bytes.NewReader(b), int64(len(b)), c)
		if alloc := allocatedBytes() - before; alloc > uint64(len(b))+bound {
			t.Fatalf("a %d-byte file allocated %d bytes (err %v)", len(b), alloc, err)
		}
		if err == nil && int64(len(params)) != c.NumParams() {
			t.Fatalf("%d parameters, the shape has %d", len(params), c.NumParams())
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
