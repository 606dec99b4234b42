package bench

// What every report shares: the JSON documents of the model and the setup
// (keys are stable: programs read them), the one-line descriptions of the
// text reports, and the writers.

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"trainmem/model"
)

// The JSON document. Keys are stable: programs read them.
type (
	modelDoc struct {
		Name    string `json:"name"`
		Layers  int    `json:"layers,omitempty"`
		Hidden  int    `json:"hidden,omitempty"`
		Heads   int    `json:"heads,omitempty"`
		KVHeads int    `json:"kv_heads,omitempty"` // the key and value heads (model.Config.KV)
		Vocab   int    `json:"vocab,omitempty"`
		Context int    `json:"context,omitempty"`
		Tied    *bool  `json:"tied,omitempty"`
		// Norm and LinearBiases are the architecture (model.Config.Norm,
		// NoBias); absent for a bare parameter count.
		Norm         string  `json:"norm,omitempty"`
		LinearBiases *bool   `json:"linear_biases,omitempty"`
		MLP          string  `json:"mlp,omitempty"`
		FFN          int     `json:"ffn,omitempty"`
		Positions    string  `json:"positions,omitempty"`
		RopeTheta    float64 `json:"rope_theta,omitempty"` // with rotary positions
		Attention    string  `json:"attention,omitempty"`
		Params       int64   `json:"params"`
		// A fine-tune's: the parameters it trains, what it freezes, its
		// LoRA and how it stores its frozen linear weights; absent for a
		// model trained whole.
		Trained  *int64   `json:"trained_params,omitempty"`
		Freeze   string   `json:"freeze,omitempty"`
		LoRA     *loraDoc `json:"lora,omitempty"`
		Quantize string   `json:"quantize,omitempty"`
	}
	loraDoc struct {
		Rank    int      `json:"r"`
		Alpha   float64  `json:"alpha"`
		Targets []string `json:"target_modules"`
		RSLoRA  bool     `json:"use_rslora,omitempty"`
	}
	setupDoc struct {
		Batch            int    `json:"batch,omitempty"`
		Seq              int    `json:"seq,omitempty"`
		Precision        string `json:"precision"`
		Optimizer        string `json:"optimizer"`
		Checkpoint       string `json:"checkpoint,omitempty"`
		Ranks            int    `json:"ranks"`
		ZeRO             int    `json:"zero"`
		TP               int    `json:"tp"`
		PP               int    `json:"pp"`
		SequenceParallel bool   `json:"sequence_parallel"`
		MicroBatches     int    `json:"micro_batches,omitempty"`
		Schedule         string `json:"schedule,omitempty"`
		MainGrads        string `json:"main_grads,omitempty"`
		Offload          string `json:"offload,omitempty"`
	}
	pcieDoc struct {
		ToHost   int64 `json:"to_host_bytes"`
		ToDevice int64 `json:"to_device_bytes"`
	}
	rankDoc struct {
		Params int64 `json:"params"` // parameters held before ZeRO sharding
		Stage  int   `json:"stage"`  // reported pipeline stage, 0 first
	}
	statesDoc struct {
		Params int64 `json:"params"`
		Grads  int64 `json:"grads"`
		Master int64 `json:"master"`
		AdamM  int64 `json:"adam_m"`
		AdamV  int64 `json:"adam_v"`
		Frozen int64 `json:"frozen,omitempty"` // a fine-tune's frozen weights
		// QuantState is the quantized frozen weights' scales (--quantize).
		QuantState int64 `json:"quant_state,omitempty"`
		Total      int64 `json:"total"`
	}
	recomputeDoc struct {
		Policy         string  `json:"policy"`
		SegmentLayers  int     `json:"segment_layers"`
		ForwardFLOPs   float64 `json:"forward_flops"`
		StepFLOPs      float64 `json:"step_flops"`
		RecomputeFLOPs float64 `json:"recompute_flops"`
		Fraction       float64 `json:"fraction"`
	}
	// policyDoc is one checkpoint policy of the comparison: its activations
	// by formula and its recompute share, the rest of the setup unchanged.
	policyDoc struct {
		Policy            string                  `json:"policy"`
		SegmentLayers     int                     `json:"segment_layers"`
		Activations       map[model.Formula]int64 `json:"activations"`
		RecomputeFraction float64                 `json:"recompute_fraction"`
		// StepMs is the formula's step time under the policy, with
		// --gpu (0: none asked).
		StepMs float64 `json:"step_ms,omitempty"`
	}
	commDoc struct {
		Collective string `json:"collective"`
		Elements   int64  `json:"elements"`
		Bytes      int64  `json:"bytes"`
		RingBytes  int64  `json:"ring_bytes"`
		DType      string `json:"dtype"`
	}
	estimateJSON struct {
		Model       modelDoc  `json:"model"`
		Setup       setupDoc  `json:"setup"`
		Rank        rankDoc   `json:"rank"`
		ModelStates statesDoc `json:"model_states"`
		// Offloaded is the model states in host memory and PCIe the
		// step's copies, under optimizer offload.
		Offloaded       *statesDoc                         `json:"offloaded_states,omitempty"`
		PCIe            *pcieDoc                           `json:"pcie,omitempty"`
		Gathered        int64                              `json:"gathered"`
		Activations     map[model.Formula]int64            `json:"activations"`
		ActivationTerms map[model.Formula]map[string]int64 `json:"activation_terms"`
		// NoDropout is each formula that counts dropout masks without them
		// (model.Activations.NoDropout): korthikanti's no-dropout variant.
		NoDropout     map[model.Formula]int64 `json:"activations_no_dropout,omitempty"`
		Sources       map[string]string       `json:"sources"`
		Recompute     *recomputeDoc           `json:"recompute,omitempty"`
		Policies      []policyDoc             `json:"checkpoint_policies,omitempty"`
		Communication commDoc                 `json:"communication"`
		// Estimators are DeepSpeed's and Megatron-LM's (the estimate's).
		Estimators *estimatorsJSON `json:"estimators,omitempty"`
		// StepTime is the formula's step time on --gpu's card.
		StepTime   *stepTimeDoc     `json:"step_time,omitempty"`
		Totals     map[string]int64 `json:"totals"`
		Formula    model.Formula    `json:"formula"`
		TotalBytes int64            `json:"total_bytes"`
	}
)

