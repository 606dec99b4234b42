package model

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	st "github.com/nlpodyssey/safetensors"
)

// llmcToSafetensors is another implementation of both formats, in Python's
// standard library alone: it reads an llm.c GPT-2 model file (llm.c's
// train_gpt2.c layout: a 256-int32 header, then wte (Vp, C), wpe,
// and each kind of block tensor across the layers) and writes the same
// weights as Hugging Face's GPT-2 model.safetensors names them, following
// the safetensors spec (an 8-byte little-endian header length, a JSON
// header of dtype, shape and data_offsets, then the data): Conv1D weights
// (in, out), so transposed; the padded vocabulary rows dropped; in F32, or
// in BF16 as the top half of each F32 (truncated).
const llmcToSafetensors = `
import json, struct, sys
src, dst, dtype = sys.argv[1], sys.argv[2], sys.argv[3]
data = open(src, 'rb').read()
hdr = struct.unpack('<256i', data[:1024])
assert hdr[0] == 20240326 and hdr[1] == 3
ctx, V, L, NH, C, Vp = hdr[2], hdr[3], hdr[4], hdr[5], hdr[6], hdr[7]
vals = struct.unpack('<%df' % ((len(data) - 1024) // 4), data[1024:])
pos = 0
def take(*shape):
    global pos
    n = 1
    for d in shape: n *= d
    out = vals[pos:pos + n]; pos += n
    return list(out)
def rows(flat, r, c): return [flat[i*c:(i+1)*c] for i in range(r)]
def t(m): return [list(x) for x in zip(*m)]
tensors = {}
def put(name, shape, flat): tensors[name] = (shape, flat)
wte = take(Vp, C); put('wte.weight', [V, C], wte[:V*C])
put('wpe.weight', [ctx, C], take(ctx, C))
kinds = [('ln_1.weight', [C], None), ('ln_1.bias', [C], None), ('attn.c_attn.weight', [3*C, C], 'T'), ('attn.c_attn.bias', [3*C], None),
         ('attn.c_proj.weight', [C, C], 'T'), ('attn.c_proj.bias', [C], None), ('ln_2.weight', [C], None), ('ln_2.bias', [C], None),
         ('mlp.c_fc.weight', [4*C, C], 'T'), ('mlp.c_fc.bias', [4*C], None), ('mlp.c_proj.weight', [C, 4*C], 'T'), ('mlp.c_proj.bias', [C], None)]
for name, shape, tr in kinds:
    for l in range(L):
        flat = take(*shape)
        if tr:
            m = t(rows(flat, shape[0], shape[1]))
            put('h.%d.%s' % (l, name), [shape[1], shape[0]], [x for r in m for x in r])
        else:
            put('h.%d.%s' % (l, name), shape, flat)
put('ln_f.weight', [C], take(C)); put('ln_f.bias', [C], take(C))
assert pos == len(vals)
header, blobs, off = {'__metadata__': {'format': 'pt'}}, [], 0
for name in sorted(tensors):
    shape, flat = tensors[name]
    raw = struct.pack('<%df' % len(flat), *flat)
    if dtype == 'BF16':
        raw = b''.join(raw[i+2:i+4] for i in range(0, len(raw), 4))
    header[name] = {'dtype': dtype, 'shape': shape, 'data_offsets': [off, off + len(raw)]}
    blobs.append(raw); off += len(raw)
h = json.dumps(header).encode()
h += b' ' * (-len(h) % 8)
open(dst, 'wb').write(struct.pack('<Q', len(h)) + h + b''.join(blobs))
`

// A GPT-2 safetensors file written by another implementation (Python,
// from the llm.c file of the same weights) loads as the llm.c file does:
// the same parameters bit for bit in F32, and in BF16 the F32 values
// truncated to their top half; so the same logits and loss, which the
// executor's test in train checks on one step.
func TestSafetensorsFromAnotherImplementation(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3 to write the file with")
	}
	cfg := Config{Name: "st", Layers: 2, Hidden: 16, Heads: 2, Vocab: 300, Context: 12}
	params := randomParams(cfg, 5)
	dir := t.TempDir()
	llmc := filepath.Join(dir, "m.bin")
	if err := SaveCheckpoint(llmc, cfg, params); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "convert.py")
	if err := os.WriteFile(script, []byte(llmcToSafetensors), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, dtype := range []string{"F32", "BF16"} {
		out := filepath.Join(dir, "model-"+dtype+".safetensors")
		if b, err := exec.Command(python, script, llmc, out, dtype).CombinedOutput(); err != nil {
			t.Fatalf("python: %v\n%s", err, b)
		}
		if ok, err := IsSafetensors(out); !ok || err != nil {
			t.Fatalf("%s is not recognised as safetensors (%v)", out, err)
		}
		if err := CheckCheckpoint(out, cfg); err != nil {
			t.Fatal(err)
		}
		got, err := LoadCheckpoint(out, cfg)
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range params {
			want := v
			if dtype == "BF16" {
				want = math.Float32frombits(math.Float32bits(v) &^ 0xffff)
			}
			if math.Float32bits(got[i]) != math.Float32bits(want) {
				t.Fatalf("%s: parameter %d is %v, want %v", dtype, i, got[i], want)
			}
		}
	}
	if ok, _ := IsSafetensors(llmc); ok {
		t.Error("an llm.c file is taken for safetensors")
	}
}

