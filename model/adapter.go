package model

// A LoRA's adapters as people exchange them: PEFT's adapter directory
// (adapter_config.json and adapter_model.safetensors, the tensors named as
// PEFT's get_peft_model_state_dict names them, version 0.10 to 0.13:
// base_model.model.<module>.lora_A.weight, (r, in), and .lora_B.weight,
// (out, r)), and the adapters merged into the base weights (PEFT's
// merge_and_unload: W + (α/r)·B·A).

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"

	st "github.com/nlpodyssey/safetensors"

	"trainmem/model/files"
)

// PEFT's file names in an adapter directory.
const (
	AdapterConfigFile  = "adapter_config.json"
	AdapterWeightsFile = "adapter_model.safetensors"
)

// AdapterTensor is one of a LoRA's tensors as PEFT saves it: its name and
// shape, and where it lies in the flat table: Count elements from Offset
// (a part of a row's: one projection's A rows of <layer>.lora_a, or its B
// rows of <layer>.lora_b).
type AdapterTensor struct {
	Name          string
	Shape         [2]int
	Offset, Count int64
}

// AdapterTensors is c's LoRA's tensors in table order, named as PEFT
// names them for transformers' GPT2LMHeadModel or LlamaForCausalLM.
func (c Config) AdapterTensors() ([]AdapterTensor, error) {
	if !c.LoRA.On() {
		return nil, fmt.Errorf("model: %s has no LoRA", c.Name)
	}
	rows, _, err := hfLayout(c.Whole())
	if err != nil {
		return nil, err
	}
	byName := c.paramsByName()
	prefix := "base_model.model."
	if !c.llamaModules() {
		prefix += "transformer." // GPT-2's modules under GPT2LMHeadModel
	}
	r := int64(c.LoRA.Rank)
	var out []AdapterTensor
	err = c.eachAdapted(func(layer string, in int, a adapter) error {
		modules, err := hfModules(rows[layer+".w"], a, c)
		if err != nil {
			return err
		}
		pa, pb := byName[layer+".lora_a"], byName[layer+".lora_b"]
		var bRow int64
		for k, part := range a.parts {
			w := int64(part[1] - part[0])
			out = append(out,
				AdapterTensor{Name: prefix + modules[k] + ".lora_A.weight", Shape: [2]int{int(r), in}, Offset: pa.Offset + int64(k)*r*int64(in), Count: r * int64(in)},
				AdapterTensor{Name: prefix + modules[k] + ".lora_B.weight", Shape: [2]int{int(w), int(r)}, Offset: pb.Offset + bRow*r, Count: w * r})
			bRow += w
		}
		return nil
	})
	return out, err
}

