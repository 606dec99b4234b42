package model

// Weights in the safetensors format (Hugging Face's model.safetensors),
// read with github.com/nlpodyssey/safetensors, for the GPT-2 and LLaMA
// layouts of transformers' GPT2LMHeadModel and LlamaForCausalLM: each row
// of trainmem's parameter table is made of the file's tensors of the same
// model (GPT-2's Conv1D weights transposed, LLaMA's q, k and v projections
// stacked into attn.qkv and its gate and up projections into mlp.fc), read
// in their stored dtype (F32, F16, BF16 or F64) and held as fp32. The
// config comes from the model's config.json (--hf-config): a safetensors
// file holds tensors, not a model's shape. A sharded model is read from
// its index (model.safetensors.index.json), one shard at a time.

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"sort"
	"strings"

	st "github.com/nlpodyssey/safetensors"

	"trainmem/cuda"
	"trainmem/model/files"
)

// safetensorsHeaderMax is the largest header read: the format's own limit.
const safetensorsHeaderMax = 100_000_000

// hfPart is one tensor of a Hugging Face file that makes (a part of) one
// row of the table, in the row's order: its name, and whether it is stored
// transposed (GPT-2's Conv1D weights are (in, out)).
type hfPart struct {
	name      string
	transpose bool
}

// hfLayout is the file's tensors of each row of cfg's table, and the
// prefixes a file may put before every name (transformers' base models
// save GPT-2's without "transformer.").
func hfLayout(cfg Config) (map[string][]hfPart, []string, error) {
	rows := map[string][]hfPart{}
	one := func(row, name string, t bool) { rows[row] = []hfPart{{name, t}} }
	switch {
	case cfg.Norm == NormLayer && !cfg.NoBias && cfg.MLP == MLPGELU && cfg.Positions == PosLearned: // GPT-2's tensors, at any width and ε
		one("wte", "wte.weight", false)
		one("wpe", "wpe.weight", false)
		for l := range cfg.Layers {
			p, h := fmt.Sprintf("h%d.", l), fmt.Sprintf("h.%d.", l)
			for _, t := range gpt2BlockTensors {
				one(p+t.ours, h+t.theirs, strings.HasSuffix(t.ours, ".w") && t.ours[:2] != "ln") // Conv1D weights are (in, out)
			}
		}
		one("lnf.w", "ln_f.weight", false)
		one("lnf.b", "ln_f.bias", false)
		one("lm_head.w", "lm_head.weight", false)
		return rows, []string{"", "transformer."}, nil
	case cfg.Norm == NormRMS && cfg.NoBias && cfg.MLP == MLPSwiGLU && cfg.Positions == PosRoPE:
		one("wte", "model.embed_tokens.weight", false)
		for l := range cfg.Layers {
			p, h := fmt.Sprintf("h%d.", l), fmt.Sprintf("model.layers.%d.", l)
			one(p+"ln1.w", h+"input_layernorm.weight", false)
			rows[p+"attn.qkv.w"] = []hfPart{{h + "self_attn.q_proj.weight", false}, {h + "self_attn.k_proj.weight", false}, {h + "self_attn.v_proj.weight", false}}
			one(p+"attn.proj.w", h+"self_attn.o_proj.weight", false)
			one(p+"ln2.w", h+"post_attention_layernorm.weight", false)
			rows[p+"mlp.fc.w"] = []hfPart{{h + "mlp.gate_proj.weight", false}, {h + "mlp.up_proj.weight", false}}
			one(p+"mlp.proj.w", h+"mlp.down_proj.weight", false)
		}
		one("lnf.w", "model.norm.weight", false)
		one("lm_head.w", "lm_head.weight", false)
		return rows, []string{""}, nil
	}
	return nil, nil, fmt.Errorf("model: %s is neither GPT-2 nor LLaMA as transformers lays them out, so no safetensors file holds its weights", cfg)
}