// LLaMA's layout, written by the safetensors library's own writer: q, k
// and v stack into attn.qkv (k and v of 2 key and value heads for 4 query
// heads, 8 rows each) and gate and up into mlp.fc, the untied head
// is lm_head; a file that lacks a tensor, has one of the wrong shape or
// one the model has no place for is refused before any tensor is read,
// naming it.
func TestSafetensorsLlama(t *testing.T) {
	cfg := Config{Name: "tiny-llama", Layers: 2, Hidden: 16, Heads: 4, KVHeads: 2, Vocab: 40, Context: 8, Untied: true,
		Norm: NormRMS, NoBias: true, MLP: MLPSwiGLU, FFN: 24, Positions: PosRoPE}
	params := randomParams(cfg, 9)
	views, row, put := llamaViews(t, cfg, params)
	dir := t.TempDir()
	file := func(name string, b []byte, err error) string { // b (made with err) written as dir/name
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	write := func(name string, views map[string]st.TensorView) string {
		b, err := st.Serialize(views, nil)
		return file(name, b, err)
	}
	got, err := LoadCheckpoint(write("model.safetensors", views), cfg)
	if err != nil {
		t.Fatal(err)
	}
	// A weight that is not finite (a NaN in F32; an F64 1e300, Inf as
	// fp32) is refused at load by its tensor and place.
	orig := views["model.norm.weight"]
	nan := slices.Clone(row("lnf.w"))
	nan[3] = float32(math.NaN())
	put("model.norm.weight", nan, 16)
	bad := maps.Clone(views)
	views["model.norm.weight"] = orig
	if _, err := LoadCheckpoint(write("nan.safetensors", bad), cfg); err == nil || !strings.Contains(err.Error(), "tensor model.norm.weight: element 3 is NaN") {
		t.Errorf("a NaN weight: %v", err)
	}
	var f64 bytes.Buffer
	vals := make([]float64, 16)
	vals[5] = 1e300
	binary.Write(&f64, binary.LittleEndian, vals)
	big, err := st.NewTensorView(st.F64, []uint64{16}, f64.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	bad = maps.Clone(views)
	bad["model.norm.weight"] = big
	if _, err := LoadCheckpoint(write("f64.safetensors", bad), cfg); err == nil || !strings.Contains(err.Error(), "element 5 is 1e+300, beyond fp32's") {
		t.Errorf("an F64 weight beyond fp32: %v", err)
	}
	for i := range params {
		if got[i] != params[i] {
			t.Fatalf("parameter %d is %v, want %v", i, got[i], params[i])
		}
	}
	// The same weights as a sharded model: the layers' tensors in one
	// shard, the rest in another, and the index transformers writes.
	index := func(name string, weightMap map[string]string) string {
		b, err := json.Marshal(map[string]any{"metadata": map[string]any{"total_size": 0}, "weight_map": weightMap})
		return file(name, b, err)
	}
	shards := [2]map[string]st.TensorView{{}, {}}
	weightMap := map[string]string{}
	for name, v := range views {
		i := 0
		if strings.HasPrefix(name, "model.layers.") {
			i = 1
		}
		shards[i][name] = v
		weightMap[name] = fmt.Sprintf("model-%05d-of-00002.safetensors", i+1)
	}
	write("model-00001-of-00002.safetensors", shards[0])
	write("model-00002-of-00002.safetensors", shards[1])
	idx := index("model.safetensors.index.json", weightMap)
	if ok, err := IsSafetensors(idx); !ok || err != nil {
		t.Fatalf("the index is not taken for safetensors: %v %v", ok, err)
	}
	if got, err = LoadCheckpoint(idx, cfg); err != nil {
		t.Fatal(err)
	}
	for i := range params {
		if got[i] != params[i] {
			t.Fatalf("sharded: parameter %d is %v, want %v", i, got[i], params[i])
		}
	}
	// A load of the index reads its shards too: the output checks keep them.
	beside := filepath.Dir(idx)
	wantFiles := []string{idx, filepath.Join(beside, "model-00001-of-00002.safetensors"), filepath.Join(beside, "model-00002-of-00002.safetensors")}
	if got := LoadFiles(idx); !slices.Equal(got, wantFiles) {
		t.Errorf("LoadFiles(index) = %v, want %v", got, wantFiles)
	}
	if got := LoadFiles(wantFiles[1]); !slices.Equal(got, wantFiles[1:2]) {
		t.Errorf("LoadFiles(a shard) = %v, want the shard alone", got)
	}
	moved := map[string]string{}
	for k, v := range weightMap {
		moved[k] = v
	}
	moved["lm_head.weight"] = "model-00002-of-00002.safetensors"
	outside := map[string]string{"lm_head.weight": "../model-00001-of-00002.safetensors"}
	for k, v := range weightMap {
		if k != "lm_head.weight" {
			outside[k] = v
		}
	}
	// Malformed indexes and files are described as what they meant to be,
	// not as llm.c checkpoints ("magic 527849": a header length read as a
	// magic number).
	good, _ := os.ReadFile(write("good.safetensors", views))
	long := bytes.Clone(good)
	binary.LittleEndian.PutUint64(long, uint64(len(good))) // a header past the file's end
	for _, tc := range []struct{ name, want string }{
		{file("broken.index.json", []byte(`{"weight_map": {"a": `), nil), "not a safetensors index (valid: model.safetensors.index.json's object with a weight_map)"},
		{file("typed.index.json", []byte(`{"weight_map": {"a": 7}}`), nil), "weight_map: a JSON number (valid: an object of tensor names to shard file names)"},
		{file("nomap.index.json", []byte(`{"metadata": {}}`), nil), "a JSON object with no weight_map"},
		{file("long.safetensors", long, nil), fmt.Sprintf("a safetensors file whose header claims %d bytes in a file of %d", len(good), len(good))},
		{file("neg.safetensors", rawSafetensors(`{"w": {"dtype": "F32", "shape": [2], "data_offsets": [-1, 8]}}`), nil), "tensor w: data_offsets holds a JSON number -1 (valid: [begin, end], byte offsets from 0"},
		{file("shape.safetensors", rawSafetensors(`{"w": {"dtype": "F32", "shape": "2", "data_offsets": [0, 8]}}`), nil), "tensor w: shape holds a JSON string (valid: a list of dimensions"},
		{file("q8.safetensors", rawSafetensors(`{"w": {"dtype": "Q8", "shape": [2], "data_offsets": [0, 8]}}`), nil), `tensor w: dtype "Q8" is no safetensors dtype`},
		{file("nodtype.safetensors", rawSafetensors(`{"w": {"shape": [2], "data_offsets": [0, 8]}}`), nil), "tensor w has no dtype"},
		{file("back.safetensors", rawSafetensors(`{"w": {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}}`), nil), "data_offsets [8, 0] end before they begin"},
		{file("syntax.safetensors", rawSafetensors(`{"w": {"dtype": "F32",, }`), nil), "not a safetensors header"},
		{index("moved.index.json", moved), "shard model-00001-of-00002.safetensors holds tensor lm_head.weight, which the index puts in model-00002-of-00002.safetensors"},
		{index("outside.index.json", outside), `tensor lm_head.weight is in "../model-00001-of-00002.safetensors" (valid: the name of a file beside the index)`},
	} {
		if err := CheckCheckpoint(tc.name, cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", filepath.Base(tc.name), err, tc.want)
		}
	}
	without := func(name string) map[string]st.TensorView {
		m := map[string]st.TensorView{}
		for k, v := range views {
			if k != name {
				m[k] = v
			}
		}
		return m
	}
	extra := without("")
	extra["model.layers.2.input_layernorm.weight"] = views["model.norm.weight"]
	wrong := without("model.layers.1.mlp.up_proj.weight")
	wrong["model.layers.1.mlp.up_proj.weight"] = views["model.layers.1.self_attn.q_proj.weight"]
	mha := without("model.layers.0.self_attn.k_proj.weight") // a multi-head model's keys for grouped heads
	mha["model.layers.0.self_attn.k_proj.weight"] = views["model.layers.0.self_attn.q_proj.weight"]
	for _, tc := range []struct {
		name  string
		views map[string]st.TensorView
		want  string
	}{
		{"kv heads", mha, "make 40 rows of trainmem's h0.attn.qkv.w, which has 32"},
		{"missing", without("model.layers.1.self_attn.k_proj.weight"), "no tensor model.layers.1.self_attn.k_proj.weight (trainmem's h1.attn.qkv.w)"},
		{"extra", extra, "1 tensors tiny-llama has no place for, the first model.layers.2.input_layernorm.weight"},
		{"shape", wrong, "make 40 rows of trainmem's h1.mlp.fc.w, which has 48"},
	} {
		if err := CheckCheckpoint(write(tc.name+".safetensors", tc.views), cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	gpt2 := cfg
	gpt2.Norm = NormLayer
	if err := CheckCheckpoint(filepath.Join(dir, "model.safetensors"), gpt2); err == nil || !strings.Contains(err.Error(), "neither GPT-2 nor LLaMA") {
		t.Errorf("a layer-norm model without biases: %v", err)
	}
}

// llamaViews are a LLaMA model's weights as transformers names them, in
// F32, from params in trainmem's table; row reads a row of params, put
// sets a view.
func llamaViews(t *testing.T, cfg Config, params []float32) (views map[string]st.TensorView, row func(string) []float32, put func(string, []float32, ...uint64)) {
	t.Helper()
	row = func(name string) []float32 {
		p, ok := cfg.ParamByName(name)
		if !ok {
			t.Fatalf("no row %s", name)
		}
		return params[p.Offset : p.Offset+p.Count]
	}
	views = map[string]st.TensorView{}
	put = func(name string, vals []float32, shape ...uint64) {
		var b bytes.Buffer
		if err := binary.Write(&b, binary.LittleEndian, vals); err != nil {
			t.Fatal(err)
		}
		v, err := st.NewTensorView(st.F32, shape, b.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		views[name] = v
	}
	h, F, kv, V := cfg.Hidden, cfg.FFNWidth(), cfg.KV()*cfg.HeadDim(), uint64(cfg.Vocab)
	H := uint64(h)
	put("model.embed_tokens.weight", row("wte"), V, H)
	for l := range cfg.Layers {
		p, m := fmt.Sprintf("h%d.", l), fmt.Sprintf("model.layers.%d.", l)
		qkv, fc := row(p+"attn.qkv.w"), row(p+"mlp.fc.w")
		put(m+"input_layernorm.weight", row(p+"ln1.w"), H)
		put(m+"self_attn.q_proj.weight", qkv[:h*h], H, H)
		put(m+"self_attn.k_proj.weight", qkv[h*h:h*h+kv*h], uint64(kv), H)
		put(m+"self_attn.v_proj.weight", qkv[h*h+kv*h:], uint64(kv), H)
		put(m+"self_attn.o_proj.weight", row(p+"attn.proj.w"), H, H)
		put(m+"post_attention_layernorm.weight", row(p+"ln2.w"), H)
		put(m+"mlp.gate_proj.weight", fc[:F*h], uint64(F), H)
		put(m+"mlp.up_proj.weight", fc[F*h:], uint64(F), H)
		put(m+"mlp.down_proj.weight", row(p+"mlp.proj.w"), H, uint64(F))
	}
	put("model.norm.weight", row("lnf.w"), H)
	put("lm_head.weight", row("lm_head.w"), V, H)
	return views, row, put
}

// A safetensors file is read a tensor at a time beside the parameters,
// not whole (a 7 GB shard ran the process out of memory): loading 32
// layers of a small LLaMA allocates no more than the parameters, four
// times its largest tensor and 2 MiB, where the file alone is more than
// that slack.
func TestSafetensorsStreams(t *testing.T) {
	cfg := Config{Name: "deep", Layers: 32, Hidden: 64, Heads: 4, KVHeads: 4, Vocab: 128, Context: 8, Untied: true,
		Norm: NormRMS, NoBias: true, MLP: MLPSwiGLU, FFN: 160, Positions: PosRoPE}
	params := randomParams(cfg, 3)
	views, _, _ := llamaViews(t, cfg, params)
	b, err := st.Serialize(views, nil)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "model.safetensors")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	var largest int64
	for _, p := range cfg.Params() {
		largest = max(largest, p.Count)
	}
	slack := 4*4*largest + 2<<20
	if int64(len(b)) <= slack {
		t.Fatalf("the file (%d bytes) is within the slack (%d): the test would not tell", len(b), slack)
	}
	before := allocatedBytes()
	got, err := LoadCheckpoint(path, cfg)
	alloc := int64(allocatedBytes() - before)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, params) {
		t.Error("the weights differ")
	}
	if limit := 4*cfg.NumParams() + slack; alloc > limit {
		t.Errorf("loading a %d-byte file allocated %d bytes, more than the parameters' %d and %d of slack", len(b), alloc, 4*cfg.NumParams(), slack)
	}
	t.Logf("a %d-byte file: %d bytes allocated (the parameters %d)", len(b), alloc, 4*cfg.NumParams())
}

// rawSafetensors is a safetensors file of the JSON header h (padded to 8
// bytes, as the format writes it) and 8 bytes of data.
func rawSafetensors(h string) []byte {
	h += strings.Repeat(" ", (8-len(h)%8)%8)
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(h)))
	return append(append(b, h...), make([]byte, 8)...)
}