func modelDocOf(s model.Setup) modelDoc {
	if s.ParamsOnly() {
		return modelDoc{Name: "params-only", Params: s.Params}
	}
	m := s.Model
	tied, biases := !m.Untied, !m.NoBias
	d := modelDoc{Name: m.Name, Layers: m.Layers, Hidden: m.Hidden, Heads: m.Heads, KVHeads: m.KV(), Vocab: m.Vocab, Context: m.Context, Tied: &tied,
		Norm: m.Norm.String(), LinearBiases: &biases, MLP: m.MLP.String(), FFN: m.FFNWidth(), Positions: m.Positions.String(), Attention: m.Attention.String(), Params: m.NumParams()}
	if m.Positions == model.PosRoPE {
		d.RopeTheta = m.Theta()
	}
	if n := m.NumTrained(); n != d.Params {
		d.Trained = &n
	}
	if m.Freeze.Any() {
		d.Freeze = m.Freeze.String()
	}
	if l := m.LoRA; l.On() {
		d.LoRA = &loraDoc{Rank: l.Rank, Alpha: l.Alpha, Targets: l.Targets.Names(m), RSLoRA: l.RSLoRA}
	}
	if m.Quantize != model.QuantNone {
		d.Quantize = m.Quantize.String()
	}
	return d
}

func setupDocOf(s model.Setup) setupDoc {
	d := setupDoc{Precision: s.Precision.String(), Optimizer: s.Optimizer.String(), Ranks: s.Ranks, ZeRO: s.ZeRO, TP: s.TP, PP: s.PP, SequenceParallel: s.SequenceParallel}
	if !s.ParamsOnly() {
		d.Batch, d.Seq, d.Checkpoint = s.Batch, s.Seq, s.Checkpoint.String()
	}
	if s.MicroBatches > 1 || s.PP > 1 {
		d.MicroBatches = max(s.MicroBatches, 1)
	}
	if s.PP > 1 {
		d.Schedule = s.Pipeline.String()
	}
	if s.MainGrads != model.GradsLikeWeights {
		d.MainGrads = s.MainGrads.String()
	}
	if s.Offload != model.OffloadNone {
		d.Offload = s.Offload.String()
	}
	return d
}