// gpt2BlockTensors are a GPT-2 block's rows and transformers' names of
// them.
var gpt2BlockTensors = []struct{ ours, theirs string }{
	{"ln1.w", "ln_1.weight"}, {"ln1.b", "ln_1.bias"}, {"attn.qkv.w", "attn.c_attn.weight"}, {"attn.qkv.b", "attn.c_attn.bias"},
	{"attn.proj.w", "attn.c_proj.weight"}, {"attn.proj.b", "attn.c_proj.bias"}, {"ln2.w", "ln_2.weight"}, {"ln2.b", "ln_2.bias"},
	{"mlp.fc.w", "mlp.c_fc.weight"}, {"mlp.fc.b", "mlp.c_fc.bias"}, {"mlp.proj.w", "mlp.c_proj.weight"}, {"mlp.proj.b", "mlp.c_proj.bias"},
}

// hfBuffer says whether name is a tensor a file may hold that is no
// parameter (GPT-2's causal masks, LLaMA's rotary frequencies in older
// files).
func hfBuffer(name string) bool {
	return strings.HasSuffix(name, ".attn.bias") && !strings.Contains(name, "c_attn") ||
		strings.HasSuffix(name, ".attn.masked_bias") || strings.HasSuffix(name, "rotary_emb.inv_freq")
}

// IsSafetensors reports whether the file at path starts as a safetensors
// file does (an 8-byte little-endian header length, then a JSON object) or
// is a sharded model's index (model.safetensors.index.json: a JSON object
// with a weight_map).
func IsSafetensors(path string) (bool, error) {
	if _, ok, err := readSafetensorsIndex(path); err != nil || ok {
		return ok, err
	}
	f, size, err := files.OpenInput("--load", path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	var head [9]byte
	if size < int64(len(head)) {
		return false, nil
	}
	if _, err := io.ReadFull(f, head[:]); err != nil {
		return false, fmt.Errorf("--load %s: %w", path, err)
	}
	if head[8] != '{' {
		return false, nil // no JSON header: an llm.c file, or neither (its reader says so)
	}
	// A JSON object after 8 bytes is a safetensors file by intent: a
	// header length it cannot have is its error, not an llm.c magic.
	n := binary.LittleEndian.Uint64(head[:8])
	if n < 2 || n > safetensorsHeaderMax || n+8 > uint64(size) {
		return false, files.BadInput(path, fmt.Errorf("model: %s: a safetensors file whose header claims %d bytes in a file of %d (valid: a JSON header of 2 to %d bytes within the file)", path, n, size, safetensorsHeaderMax))
	}
	return true, nil
}

// safetensorsPlan is where every row of the table comes from in a file:
// its tensors, by their names in the file (the prefix found), checked
// against cfg.
type safetensorsPlan struct {
	table []Param
	parts [][]hfPart
	at    [][]int64 // each part's first element in its row
}

// readSafetensorsHeader reads the header of a safetensors file of size
// bytes: its tensors, each inside the file, which ends with the last, and
// where their data begins (8 + the header's length).
func readSafetensorsHeader(r io.Reader, size int64) (map[string]*st.TensorInfo, int64, error) {
	var lenBuf [8]byte
	if _, err := io.ReadFull(r, lenBuf[:]); err != nil {
		return nil, 0, fmt.Errorf("model: safetensors header truncated: %v", err)
	}
	n := binary.LittleEndian.Uint64(lenBuf[:])
	if n > safetensorsHeaderMax || n+8 > uint64(size) {
		return nil, 0, fmt.Errorf("model: safetensors header of %d bytes in a file of %d", n, size)
	}
	header := make([]byte, n)
	if _, err := io.ReadFull(r, header); err != nil {
		return nil, 0, fmt.Errorf("model: safetensors header truncated: %v", err)
	}
	infos, err := parseSafetensorsHeader(header)
	if err != nil {
		return nil, 0, err
	}
	var end uint64
	for _, ti := range infos {
		end = max(end, ti.DataOffsets[1])
	}
	if want := 8 + n + end; want != uint64(size) {
		return nil, 0, fmt.Errorf("model: safetensors file has %d bytes, its header declares %d", size, want)
	}
	return infos, int64(8 + n), nil
}

// parseSafetensorsHeader reads a safetensors header's JSON: each tensor's
// dtype, shape and data offsets (and __metadata__, passed over), every
// fault in the format's own words, naming the tensor, the field and the
// value (the format library's decoder said json.Number and
// strconv.ParseUint).
func parseSafetensorsHeader(header []byte) (map[string]*st.TensorInfo, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(header, &raw); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			err = fmt.Errorf("%v at byte %d of the header", se, se.Offset+8)
		}
		return nil, fmt.Errorf("model: not a safetensors header (valid: a JSON object of tensors, each with dtype, shape and data_offsets): %v", err)
	}
	valid := map[string]string{"dtype": "a dtype name such as F32, F16, BF16", "shape": "a list of dimensions, whole numbers from 0",
		"data_offsets": "[begin, end], byte offsets from 0 into the data"}
	infos := make(map[string]*st.TensorInfo, len(raw))
	for name, v := range raw {
		if name == "__metadata__" {
			continue
		}
		var e struct {
			DType       *string    `json:"dtype"`
			Shape       *[]uint64  `json:"shape"`
			DataOffsets *[2]uint64 `json:"data_offsets"`
		}
		if err := json.Unmarshal(v, &e); err != nil {
			var te *json.UnmarshalTypeError
			if errors.As(err, &te) && te.Field != "" {
				field := strings.SplitN(te.Field, ".", 2)[0]
				return nil, fmt.Errorf("model: tensor %s: %s holds a JSON %s (valid: %s)", name, field, te.Value, valid[field])
			}
			return nil, fmt.Errorf("model: tensor %s: not a tensor's entry (valid: an object with %s): %v", name, "dtype, shape and data_offsets", err)
		}
		for _, f := range []struct {
			name    string
			missing bool
		}{{"dtype", e.DType == nil}, {"shape", e.Shape == nil}, {"data_offsets", e.DataOffsets == nil}} {
			if f.missing {
				return nil, fmt.Errorf("model: tensor %s has no %s (valid: %s)", name, f.name, valid[f.name])
			}
		}
		dt, err := st.ParseDType(*e.DType)
		if err != nil {
			return nil, fmt.Errorf("model: tensor %s: dtype %q is no safetensors dtype (valid: %s)", name, *e.DType, valid["dtype"])
		}
		if o := *e.DataOffsets; o[1] < o[0] {
			return nil, fmt.Errorf("model: tensor %s: data_offsets [%d, %d] end before they begin (valid: %s)", name, o[0], o[1], valid["data_offsets"])
		}
		infos[name] = &st.TensorInfo{DType: dt, Shape: *e.Shape, DataOffsets: *e.DataOffsets}
	}
	return infos, nil
}

