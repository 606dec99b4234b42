package model

// Hugging Face model configurations (config.json) as trainmem's Config,
// for the GPT-2 and LLaMA families: the fields that set the shape and the
// architecture are read, and a field whose value this GPT-2/LLaMA cannot
// honour is refused by name; the others (token ids, dtype, cache and
// generation settings) do not change the memory or the arithmetic and are
// passed over.
//
// The field names and defaults follow transformers' GPT2Config,
// LlamaConfig, MistralConfig and Qwen2Config (transformers 4.x).

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"strings"

	"trainmem/model/files"
)

// hfConfigBytes is the most of a config.json that is read: a real one is a
// few kilobytes.
const hfConfigBytes = 1 << 20

// HFModelTypes are the model_type values ReadHFConfig reads.
var HFModelTypes = []string{"gpt2", "llama", "mistral", "qwen2"}

// hfConfig is the part of a config.json that decides the model; a pointer
// is nil where the file leaves the field out (or sets it to null).
type hfConfig struct {
	ModelType  string  `json:"model_type"`
	NameOrPath *string `json:"_name_or_path"`
	VocabSize  *int    `json:"vocab_size"`
	Tie        *bool   `json:"tie_word_embeddings"`
	// GPT-2's names.
	NLayer       *int     `json:"n_layer"`
	NEmbd        *int     `json:"n_embd"`
	NHead        *int     `json:"n_head"`
	NPositions   *int     `json:"n_positions"`
	NInner       *int     `json:"n_inner"`
	Activation   *string  `json:"activation_function"`
	LayerNormEps *float64 `json:"layer_norm_epsilon"`
	// The LLaMA family's names.
	Hidden         *int             `json:"hidden_size"`
	Intermediate   *int             `json:"intermediate_size"`
	Layers         *int             `json:"num_hidden_layers"`
	Heads          *int             `json:"num_attention_heads"`
	KVHeads        *int             `json:"num_key_value_heads"`
	HeadDim        *int             `json:"head_dim"`
	MaxPositions   *int             `json:"max_position_embeddings"`
	HiddenAct      *string          `json:"hidden_act"`
	RMSNormEps     *float64         `json:"rms_norm_eps"`
	RopeTheta      *float64         `json:"rope_theta"`
	RopeScaling    *json.RawMessage `json:"rope_scaling"`
	AttentionBias  *bool            `json:"attention_bias"`
	MLPBias        *bool            `json:"mlp_bias"`
	SlidingWindow  json.RawMessage  `json:"sliding_window"` // absent (nil), null or a number: MistralConfig's default is 4096
	ScaleWeights   *bool            `json:"scale_attn_weights"`
	ScaleByLayer   *bool            `json:"scale_attn_by_inverse_layer_idx"`
	ReorderUpcast  *bool            `json:"reorder_and_upcast_attn"`
	CrossAttention *bool            `json:"add_cross_attention"`
}

// ReadHFConfig reads a Hugging Face config.json at path (the --hf-config
// flag's) as a Config, refusing what trainmem cannot run by the field's
// name. Errors are *files.InputError naming the file.
func ReadHFConfig(path string) (Config, error) {
	f, size, err := files.OpenInput("--hf-config", path)
	if err != nil {
		return Config{}, err
	}
	defer f.Close()
	if size > hfConfigBytes {
		return Config{}, files.BadInput(path, fmt.Errorf("--hf-config %s: %d bytes, more than a config.json's %d at the most", path, size, hfConfigBytes))
	}
	data, err := io.ReadAll(io.LimitReader(f, size))
	if err != nil {
		return Config{}, files.BadInput(path, fmt.Errorf("--hf-config %s: %w", path, err))
	}
	c, err := ParseHFConfig(data)
	if err != nil {
		return Config{}, files.BadInput(path, fmt.Errorf("--hf-config %s: %s", path, strings.TrimPrefix(err.Error(), "model: ")))
	}
	return c, nil
}

