package model

// llm.c's GPT-2 model file, read and written. The file is a header of 256
// little-endian int32 followed by the fp32 parameters in llm.c's order, which
// groups each tensor kind across layers:
//
//	header[0] = 20240326 (magic), [1] = version, [2] = max seq len (ctx),
//	[3] = vocab V, [4] = layers L, [5] = heads, [6] = channels C,
//	[7] = padded vocab Vp (version 3; V rounded up to a multiple of 128)
//	wte (Vp, C) wpe (ctx, C) ln1w (L, C) ln1b (L, C) qkvw (L, 3C, C)
//	qkvb (L, 3C) attprojw (L, C, C) attprojb (L, C) ln2w (L, C) ln2b (L, C)
//	fcw (L, 4C, C) fcb (L, 4C) fcprojw (L, C, 4C) fcprojb (L, C) lnfw (C) lnfb (C)
//
// trainmem keeps each block's tensors together instead (Config.Params), and
// an unpadded vocabulary: the reader maps between the orders and drops the
// padded rows of wte, the writer adds zero rows. The format has no separate
// head (GPT-2 ties it to wte), so an untied config cannot be stored in it.

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"

	"trainmem/model/files"
)

// Magic numbers of llm.c's files.
const (
	CheckpointMagic = 20240326 // GPT-2 model file
	TokenFileMagic  = 20240520 // token file (see package train/data)
)

// CheckpointVersion is the version this package writes: fp32 parameters with
// the vocabulary padded to a multiple of VocabPadding. Version 1 (fp32,
// unpadded) is also read.
const CheckpointVersion = 3

// VocabPadding is the multiple llm.c pads the vocabulary to in its files
// (50257 → 50304).
const VocabPadding = 128

const headerInts = 256
const headerBytes = 4 * headerInts

// CheckpointHeader is the shape an llm.c model file declares.
type CheckpointHeader struct {
	Version     int
	MaxSeqLen   int // learned positions (Config.Context)
	Vocab       int // real vocabulary V
	Layers      int
	Heads       int
	Channels    int // hidden size C
	PaddedVocab int // rows of wte in the file, Vp ≥ V (V for version 1)
}

// Config is the model the header describes, named "checkpoint", with the
// tied head the format implies.
func (h CheckpointHeader) Config() Config {
	return Config{Name: "checkpoint", Layers: h.Layers, Hidden: h.Channels, Heads: h.Heads, Vocab: h.Vocab, Context: h.MaxSeqLen}
}

// FileBytes is the size of the file the header declares: the header and
// the fp32 parameters of its shape, Vp·C + ctx·C + L·(12C² + 13C) + 2C of
// them, computed with checked arithmetic (an *SizeError-free header gives
// at most about 2^60 bytes).
func (h CheckpointHeader) FileBytes() (int64, error) {
	var c calc
	C, L := int64(h.Channels), int64(h.Layers)
	n := c.add(c.mul(int64(h.PaddedVocab), C), c.mul(int64(h.MaxSeqLen), C), c.mul(L, c.add(c.mul(12, C, C), c.mul(13, C))), c.mul(2, C))
	total := c.add(headerBytes, c.mul(4, n))
	if err := c.err(); err != nil {
		return 0, fmt.Errorf("model: checkpoint header declares a shape too large to count: %s", h.shapeString())
	}
	return total, nil
}

// PaddedVocab is v rounded up to a multiple of VocabPadding.
func PaddedVocab(v int) int { return (v + VocabPadding - 1) / VocabPadding * VocabPadding }