// eachAdapted calls fn with each adapted linear layer of c's blocks, in
// table order: its rows' name ("h3.attn.qkv": .w, .lora_a, .lora_b), its
// input width and its adapter.
func (c Config) eachAdapted(fn func(layer string, in int, a adapter) error) error {
	for l := range c.Layers {
		for _, la := range c.adaptedLayers() {
			if a, ok := c.adapterOf(la.name); ok {
				if err := fn(fmt.Sprintf("h%d.%s", c.Stage.Lo+l, la.name), la.in, a); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// paramsByName is c's parameter table by row name.
func (c Config) paramsByName() map[string]Param {
	m := map[string]Param{}
	for _, p := range c.Params() {
		m[p.Name] = p
	}
	return m
}

// hfModules is the module name (the tensor's name less ".weight") of each
// adapted part of a linear layer whose row is made of parts (hfLayout's):
// one part a projection, stacked in order, the parts' widths the layer's
// q, k, v (or gate, up) widths.
func hfModules(parts []hfPart, a adapter, c Config) ([]string, error) {
	widths := map[int][]int{1: nil, 2: {c.FFNWidth(), c.FFNWidth()}, 3: {c.Hidden, c.kvWidth(), c.kvWidth()}}[len(parts)]
	var names []string
	for _, p := range a.parts {
		k, lo := -1, 0
		switch {
		case len(parts) == 1:
			k = 0
		default:
			for j, w := range widths {
				if p[0] == lo && p[1] == lo+w {
					k = j
				}
				lo += w
			}
		}
		if k < 0 {
			return nil, fmt.Errorf("model: internal: adapted columns %v are no projection of %v", p, parts)
		}
		names = append(names, strings.TrimSuffix(parts[k].name, ".weight"))
	}
	return names, nil
}

// peftConfigOut is the adapter_config.json trainmem writes: PEFT's
// LoraConfig fields, with the values of c's LoRA and PEFT's defaults for
// the rest (a LoRA as trainmem trains it: no dropout, no bias, no DoRA).
type peftConfigOut struct {
	PEFTType          string          `json:"peft_type"`
	TaskType          string          `json:"task_type"`
	BaseModel         string          `json:"base_model_name_or_path"`
	R                 int             `json:"r"`
	Alpha             float64         `json:"lora_alpha"`
	Dropout           float64         `json:"lora_dropout"`
	Targets           []string        `json:"target_modules"`
	Bias              string          `json:"bias"`
	FanInFanOut       bool            `json:"fan_in_fan_out"`
	RSLoRA            bool            `json:"use_rslora"`
	DoRA              bool            `json:"use_dora"`
	InitLoRAWeights   bool            `json:"init_lora_weights"`
	InferenceMode     bool            `json:"inference_mode"`
	ModulesToSave     []string        `json:"modules_to_save"`
	LayersToTransform []int           `json:"layers_to_transform"`
	RankPattern       map[string]int  `json:"rank_pattern"`
	AlphaPattern      map[string]bool `json:"alpha_pattern"`
}

// WriteAdapter writes c's adapters from params (the whole table, flat) as
// PEFT's adapter directory dir: adapter_config.json and
// adapter_model.safetensors (fp32), each written atomically.
func WriteAdapter(dir string, c Config, params []float32) error {
	if int64(len(params)) != c.NumParams() {
		return fmt.Errorf("model: saving the adapters of %s: %d parameters, want %d", c.Name, len(params), c.NumParams())
	}
	ts, err := c.AdapterTensors()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("model: --save-adapter %s: %w", dir, err)
	}
	targets := c.LoRA.Targets.Names(c)
	sort.Strings(targets)
	cfg := peftConfigOut{PEFTType: "LORA", TaskType: "CAUSAL_LM", BaseModel: c.Name, R: c.LoRA.Rank, Alpha: c.LoRA.Alpha,
		Targets: targets, Bias: "none", FanInFanOut: !c.llamaModules(), RSLoRA: c.LoRA.RSLoRA, InitLoRAWeights: true, InferenceMode: true,
		RankPattern: map[string]int{}, AlphaPattern: map[string]bool{}}
	js, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	if err := files.WriteAtomic(filepath.Join(dir, AdapterConfigFile), func(w io.Writer) error {
		_, err := w.Write(append(js, '\n'))
		return err
	}); err != nil {
		return err
	}
	return files.WriteAtomic(filepath.Join(dir, AdapterWeightsFile), func(w io.Writer) error { return writeSafetensors(w, ts, params) })
}

// writeSafetensors writes the tensors ts of params as a safetensors file
// of fp32 tensors, in name order, with PEFT's metadata ({"format": "pt"}).
func writeSafetensors(w io.Writer, ts []AdapterTensor, params []float32) error {
	sorted := append([]AdapterTensor(nil), ts...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	header := map[string]any{"__metadata__": map[string]string{"format": "pt"}}
	var at uint64
	for _, t := range sorted {
		n := uint64(t.Count) * 4
		header[t.Name] = map[string]any{"dtype": "F32", "shape": []int{t.Shape[0], t.Shape[1]}, "data_offsets": []uint64{at, at + n}}
		at += n
	}
	h, err := json.Marshal(header)
	if err != nil {
		return err
	}
	for len(h)%8 != 0 { // the data 8-byte aligned, as the format's writers pad
		h = append(h, ' ')
	}
	var lenBuf [8]byte
	binary.LittleEndian.PutUint64(lenBuf[:], uint64(len(h)))
	if _, err := w.Write(append(lenBuf[:], h...)); err != nil {
		return err
	}
	var b []byte
	for _, t := range sorted {
		b = grow(b, int(4*t.Count))
		for i, v := range params[t.Offset : t.Offset+t.Count] {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
		}
		if _, err := w.Write(b); err != nil {
			return err
		}
	}
	return nil
}

// ReadAdapterConfig reads dir's adapter_config.json as a LoRA of c
// (ReadPEFTConfig: what trainmem cannot honour refused by name).
func ReadAdapterConfig(dir string, c Config) (LoRA, []string, error) {
	return ReadPEFTConfig(filepath.Join(dir, AdapterConfigFile), c)
}

// LoadAdapter reads dir's adapter_model.safetensors into params (the
// whole table of c, flat): every adapter tensor c's LoRA has, by PEFT's
// name, of its shape, in a float dtype; a tensor the file lacks, or one
// it has that is no adapter of c (another model's, a LoRA of other
// targets, an embedding's), is refused by name. Errors are
// *files.InputError naming the file.
func LoadAdapter(dir string, c Config, params []float32) error {
	path := filepath.Join(dir, AdapterWeightsFile)
	if int64(len(params)) != c.NumParams() {
		return fmt.Errorf("model: loading the adapters of %s: %d parameters, want %d", c.Name, len(params), c.NumParams())
	}
	ts, err := c.AdapterTensors()
	if err != nil {
		return err
	}
	f, size, err := files.OpenInput("--load-adapter", path)
	if err != nil {
		return err
	}
	defer f.Close()
	bad := func(format string, args ...any) error {
		return files.BadInput(path, fmt.Errorf("--load-adapter %s: %s", path, fmt.Sprintf(format, args...)))
	}
	infos, start, err := readSafetensorsHeader(f, size)
	if err != nil {
		return bad("%s", strings.TrimPrefix(err.Error(), "model: "))
	}
	want := map[string]bool{}
	for _, t := range ts {
		want[t.Name] = true
	}
	var extra []string
	for name := range infos {
		if !want[name] {
			extra = append(extra, name)
		}
	}
	if len(extra) > 0 {
		sort.Strings(extra)
		return bad("tensor %s is no adapter of %s's LoRA (r %d on %s; %d tensors of it in all)", extra[0], c.Name, c.LoRA.Rank, strings.Join(c.LoRA.Targets.Names(c), ", "), len(ts))
	}
	var buf []byte
	for _, t := range ts {
		ti, ok := infos[t.Name]
		if !ok {
			return bad("no tensor %s (the adapters of r %d on %s)", t.Name, c.LoRA.Rank, strings.Join(c.LoRA.Targets.Names(c), ", "))
		}
		if len(ti.Shape) != 2 || ti.Shape[0] != uint64(t.Shape[0]) || ti.Shape[1] != uint64(t.Shape[1]) {
			return bad("tensor %s has shape %v, want %v", t.Name, ti.Shape, t.Shape)
		}
		size := map[st.DType]uint64{st.F32: 4, st.F64: 8, st.F16: 2, st.BF16: 2}[ti.DType]
		if size == 0 {
			return bad("tensor %s: dtype %v (valid: F32, F16, BF16, F64)", t.Name, ti.DType)
		}
		if n := ti.DataOffsets[1] - ti.DataOffsets[0]; n != uint64(t.Count)*size {
			return bad("tensor %s holds %d bytes, want %d", t.Name, n, uint64(t.Count)*size)
		}
		buf = grow(buf, int(uint64(t.Count)*size))
		if _, err := f.ReadAt(buf, start+int64(ti.DataOffsets[0])); err != nil {
			return bad("tensor %s: %v", t.Name, err)
		}
		if err := decodeFloats(ti.DType, buf, params[t.Offset:t.Offset+t.Count]); err != nil {
			return bad("tensor %s: %v", t.Name, err)
		}
	}
	return nil
}

// MergeLoRA is c's weights (params, the whole table, flat) with its
// adapters merged into the base (PEFT's merge_and_unload): each adapted
// projection's rows of its layer's weight W_p += (α/r)·B_p·A_p, summed in
// float64, and the base model's config (no LoRA, no quantization) and
// weights in its table order. A quantized base merges into its weights as
// loaded (dequantized), as PEFT merges into a 4-bit model's.
func MergeLoRA(c Config, params []float32) (Config, []float32, error) {
	if int64(len(params)) != c.NumParams() {
		return Config{}, nil, fmt.Errorf("model: merging the adapters of %s: %d parameters, want %d", c.Name, len(params), c.NumParams())
	}
	base := c
	base.LoRA, base.Quantize = LoRA{}, QuantNone
	byName, outRow := c.paramsByName(), base.paramsByName()
	out := make([]float32, base.NumParams())
	for _, p := range base.Params() {
		q := byName[p.Name]
		copy(out[p.Offset:p.Offset+p.Count], params[q.Offset:q.Offset+q.Count])
	}
	scale := float64(c.LoRA.Scale())
	r := c.LoRA.Rank
	err := c.eachAdapted(func(layer string, in int, a adapter) error {
		w, A, B := outRow[layer+".w"], byName[layer+".lora_a"], byName[layer+".lora_b"]
		bRow := 0
		for k, part := range a.parts {
			for i := part[0]; i < part[1]; i++ { // W's row i: the projection's output i-part[0]
				bi := B.Offset + int64(bRow+i-part[0])*int64(r)
				for j := range in {
					var s float64
					for t := range r {
						s += float64(params[bi+int64(t)]) * float64(params[A.Offset+int64(k*r+t)*int64(in)+int64(j)])
					}
					at := w.Offset + int64(i)*int64(in) + int64(j)
					out[at] = float32(float64(out[at]) + scale*s)
				}
			}
			bRow += part[1] - part[0]
		}
		return nil
	})
	return base, out, err
}