// planTensors checks a file's (or a sharded model's) tensors against cfg:
// every row's tensors present, with the row's shape, a float dtype, inside
// the file, and no tensor the model does not have (a config and weights of
// two different models).
func planTensors(infos map[string]*st.TensorInfo, cfg Config) (safetensorsPlan, error) {
	rows, prefixes, err := hfLayout(cfg)
	if err != nil {
		return safetensorsPlan{}, err
	}
	find := func(name string) (string, *st.TensorInfo) {
		for _, p := range prefixes {
			if ti, ok := infos[p+name]; ok {
				return p + name, ti
			}
		}
		return name, nil
	}
	plan := safetensorsPlan{table: cfg.Params()}
	used := map[string]bool{}
	for _, p := range plan.table {
		var found []hfPart
		var names []string
		var rowsOf int64
		var at []int64
		var elemsOf int64
		for _, part := range rows[p.Name] {
			name, ti := find(part.name)
			if ti == nil {
				return safetensorsPlan{}, fmt.Errorf("model: no tensor %s (trainmem's %s) in the file", part.name, p.Name)
			}
			switch ti.DType {
			case st.F32, st.F16, st.BF16, st.F64:
			default:
				return safetensorsPlan{}, fmt.Errorf("model: tensor %s is %v (valid: F32, F16, BF16, F64)", name, ti.DType)
			}
			elems := uint64(1)
			for _, d := range ti.Shape {
				if d != 0 && elems > MaxTensorElements/d {
					return safetensorsPlan{}, fmt.Errorf("model: tensor %s has shape %v: more than %d elements (valid: a shape of trainmem's %s, %v)", name, ti.Shape, int64(MaxTensorElements), p.Name, p.Shape)
				}
				elems *= d
			}
			if o := ti.DataOffsets; o[1] < o[0] || o[1]-o[0] != elems*ti.DType.Size() {
				return safetensorsPlan{}, fmt.Errorf("model: tensor %s of shape %v and %v has data offsets %v, which hold %d bytes, not its %d", name, ti.Shape, ti.DType, o, int64(o[1])-int64(o[0]), elems*ti.DType.Size())
			}
			shape := append([]uint64(nil), ti.Shape...)
			if part.transpose && len(shape) == 2 {
				shape[0], shape[1] = shape[1], shape[0]
			}
			// A part is a block of the row's leading dimension.
			if len(shape) != len(p.Shape) || (len(shape) == 2 && shape[1] != uint64(p.Shape[1])) {
				return safetensorsPlan{}, fmt.Errorf("model: tensor %s has shape %v, which makes no part of trainmem's %s %v", name, ti.Shape, p.Name, p.Shape)
			}
			rowsOf += int64(shape[0])
			at = append(at, elemsOf)
			elemsOf += int64(elems)
			found, names = append(found, hfPart{name, part.transpose}), append(names, name)
			used[name] = true
		}
		if rowsOf != int64(p.Shape[0]) {
			return safetensorsPlan{}, fmt.Errorf("model: the file's %s make %d rows of trainmem's %s, which has %d", strings.Join(names, ", "), rowsOf, p.Name, p.Shape[0])
		}
		plan.parts, plan.at = append(plan.parts, found), append(plan.at, at)
	}
	var extra []string
	for name := range infos {
		if !used[name] && !hfBuffer(name) {
			extra = append(extra, name)
		}
	}
	if len(extra) > 0 {
		sort.Strings(extra)
		return safetensorsPlan{}, fmt.Errorf("model: the file holds %d tensors %s has no place for, the first %s (the config and the weights of two models?)", len(extra), cfg.Name, extra[0])
	}
	return plan, nil
}