// ParseHFConfig reads the bytes of a config.json (ReadHFConfig): one JSON
// object and nothing after it, its keys spelt as transformers writes them
// (Go's decoder alone would take "N_EMBD" for n_embd), each field's value
// of the field's type, an error naming the field, its value and what is
// valid.
func ParseHFConfig(data []byte) (Config, error) {
	h, err := decodeHFConfig(data)
	if err != nil {
		return Config{}, err
	}
	var c Config
	switch h.ModelType {
	case "gpt2":
		c, err = h.gpt2()
	case "llama", "mistral", "qwen2":
		c, err = h.llama()
	case "":
		return Config{}, fmt.Errorf("model: no model_type (valid: %s)", strings.Join(HFModelTypes, ", "))
	default:
		return Config{}, fmt.Errorf("model: model_type %q: not a model trainmem builds (valid: %s)", h.ModelType, strings.Join(HFModelTypes, ", "))
	}
	if err != nil {
		return Config{}, err
	}
	c.Name = h.ModelType
	if h.NameOrPath != nil && *h.NameOrPath != "" {
		c.Name = *h.NameOrPath
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// decodeHFConfig decodes a config.json's one object into hfConfig.
func decodeHFConfig(data []byte) (hfConfig, error) {
	return decodeObject[hfConfig](data, "transformers' fields")
}

// decodeObject decodes a JSON file's one object into T, whose fields'
// json tags are the keys (spelt as the tool that writes the file spells
// them: whose says whose fields they are).
func decodeObject[T any](data []byte, whose string) (T, error) {
	var h T
	var keys map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&keys); err != nil {
		return h, fmt.Errorf("model: not a JSON config (valid: one JSON object of %s): %v", whose, jsonWords(err))
	}
	if keys == nil {
		return h, fmt.Errorf("model: the config is null (valid: one JSON object of %s)", whose)
	}
	if _, err := dec.Token(); err != io.EOF {
		return h, fmt.Errorf("model: more after the config's object, at byte %d (valid: one JSON object and nothing after it)", dec.InputOffset())
	}
	fields := map[string]string{} // each field's key, by its lower case
	t := reflect.TypeOf(h)
	for i := range t.NumField() {
		k := t.Field(i).Tag.Get("json")
		fields[strings.ToLower(k)] = k
	}
	for k := range keys {
		if f, ok := fields[strings.ToLower(k)]; ok && f != k {
			return h, fmt.Errorf("model: key %q: config keys are case-sensitive (valid: %s)", k, f)
		}
	}
	if err := json.Unmarshal(data, &h); err != nil {
		return h, fmt.Errorf("model: %v", jsonWords(err))
	}
	return h, nil
}

// jsonWords says a JSON decoding error in the config's words: the field,
// the value it holds and what the field takes, not Go's types.
func jsonWords(err error) string {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te):
		want := map[reflect.Kind]string{reflect.Int: "a whole number", reflect.Float64: "a number", reflect.Bool: "true or false",
			reflect.String: "a string", reflect.Map: "an object"}[te.Type.Kind()]
		if want == "" {
			want = "another kind of value"
		}
		field := te.Field
		if field == "" {
			return fmt.Sprintf("a JSON %s at byte %d where the config holds an object (valid: one JSON object of transformers' fields)", te.Value, te.Offset)
		}
		return fmt.Sprintf("%s: a JSON %s (valid: %s)", field, te.Value, want)
	case errors.As(err, &se):
		return fmt.Sprintf("%v at byte %d", se, se.Offset)
	}
	return err.Error()
}

// need reads required integer fields, naming the first one missing.
func need(fields ...any) error {
	for i := 0; i+1 < len(fields); i += 2 {
		if p := fields[i+1].(*int); p == nil {
			return fmt.Errorf("model: no %s: the config does not give the shape", fields[i])
		}
	}
	return nil
}

// refuse names a field whose value trainmem cannot honour.
func refuse(field string, value any, why string) error {
	return fmt.Errorf("model: %s %v: %s", field, value, why)
}

// epsOf is a norm's ε from a config, which must be one the kernels take
// (a positive float32).
func epsOf(field string, v *float64, def float64) (float64, error) {
	if v == nil {
		return def, nil
	}
	if !(*v > 0 && *v < 1 && float32(*v) > 0) {
		return 0, refuse(field, *v, "not a norm's ε (valid: above 0, below 1)")
	}
	return *v, nil
}

func (h hfConfig) gpt2() (Config, error) {
	if err := need("n_layer", h.NLayer, "n_embd", h.NEmbd, "n_head", h.NHead, "vocab_size", h.VocabSize, "n_positions", h.NPositions); err != nil {
		return Config{}, err
	}
	c := Config{Layers: *h.NLayer, Hidden: *h.NEmbd, Heads: *h.NHead, Vocab: *h.VocabSize, Context: *h.NPositions}
	if h.NInner != nil {
		if *h.NInner <= 0 {
			return Config{}, refuse("n_inner", *h.NInner, "not an MLP width (valid: a positive width, or null for 4·n_embd)")
		}
		c.FFN = *h.NInner
	}
	if h.ScaleWeights != nil && !*h.ScaleWeights {
		return Config{}, refuse("scale_attn_weights", false, "trainmem's attention divides the scores by sqrt(head size) (valid: true)")
	}
	if h.Tie != nil {
		c.Untied = !*h.Tie
	}
	if h.Activation != nil && *h.Activation != "gelu_new" && *h.Activation != "gelu_pytorch_tanh" {
		return Config{}, refuse("activation_function", *h.Activation, "trainmem's GELU is the tanh approximation (valid: gelu_new, gelu_pytorch_tanh)")
	}
	for _, f := range []struct {
		name string
		v    *bool
	}{{"scale_attn_by_inverse_layer_idx", h.ScaleByLayer}, {"reorder_and_upcast_attn", h.ReorderUpcast}, {"add_cross_attention", h.CrossAttention}} {
		if f.v != nil && *f.v {
			return Config{}, refuse(f.name, true, "not GPT-2's attention as trainmem builds it (valid: false)")
		}
	}
	var err error
	if c.NormEps, err = epsOf("layer_norm_epsilon", h.LayerNormEps, LayerNormEps); err != nil {
		return Config{}, err
	}
	return c, nil
}