// ReadCheckpointHeader reads and checks the 256-int32 header.
func ReadCheckpointHeader(r io.Reader) (CheckpointHeader, error) {
	var raw [headerBytes]byte
	n, err := io.ReadFull(r, raw[:])
	if err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return CheckpointHeader{}, fmt.Errorf("model: checkpoint truncated: %d bytes, expected at least the %d-byte header", n, headerBytes)
		}
		return CheckpointHeader{}, fmt.Errorf("model: reading checkpoint header: %w", err)
	}
	var hd [headerInts]int32
	for i := range hd {
		hd[i] = int32(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	switch hd[0] {
	case CheckpointMagic:
	case TokenFileMagic:
		return CheckpointHeader{}, fmt.Errorf("model: not a model checkpoint: magic %d is llm.c's token file magic (expected %d); was a data file given as a checkpoint?", hd[0], CheckpointMagic)
	default:
		return CheckpointHeader{}, fmt.Errorf("model: neither an llm.c GPT-2 checkpoint (its first int32 %d, where llm.c's magic is %d), a safetensors file (an 8-byte header length, then its JSON header) nor a safetensors index (a JSON object)", hd[0], CheckpointMagic)
	}
	h := CheckpointHeader{
		Version: int(hd[1]), MaxSeqLen: int(hd[2]), Vocab: int(hd[3]),
		Layers: int(hd[4]), Heads: int(hd[5]), Channels: int(hd[6]), PaddedVocab: int(hd[7]),
	}
	switch h.Version {
	case 3:
	case 1:
		h.PaddedVocab = h.Vocab
	default:
		return CheckpointHeader{}, fmt.Errorf("model: unsupported checkpoint version %d (valid: 3, fp32 with padded vocabulary; 1, fp32 unpadded)", h.Version)
	}
	if err := h.Config().Validate(); err != nil {
		return CheckpointHeader{}, fmt.Errorf("model: checkpoint header declares an invalid shape: %w", unprefixed{err})
	}
	if h.PaddedVocab < h.Vocab {
		return CheckpointHeader{}, fmt.Errorf("model: checkpoint header declares padded vocabulary %d smaller than vocabulary %d", h.PaddedVocab, h.Vocab)
	}
	if h.PaddedVocab > MaxVocab {
		return CheckpointHeader{}, fmt.Errorf("model: checkpoint header declares padded vocabulary %d: out of range (valid: the vocabulary %d to %d)", h.PaddedVocab, h.Vocab, MaxVocab)
	}
	return h, nil
}

// checkSize compares the file's size with what the header declares, before
// anything is allocated for the parameters.
func (h CheckpointHeader) checkSize(size int64) error {
	want, err := h.FileBytes()
	switch {
	case err != nil:
		return err
	case size < want:
		return fmt.Errorf("model: checkpoint truncated: %d bytes, expected %d for its %s", size, want, h.shapeString())
	case size > want:
		return fmt.Errorf("model: checkpoint has %d bytes, expected %d for its %s: %d trailing bytes", size, want, h.shapeString(), size-want)
	}
	return nil
}

// checkShape names every field in which the header differs from cfg.
func (h CheckpointHeader) checkShape(cfg Config) error {
	var diffs []string
	for _, f := range []struct {
		name       string
		file, want int
	}{
		{"max seq len (context)", h.MaxSeqLen, cfg.Context},
		{"vocab", h.Vocab, cfg.Vocab},
		{"layers", h.Layers, cfg.Layers},
		{"heads", h.Heads, cfg.Heads},
		{"channels (hidden)", h.Channels, cfg.Hidden},
	} {
		if f.file != f.want {
			diffs = append(diffs, fmt.Sprintf("%s %d, config has %d", f.name, f.file, f.want))
		}
	}
	if len(diffs) > 0 {
		return fmt.Errorf("model: checkpoint shape differs from %s: %s", cfg.Name, strings.Join(diffs, "; "))
	}
	return nil
}

// segment is a run of floats in llm.c's order: Count floats belonging at
// Offset of trainmem's flat buffer, or padding (Offset -1: zeros on write,
// skipped on read).
type segment struct{ Offset, Count int64 }

// blockKinds are a block's tensors in Config.Params order, each with its
// size as a function of h: the names llm.c's file groups across layers.
var blockKinds = []struct {
	name string
	size func(h int64) int64
}{
	{"ln1.w", func(h int64) int64 { return h }},
	{"ln1.b", func(h int64) int64 { return h }},
	{"attn.qkv.w", func(h int64) int64 { return 3 * h * h }},
	{"attn.qkv.b", func(h int64) int64 { return 3 * h }},
	{"attn.proj.w", func(h int64) int64 { return h * h }},
	{"attn.proj.b", func(h int64) int64 { return h }},
	{"ln2.w", func(h int64) int64 { return h }},
	{"ln2.b", func(h int64) int64 { return h }},
	{"mlp.fc.w", func(h int64) int64 { return 4 * h * h }},
	{"mlp.fc.b", func(h int64) int64 { return 4 * h }},
	{"mlp.proj.w", func(h int64) int64 { return 4 * h * h }},
	{"mlp.proj.b", func(h int64) int64 { return h }},
}

// llmcLayout calls each with cfg's parameters in llm.c's file order, with
// vp rows of wte, stopping at the first error. The offsets are computed
// from the shape (Config.Params's layout, which checkpoint_test.go checks them
// against), not from the parameter table, so that walking a file costs no
// memory per layer.
func llmcLayout(cfg Config, vp int, each func(segment) error) error {
	h, V, ctx := int64(cfg.Hidden), int64(cfg.Vocab), int64(cfg.Context)
	block := cfg.LayerParams()
	first := V*h + ctx*h // the blocks start after wte and wpe
	segs := []segment{{0, V * h}}
	if pad := (int64(vp) - V) * h; pad > 0 {
		segs = append(segs, segment{-1, pad})
	}
	segs = append(segs, segment{V * h, ctx * h})
	for _, sg := range segs {
		if err := each(sg); err != nil {
			return err
		}
	}
	var within int64 // the kind's offset within a block
	for _, k := range blockKinds {
		n := k.size(h)
		for l := range int64(cfg.Layers) {
			if err := each(segment{first + l*block + within, n}); err != nil {
				return err
			}
		}
		within += n
	}
	lnf := first + int64(cfg.Layers)*block
	if err := each(segment{lnf, h}); err != nil {
		return err
	}
	return each(segment{lnf + h, h})
}

// ReadCheckpoint reads an llm.c GPT-2 model file of size bytes whose shape
// must be cfg's and returns its parameters in trainmem's flat order
// (Config.Params), the padded vocabulary rows dropped. The header is
// checked against size before anything is allocated, so a short file whose
// header claims a huge shape costs nothing; r is read no further than
// size. The parameters take at most size bytes of memory, beside a read
// buffer of at most 1 MiB.
func ReadCheckpoint(r io.Reader, size int64, cfg Config) ([]float32, error) {
	h, err := readCheckedHeader(r, size, cfg)
	if err != nil {
		return nil, err
	}
	params := make([]float32, cfg.NumParams())
	buf := make([]byte, min(1<<20, size-headerBytes+4)&^3)
	var read int64 // parameter bytes read
	err = llmcLayout(cfg, h.PaddedVocab, func(s segment) error {
		for done := int64(0); done < s.Count; {
			n := min(s.Count-done, int64(len(buf)/4))
			got, err := io.ReadFull(r, buf[:4*n])
			read += int64(got)
			if err != nil {
				if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
					want, _ := h.FileBytes()
					return fmt.Errorf("model: checkpoint truncated: %d bytes, expected %d for its %s", headerBytes+read, want, h.shapeString())
				}
				return fmt.Errorf("model: reading checkpoint parameters: %w", err)
			}
			if s.Offset >= 0 {
				dst := params[s.Offset+done : s.Offset+done+n]
				for i := range dst {
					dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(buf[4*i:]))
				}
			}
			done += n
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if i := nonFinite(params); i >= 0 {
		for _, p := range cfg.Params() {
			if int64(i) >= p.Offset && int64(i) < p.Offset+p.Count {
				return nil, fmt.Errorf("model: checkpoint parameter %s: element %d is %v (valid: finite weights)", p.Name, int64(i)-p.Offset, params[i])
			}
		}
	}
	return params, nil
}

// readCheckedHeader reads the header of a checkpoint of size bytes for a
// model of cfg's shape and makes every check that needs no parameter, in
// the one order ReadCheckpoint and CheckCheckpoint share: cfg can be
// stored, the header is whole and valid, its shape is cfg's, and the size
// is what it declares.
func readCheckedHeader(r io.Reader, size int64, cfg Config) (CheckpointHeader, error) {
	if err := checkLLMC(cfg); err != nil {
		return CheckpointHeader{}, err
	}
	if size < headerBytes {
		return CheckpointHeader{}, fmt.Errorf("model: checkpoint truncated: %d bytes, expected at least the %d-byte header", max(size, 0), headerBytes)
	}
	h, err := ReadCheckpointHeader(r)
	if err == nil {
		err = h.checkShape(cfg)
	}
	if err == nil {
		err = h.checkSize(size)
	}
	return h, err
}

func (h CheckpointHeader) shapeString() string {
	return fmt.Sprintf("shape (version %d, ctx %d, V %d, Vp %d, L %d, heads %d, C %d)",
		h.Version, h.MaxSeqLen, h.Vocab, h.PaddedVocab, h.Layers, h.Heads, h.Channels)
}

// CheckSavable reports whether cfg can be stored in llm.c's format: a valid
// shape with GPT-2's architecture and the tied head the format implies.
func CheckSavable(cfg Config) error { return checkLLMC(cfg) }

func checkLLMC(cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if cfg.Untied {
		return fmt.Errorf("model: %s has an untied head (lm_head.w), which llm.c's GPT-2 checkpoint format cannot hold (it ties the head to wte)", cfg.Name)
	}
	if !cfg.GPT2() {
		var what []string
		if cfg.Norm != NormLayer {
			what = append(what, cfg.Norm.String()+" norms")
		}
		if cfg.NoBias {
			what = append(what, "no linear biases")
		}
		if cfg.MLP != MLPGELU || cfg.FFNWidth() != 4*cfg.Hidden {
			what = append(what, fmt.Sprintf("a %s MLP of %d", cfg.MLP, cfg.FFNWidth()))
		}
		if cfg.Positions != PosLearned {
			what = append(what, cfg.Positions.String()+" positions")
		}
		if float32(cfg.Eps()) != float32(LayerNormEps) {
			what = append(what, fmt.Sprintf("a norm ε of %g", cfg.Eps()))
		}
		return fmt.Errorf("model: %s has %s, which llm.c's GPT-2 checkpoint format cannot hold (it stores layer norms with biases and ε 1e-05, linear layers with biases, a GELU MLP of 4h and learned positions)", cfg.Name, strings.Join(what, ", "))
	}
	return nil
}

// WriteCheckpoint writes params (flat, Config.Params order) as an llm.c
// GPT-2 model file, version 3, with the vocabulary padded to a multiple of
// VocabPadding by zero rows.
func WriteCheckpoint(w io.Writer, cfg Config, params []float32) error {
	if err := checkLLMC(cfg); err != nil {
		return err
	}
	if int64(len(params)) != cfg.NumParams() {
		return fmt.Errorf("model: writing a checkpoint of %s: %d parameters, want %d", cfg.Name, len(params), cfg.NumParams())
	}
	vp := PaddedVocab(cfg.Vocab)
	var hd [headerBytes]byte
	for i, v := range []int{CheckpointMagic, CheckpointVersion, cfg.Context, cfg.Vocab, cfg.Layers, cfg.Heads, cfg.Hidden, vp} {
		if v > math.MaxInt32 {
			return fmt.Errorf("model: checkpoint header field %d = %d exceeds int32", i, v)
		}
		binary.LittleEndian.PutUint32(hd[4*i:], uint32(v))
	}
	bw := bufio.NewWriterSize(w, 1<<20)
	if _, err := bw.Write(hd[:]); err != nil {
		return fmt.Errorf("model: writing checkpoint: %w", err)
	}
	buf := make([]byte, 1<<20)
	err := llmcLayout(cfg, vp, func(s segment) error {
		for done := int64(0); done < s.Count; {
			n := min(s.Count-done, int64(len(buf)/4))
			b := buf[:4*n]
			if s.Offset < 0 {
				clear(b)
			} else {
				for i, v := range params[s.Offset+done : s.Offset+done+n] {
					binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
				}
			}
			if _, err := bw.Write(b); err != nil {
				return fmt.Errorf("model: writing checkpoint: %w", err)
			}
			done += n
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("model: writing checkpoint: %w", err)
	}
	return nil
}

// LoadCheckpoint reads the llm.c GPT-2 model file at path, whose shape must
// be cfg's (see ReadCheckpoint), or a safetensors file of cfg's weights
// (safetensors.go; IsSafetensors tells them apart by their first bytes).
// Only a regular file is read; every error about the file is a
// *files.InputError naming it.
func LoadCheckpoint(path string, cfg Config) ([]float32, error) {
	if ok, err := IsSafetensors(path); err != nil || ok {
		if err != nil {
			return nil, err
		}
		return loadSafetensors(path, cfg)
	}
	f, size, err := files.OpenInput("--load", path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	params, err := ReadCheckpoint(f, size, cfg)
	if err != nil {
		return nil, files.BadInput(path, fmt.Errorf("%w (file %s)", err, path))
	}
	return params, nil
}

// CheckpointConfig reads only the header of the llm.c GPT-2 model file at
// path, checks it against the file's size, and returns the model it
// declares (for loading a checkpoint whose preset is not known, such as
// llm.c's gpt2_124M.bin). Errors are *files.InputError naming the file.
func CheckpointConfig(path string) (Config, error) {
	f, size, err := files.OpenInput("--load", path)
	if err != nil {
		return Config{}, err
	}
	defer f.Close()
	h, err := ReadCheckpointHeader(io.LimitReader(f, size))
	if err == nil {
		err = h.checkSize(size)
	}
	if err != nil {
		return Config{}, files.BadInput(path, fmt.Errorf("%w (file %s)", err, path))
	}
	return h.Config(), nil
}

// CheckCheckpoint checks, without reading the parameters, that the llm.c
// model file at path holds a model of cfg's shape and has the size its
// header declares, or that the safetensors file at path holds cfg's
// tensors: the refusals LoadCheckpoint would make, before any work.
// Errors are *files.InputError naming the file.
func CheckCheckpoint(path string, cfg Config) error {
	if ok, err := IsSafetensors(path); err != nil || ok {
		if err != nil {
			return err
		}
		return checkSafetensors(path, cfg)
	}
	f, size, err := files.OpenInput("--load", path)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := readCheckedHeader(io.LimitReader(f, size), size, cfg); err != nil {
		return files.BadInput(path, fmt.Errorf("%w (file %s)", err, path))
	}
	return nil
}

// SaveCheckpoint writes params as an llm.c GPT-2 model file at path with
// files.WriteAtomic: path holds either its old contents or the complete new
// file, never a partial one, whatever error or interruption happens.
func SaveCheckpoint(path string, cfg Config, params []float32) error {
	if err := checkLLMC(cfg); err != nil {
		return err
	}
	if int64(len(params)) != cfg.NumParams() {
		return fmt.Errorf("model: saving a checkpoint of %s: %d parameters, want %d", cfg.Name, len(params), cfg.NumParams())
	}
	return files.WriteAtomic(path, func(w io.Writer) error { return WriteCheckpoint(w, cfg, params) })
}

// unprefixed is err without its "model: " prefix, for a message that
// already has one, and still unwraps to err (a *SizeError stays one for
// errors.As).
type unprefixed struct{ err error }

func (u unprefixed) Error() string { return strings.TrimPrefix(u.err.Error(), "model: ") }
func (u unprefixed) Unwrap() error { return u.err }