// Report is what every report of this package is: text for people, JSON
// with exact bytes for programs.
type Report interface {
	WriteText(w io.Writer) error
	WriteJSON(w io.Writer) error
}

// CSVReport is a report with a CSV writer too.
type CSVReport interface {
	Report
	WriteCSV(w io.Writer) error
}

var (
	_ CSVReport = (*EstimateReport)(nil)
	_ CSVReport = (*FitReport)(nil)
	_ Report    = (*SimulateReport)(nil)
	_ Report    = (*ValidateReport)(nil)
	_ Report    = (*SweepReport)(nil)
)

// writeJSON writes v indented, as every report's WriteJSON does.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// describe is the setup in one line, for the text reports.
func describe(s model.Setup) string {
	var b strings.Builder
	prec := precisionPhrase(s)
	if !s.ParamsOnly() {
		fmt.Fprintf(&b, "micro-batch %d, sequence %d, ", s.Batch, s.Seq)
	}
	fmt.Fprintf(&b, "%s, %s", prec, s.Optimizer)
	if !s.ParamsOnly() {
		fmt.Fprintf(&b, ", checkpoint %s", s.Checkpoint)
	}
	fmt.Fprintf(&b, "; %s, ZeRO-%d", plural(s.Ranks, "data-parallel rank"), s.ZeRO)
	if !s.ParamsOnly() {
		fmt.Fprintf(&b, ", tp %d, pp %d", s.TP, s.PP)
		if s.SequenceParallel && s.TP > 1 {
			b.WriteString(", sequence parallel")
		}
	}
	return b.String()
}

// precisionPhrase is the setup's precision in words: "fp16 mixed
// precision", with ", fp32 main gradients" when it keeps them.
func precisionPhrase(s model.Setup) string {
	prec := s.Precision.String()
	if s.Precision.Mixed() {
		prec += " mixed precision"
	}
	if s.MainGrads == model.GradsFP32 {
		prec += ", fp32 main gradients"
	}
	if s.Offload != model.OffloadNone {
		prec += ", the optimizer offloaded to host memory"
	}
	return prec
}

// mainGradsNote says, for a setup that keeps fp32 main gradients under
// mixed precision, how the formulas count them; "" otherwise.
func mainGradsNote(s model.Setup) string {
	if s.MainGrads != model.GradsFP32 || !s.Precision.Mixed() {
		return ""
	}
	return "fp32 main gradients (--main-grads fp32): the formulas' model states count the gradients at 4 bytes a parameter, as the ranks keep them, where the ZeRO paper's 16-bit ones take 2"
}

// modelLine is the model in one line.
func modelLine(s model.Setup) string {
	if s.ParamsOnly() {
		return fmt.Sprintf("%s parameters (no shape: model states only)", model.Comma(s.Params))
	}
	return s.Model.String()
}

// sizeCells is a byte figure as table cells: exact bytes, GB, GiB.
func sizeCells(n int64) []string { return []string{model.Comma(n), model.GB(n), model.GiB(n)} }

// row joins a name and cells.
func row(name string, cells ...[]string) []string {
	r := []string{name}
	for _, c := range cells {
		r = append(r, c...)
	}
	return r
}

// policyName is the policy as the tables show it: sqrt with its K.
func policyName(p model.Checkpoint, s model.Setup) string {
	if s.ParamsOnly() {
		return "model states"
	}
	if p.Kind == model.CheckpointSqrt {
		_, first := model.StageBlocks(s.Model.Layers, s.PP, 0) // the first stage's blocks
		return fmt.Sprintf("sqrt (every:%d)", p.Segment(first))
	}
	return p.String()
}

// plural is "1 rank", "8 ranks".
func plural[N int | int64](n N, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%s %ss", model.Comma(int64(n)), thing)
}

// statesDocOf is a rank's model states as the JSON reports write them.
func statesDocOf(st model.States) statesDoc {
	return statesDoc{st.Params, st.Grads, st.Master, st.AdamM, st.AdamV, st.Frozen, st.QuantState, st.Total()}
}