// safetensorsIndexMax is the largest index read (transformers' indexes of
// the largest models are a few MB).
const safetensorsIndexMax = 64 << 20

// safetensorsIndex is a sharded model's index, model.safetensors.index.json
// as transformers' save_pretrained writes it: the file of each tensor.
type safetensorsIndex struct {
	WeightMap map[string]string `json:"weight_map"`
}

// shards are the names of the files the index's weight map names, sorted,
// each once; a name that is not a file beside the index is an error.
func (idx safetensorsIndex) shards() ([]string, error) {
	var names []string
	seen := map[string]bool{}
	for tensor, file := range idx.WeightMap {
		if file == "" || file != filepath.Base(file) || file == "." || file == ".." {
			return nil, fmt.Errorf("tensor %s is in %q (valid: the name of a file beside the index)", tensor, file)
		}
		if !seen[file] {
			seen[file] = true
			names = append(names, file)
		}
	}
	sort.Strings(names)
	return names, nil
}

// LoadFiles are the files a load of path reads, for the checks that no
// output replaces an input: path, and the shards beside it when path is a
// sharded model's index. An index that cannot be read gives path alone:
// the load itself names its fault.
func LoadFiles(path string) []string {
	if path == "" {
		return nil
	}
	out := []string{path}
	idx, sharded, err := readSafetensorsIndex(path)
	if err != nil || !sharded {
		return out
	}
	names, err := idx.shards()
	if err != nil {
		return out
	}
	for _, n := range names {
		out = append(out, filepath.Join(filepath.Dir(path), n))
	}
	return out
}

// readSafetensorsIndex reads the file at path as a sharded model's index:
// ok is false (and err nil) for a file that is no JSON object with a
// weight_map.
func readSafetensorsIndex(path string) (idx safetensorsIndex, ok bool, err error) {
	f, size, err := files.OpenInput("--load", path)
	if err != nil {
		return idx, false, err
	}
	defer f.Close()
	var first [1]byte
	if size == 0 || size > safetensorsIndexMax {
		return idx, false, nil
	}
	if _, err := io.ReadFull(f, first[:]); err != nil {
		return idx, false, fmt.Errorf("--load %s: %w", path, err)
	}
	if first[0] != '{' {
		return idx, false, nil
	}
	// A file that opens with a JSON object is an index by intent: its JSON
	// errors are its own, not an llm.c magic's.
	b, err := io.ReadAll(io.MultiReader(bytes.NewReader(first[:]), f))
	if err != nil {
		return idx, false, fmt.Errorf("--load %s: %w", path, err)
	}
	if err := json.Unmarshal(b, &idx); err != nil {
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &se):
			err = fmt.Errorf("%v at byte %d", se, se.Offset)
		case errors.As(err, &te):
			err = fmt.Errorf("%s: a JSON %s (valid: an object of tensor names to shard file names)", te.Field, te.Value)
		}
		return idx, false, files.BadInput(path, fmt.Errorf("model: %s: not a safetensors index (valid: model.safetensors.index.json's object with a weight_map): %v", path, err))
	}
	if len(idx.WeightMap) == 0 {
		return idx, false, files.BadInput(path, fmt.Errorf("model: %s: a JSON object with no weight_map: not a safetensors index (valid: model.safetensors.index.json, whose weight_map names each tensor's shard)", path))
	}
	return idx, true, nil
}