func (h hfConfig) llama() (Config, error) {
	if err := need("hidden_size", h.Hidden, "intermediate_size", h.Intermediate, "num_hidden_layers", h.Layers,
		"num_attention_heads", h.Heads, "vocab_size", h.VocabSize, "max_position_embeddings", h.MaxPositions); err != nil {
		return Config{}, err
	}
	// The counts a divisor rule reads are in range first: a huge head count
	// would make the rule's list of divisors the work of minutes.
	for _, f := range []struct {
		name string
		v    *int
	}{{"hidden_size", h.Hidden}, {"num_attention_heads", h.Heads}, {"num_key_value_heads", h.KVHeads}} {
		if f.v != nil && *f.v > MaxHidden {
			return Config{}, refuse(f.name, *f.v, fmt.Sprintf("out of range (valid: 1 to %s)", Comma(MaxHidden)))
		}
	}
	c := Config{Layers: *h.Layers, Hidden: *h.Hidden, Heads: *h.Heads, Vocab: *h.VocabSize, Context: *h.MaxPositions,
		Norm: NormRMS, NoBias: true, MLP: MLPSwiGLU, FFN: *h.Intermediate, Positions: PosRoPE, Untied: true}
	if h.Tie != nil {
		c.Untied = !*h.Tie
	}
	kv := *h.Heads // LlamaConfig's default: multi-head
	if h.ModelType == "mistral" {
		kv = 8 // MistralConfig's default
	}
	if h.KVHeads != nil {
		kv = *h.KVHeads
	}
	window := -1 // none
	if h.ModelType == "mistral" {
		window = 4096 // MistralConfig's default
	}
	switch {
	case string(h.SlidingWindow) == "null":
		window = -1
	case h.SlidingWindow != nil:
		if err := json.Unmarshal(h.SlidingWindow, &window); err != nil || window <= 0 {
			return Config{}, refuse("sliding_window", string(h.SlidingWindow), "not a window (valid: null or a number of positions)")
		}
	}
	// Both biases are the all-biased linear layers trainmem has.
	attnBias, mlpBias := h.AttentionBias != nil && *h.AttentionBias, h.MLPBias != nil && *h.MLPBias
	switch {
	case *h.Heads <= 0:
		return Config{}, refuse("num_attention_heads", *h.Heads, "not a head count (valid: a positive divisor of hidden_size)")
	case *h.Intermediate <= 0:
		return Config{}, refuse("intermediate_size", *h.Intermediate, "not an MLP width (valid: a positive width)")
	case kv <= 0 || *h.Heads%kv != 0:
		return Config{}, refuse("num_key_value_heads", kv, fmt.Sprintf("key and value heads must divide the query heads (valid: a divisor of num_attention_heads, %s)", divisors(*h.Heads)))
	case h.HeadDim != nil && *h.Hidden%*h.Heads == 0 && *h.HeadDim != *h.Hidden / *h.Heads:
		return Config{}, refuse("head_dim", *h.HeadDim, fmt.Sprintf("trainmem's heads are hidden_size/num_attention_heads wide (valid: %d)", *h.Hidden / *h.Heads))
	case h.HiddenAct != nil && *h.HiddenAct != "silu":
		return Config{}, refuse("hidden_act", *h.HiddenAct, "trainmem's SwiGLU gates by SiLU (valid: silu)")
	case h.RopeScaling != nil && string(*h.RopeScaling) != "null":
		return Config{}, refuse("rope_scaling", string(*h.RopeScaling), "trainmem's rotary angles are unscaled (valid: null)")
	case attnBias && !mlpBias:
		return Config{}, refuse("attention_bias", true, "the attention's projections would have biases and the MLP's none; trainmem's linear layers have biases all or none (valid: false, or mlp_bias true too)")
	case mlpBias && !attnBias:
		return Config{}, refuse("mlp_bias", true, "the MLP's projections would have biases and the attention's none (valid: false, or attention_bias true too)")
	case h.ModelType == "qwen2":
		return Config{}, fmt.Errorf("model: model_type qwen2: its q, k and v projections have biases and its other linear layers none, which trainmem's linear layers (biases all or none) cannot hold")
	case window >= 0 && window < *h.MaxPositions:
		return Config{}, refuse("sliding_window", window, fmt.Sprintf("trainmem's attention sees every earlier position (valid: null, or at least max_position_embeddings, %d)", *h.MaxPositions))
	}
	c.NoBias = !(attnBias && mlpBias)
	c.KVHeads = kv
	c.RopeTheta = DefaultRopeTheta
	if h.RopeTheta != nil {
		if !(*h.RopeTheta > 1) || math.IsInf(*h.RopeTheta, 0) {
			return Config{}, refuse("rope_theta", *h.RopeTheta, "not a rotary base (valid: above 1)")
		}
		c.RopeTheta = *h.RopeTheta
	}
	var err error
	// transformers' LlamaConfig defaults rms_norm_eps to 1e-6.
	if c.NormEps, err = epsOf("rms_norm_eps", h.RMSNormEps, 1e-6); err != nil {
		return Config{}, err
	}
	return c, nil
}