// safetensorsSource is where a model's tensors are: one file, or the
// shards a sharded model's index names, each tensor's shard and header.
type safetensorsSource struct {
	shards  []string // paths
	starts  []int64  // where each shard's data begins
	shardOf map[string]int
	infos   map[string]*st.TensorInfo
}

// openSafetensors reads the headers of the safetensors file at path, or of
// every shard of the index at path (the shards beside it, by the names
// the index gives), and checks that every tensor is in the shard the index
// says, and every shard's tensors in the index. Errors name the file.
func openSafetensors(path string) (safetensorsSource, error) {
	header := func(p string) (map[string]*st.TensorInfo, int64, error) {
		f, size, err := files.OpenInput("--load", p)
		if err != nil {
			return nil, 0, err
		}
		defer f.Close()
		infos, start, err := readSafetensorsHeader(f, size)
		if err != nil {
			return nil, 0, files.BadInput(p, fmt.Errorf("%w (file %s)", err, p))
		}
		return infos, start, nil
	}
	idx, sharded, err := readSafetensorsIndex(path)
	if err != nil {
		return safetensorsSource{}, err
	}
	if !sharded {
		infos, start, err := header(path)
		if err != nil {
			return safetensorsSource{}, err
		}
		src := safetensorsSource{shards: []string{path}, starts: []int64{start}, shardOf: map[string]int{}, infos: infos}
		for name := range infos {
			src.shardOf[name] = 0
		}
		return src, nil
	}
	bad := func(format string, args ...any) error {
		return files.BadInput(path, fmt.Errorf("model: safetensors index %s: %s", path, fmt.Sprintf(format, args...)))
	}
	names, err := idx.shards()
	if err != nil {
		return safetensorsSource{}, bad("%v", err)
	}
	src := safetensorsSource{shardOf: map[string]int{}, infos: map[string]*st.TensorInfo{}}
	for i, file := range names {
		p := filepath.Join(filepath.Dir(path), file)
		infos, start, err := header(p)
		if err != nil {
			return safetensorsSource{}, err
		}
		src.starts = append(src.starts, start)
		for tensor, ti := range infos {
			if want, ok := idx.WeightMap[tensor]; !ok || want != file {
				if !ok {
					return safetensorsSource{}, bad("shard %s holds tensor %s, which the index does not list", file, tensor)
				}
				return safetensorsSource{}, bad("shard %s holds tensor %s, which the index puts in %s", file, tensor, want)
			}
			src.infos[tensor], src.shardOf[tensor] = ti, i
		}
		src.shards = append(src.shards, p)
	}
	for tensor, file := range idx.WeightMap {
		if _, ok := src.infos[tensor]; !ok {
			return safetensorsSource{}, bad("tensor %s is not in %s, where the index puts it", tensor, file)
		}
	}
	return src, nil
}

// plan is the source's tensors checked against cfg (planTensors), the
// error naming the file (the index, for a sharded model).
func (src safetensorsSource) plan(path string, cfg Config) (safetensorsPlan, error) {
	plan, err := planTensors(src.infos, cfg)
	if err != nil {
		return plan, files.BadInput(path, fmt.Errorf("%w (file %s)", err, path))
	}
	return plan, nil
}

// checkSafetensors checks the file (or sharded model's index) at path
// against cfg without reading its tensors (CheckCheckpoint's refusals
// before any work).
func checkSafetensors(path string, cfg Config) error {
	src, err := openSafetensors(path)
	if err != nil {
		return err
	}
	_, err = src.plan(path, cfg)
	return err
}

// loadSafetensors reads cfg's parameters, flat in Config.Params order, from
// the safetensors file at path, or from the shards of the index at path,
// one tensor in memory at a time beside the parameters (a shard was read
// whole, and one of 7 GB ran the process out of memory).
func loadSafetensors(path string, cfg Config) ([]float32, error) {
	src, err := openSafetensors(path)
	if err != nil {
		return nil, err
	}
	plan, err := src.plan(path, cfg)
	if err != nil {
		return nil, err
	}
	params := make([]float32, cfg.NumParams())
	filled := int64(0)
	// One buffer of a tensor's bytes and one of a transposed tensor's
	// values, each as large as the largest, reused.
	var buf []byte
	var scratch []float32
	for i, shard := range src.shards {
		f, _, err := files.OpenInput("--load", shard)
		if err != nil {
			return nil, err
		}
		err = func() error {
			defer f.Close()
			for r, p := range plan.table {
				for j, part := range plan.parts[r] {
					if src.shardOf[part.name] != i {
						continue
					}
					ti := src.infos[part.name]
					o := ti.DataOffsets // inside the file: readSafetensorsHeader
					buf = grow(buf, int(o[1]-o[0]))
					if _, err := f.ReadAt(buf, src.starts[i]+int64(o[0])); err != nil {
						return fmt.Errorf("--load %s: tensor %s: %w", shard, part.name, err)
					}
					n := int(o[1]-o[0]) / int(ti.DType.Size())
					dst := params[p.Offset+plan.at[r][j]:][:n] // planTensors: the part fits its row
					into := dst
					if part.transpose {
						scratch = grow(scratch, n)
						into = scratch
					}
					if err := decodeFloats(ti.DType, buf, into); err != nil {
						return files.BadInput(shard, fmt.Errorf("model: %s: tensor %s: %v", shard, part.name, err))
					}
					if part.transpose {
						r, c := int(ti.Shape[0]), int(ti.Shape[1])
						for a := range r {
							for b := range c {
								dst[b*r+a] = into[a*c+b]
							}
						}
					}
					filled += int64(n)
				}
			}
			return nil
		}()
		if err != nil {
			return nil, err
		}
	}
	if filled != int64(len(params)) {
		return nil, errors.New("model: internal: the table's rows were not all filled")
	}
	return params, nil
}

// decodeFloats reads a tensor's elements (little-endian, its dtype) into
// v as fp32: exact from F16 and BF16, rounded once from F64. A weight that
// is not finite, or an F64 one beyond fp32's range, is refused by its
// place (it would be blamed on the learning rate at the first step).
func decodeFloats(dt st.DType, b []byte, v []float32) error {
	switch dt {
	case st.F32:
		for i := range v {
			v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
	case st.F64:
		for i := range v {
			x := math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:]))
			if r := float32(x); math.IsInf(float64(r), 0) && !math.IsInf(x, 0) {
				return fmt.Errorf("element %d is %g, beyond fp32's ±%g (valid: finite fp32 weights)", i, x, math.MaxFloat32)
			}
			v[i] = float32(x)
		}
	case st.F16, st.BF16:
		conv := cuda.F16ToF32
		if dt == st.BF16 {
			conv = cuda.BF16ToF32
		}
		for i := range v {
			v[i] = conv(binary.LittleEndian.Uint16(b[2*i:]))
		}
	default:
		return fmt.Errorf("dtype %v (valid: F32, F16, BF16, F64)", dt)
	}
	if i := nonFinite(v); i >= 0 {
		return fmt.Errorf("element %d is %v (valid: finite weights)", i, v[i])
	}
	return nil
}

// grow is v with length n, its array reused when large enough.
func grow[T any](v []T, n int) []T {
	if cap(v) < n {
		return make([]T, n)
	}
	return v[:n]
}

// nonFinite is the place of the first NaN or infinity in v, or -1.
func nonFinite(v []float32) int {
	for i, x := range v {
		if x != x || x > math.MaxFloat32 || x < -math.MaxFloat32 {
			return i
		}
	}
	return -1
}
