package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"trainmem/cuda"
	"trainmem/cuda/host"
	"trainmem/cuda/shape"
	"trainmem/model"
	"trainmem/model/reference"
	"trainmem/train"
	"trainmem/zero"
)

// checked is s checked, as the layers above give it.
var checked = reference.Checked

// runOf is the Options of a run of c: steps steps, the allocator's events
// to tr when it is not nil, under set.
func runOf(c model.Checked, steps int, tr *MemoryTrace, set zero.Setting) Options {
	o := Options{Setting: set}
	o.Setup, o.Steps = c, steps
	if tr != nil {
		o.Trace = tr
	}
	return o
}

func setup(t testing.TB, preset string, B, T int, prec model.Precision, opt model.Optimizer, pol string) model.Setup {
	t.Helper()
	c, err := model.Preset(preset)
	if err != nil {
		t.Fatal(err)
	}
	cp, err := model.ParseCheckpoint(pol)
	if err != nil {
		t.Fatal(err)
	}
	s := model.Setup{Model: c, Batch: B, Seq: T, Precision: prec, Optimizer: opt, Checkpoint: cp, Ranks: 1, TP: 1, PP: 1}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	return s
}

// Validate on tiny: every row is there, the measured host run equals the
// simulation in every row to the byte, the implementation-exact formula
// equals both for activations, and every difference has its line.
func TestValidateTiny(t *testing.T) {
	for _, pol := range []string{"none", "full", "selective"} {
		t.Run(pol, func(t *testing.T) {
			s := setup(t, "tiny", 8, 64, model.FP16, model.Adam, pol)
			r, err := Validate(context.Background(), on(reference.NewHost(t)), runOf(checked(t, s), 2, nil, zero.Setting{}))
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, row := range r.Rows {
				names = append(names, row.Category)
				if row.Simulated == nil || row.Measured == nil {
					t.Fatalf("%s: simulated %v, measured %v", row.Category, row.Simulated, row.Measured)
				}
				if *row.Simulated != *row.Measured {
					t.Errorf("%s: simulated %d bytes, measured %d", row.Category, *row.Simulated, *row.Measured)
				}
				for _, f := range r.Formulas {
					if _, ok := row.Estimate[f]; !ok {
						t.Errorf("%s: no estimate key %q", row.Category, f)
					}
				}
			}
			var want []string // no context row on the host; gathered and comm only when a rank gathers, frozen when a fine-tune freezes, quant_state when it quantizes
			for _, name := range rowOrder[:len(rowOrder)-1] {
				if name != cuda.Gathered.String() && name != cuda.Comm.String() && name != cuda.Frozen.String() && name != cuda.QuantState.String() {
					want = append(want, name)
				}
			}
			if strings.Join(names, ",") != strings.Join(want, ",") {
				t.Errorf("rows %v, want %v", names, want)
			}
			act := r.Row(cuda.Activations.String())
			if *act.Estimate[model.Exact] != *act.Simulated {
				t.Errorf("activations: trainmem formula %d, simulated %d", *act.Estimate[model.Exact], *act.Simulated)
			}
			if r.Row("temporaries").Estimate[model.Korthikanti] != nil {
				t.Error("temporaries: a formula value where no formula says anything")
			}
			peak := r.Row(RowTotalPeak)
			if *peak.Simulated != r.SimulatedStats.AllocatedBytes.Peak || *peak.Simulated <= *act.Simulated {
				t.Errorf("total peak %d: want the peak allocated, above the activations' %d", *peak.Simulated, *act.Simulated)
			}
			text := strings.Join(r.Explanations, "\n")
			for _, w := range []string{
				"activations, zero_paper", "activations, korthikanti", "equal to the simulation byte for byte",
				"dropout masks", "attention scores", "layer-norm statistics", "token ids and targets",
				"temporaries:", "workspace:", "total peak:", "reserved − allocated:", "= simulated, byte for byte, in every row",
			} {
				if !strings.Contains(text, w) {
					t.Errorf("explanations lack %q:\n%s", w, text)
				}
			}
			for _, bad := range []string{"unclassified", "between trainmem's formula and the simulation", "NOT"} {
				if strings.Contains(text, bad) {
					t.Errorf("explanations contain %q:\n%s", bad, text)
				}
			}
			var b bytes.Buffer
			if err := r.WriteText(&b); err != nil {
				t.Fatal(err)
			}
			for _, w := range []string{"category", "zero_paper", "korthikanti", "trainmem", "simulated", "measured", "why they differ", "total peak (allocated)"} {
				if !strings.Contains(b.String(), w) {
					t.Errorf("text lacks %q", w)
				}
			}
		})
	}
}

// Model states from requested bytes: mixed-precision Adam exactly 16 bytes
// a parameter (2 + 2 + 4 + 4 + 4), fp32 Adam 16 (4 + 4 + 4 + 4), fp32 SGD 8
// (4 + 4), simulated and measured; the allocator's rounding on its own row.
func TestModelStatesBytesPerParameter(t *testing.T) {
	for _, tc := range []struct {
		prec  model.Precision
		opt   model.Optimizer
		grads model.MainGrads
		per   map[string]int64
	}{
		{model.FP16, model.Adam, 0, map[string]int64{"params": 2, "grads": 2, "master": 4, "adam_m": 4, "adam_v": 4}},
		{model.BF16, model.AdamW, 0, map[string]int64{"params": 2, "grads": 2, "master": 4, "adam_m": 4, "adam_v": 4}},
		{model.FP32, model.Adam, 0, map[string]int64{"params": 4, "grads": 4, "master": 0, "adam_m": 4, "adam_v": 4}},
		{model.FP32, model.SGD, 0, map[string]int64{"params": 4, "grads": 4, "master": 0, "adam_m": 0, "adam_v": 0}},
		// fp32 main gradients (Megatron-LM's main_grad): 18 bytes a
		// parameter under mixed precision, exactly 2 more; fp32 training
		// keeps fp32 gradients already.
		{model.FP16, model.Adam, model.GradsFP32, map[string]int64{"params": 2, "grads": 4, "master": 4, "adam_m": 4, "adam_v": 4}},
		{model.BF16, model.AdamW, model.GradsFP32, map[string]int64{"params": 2, "grads": 4, "master": 4, "adam_m": 4, "adam_v": 4}},
		{model.FP32, model.Adam, model.GradsFP32, map[string]int64{"params": 4, "grads": 4, "master": 0, "adam_m": 4, "adam_v": 4}},
	} {
		name := fmt.Sprintf("%s/%s/main-grads=%s", tc.prec, tc.opt, tc.grads)
		t.Run(name, func(t *testing.T) {
			// 3 layers of width 40: Φ = 70,760 is no multiple of 128, so
			// the 512-byte blocks must round some state up.
			s := model.Setup{Model: model.Config{Name: "odd", Layers: 3, Hidden: 40, Heads: 4, Vocab: 256, Context: 32},
				Batch: 2, Seq: 32, Precision: tc.prec, Optimizer: tc.opt, Ranks: 1, TP: 1, PP: 1, MainGrads: tc.grads}
			phi := s.Model.NumParams()
			r, err := Validate(context.Background(), on(reference.NewHost(t)), runOf(checked(t, s), 2, nil, zero.Setting{}))
			if err != nil {
				t.Fatal(err)
			}
			var total int64
			for c, per := range tc.per {
				row := r.Row(c)
				total += per
				for what, v := range map[string]*int64{"simulated": row.Simulated, "measured": row.Measured, "estimate": row.Estimate[model.Korthikanti]} {
					if *v != per*phi {
						t.Errorf("%s %s: %d bytes, want %d·Φ = %d", c, what, *v, per, per*phi)
					}
				}
			}
			states := r.Row(RowModelStates)
			if *states.Measured != total*phi || *states.Simulated != total*phi {
				t.Errorf("model states %d measured, %d simulated; want %d·Φ = %d", *states.Measured, *states.Simulated, total, total*phi)
			}
			var rounded int64
			for _, c := range []cuda.Category{cuda.Params, cuda.Grads, cuda.Master, cuda.AdamM, cuda.AdamV} {
				rounded += r.MeasuredStats.CategoryAllocated[c].Current - r.MeasuredStats.CategoryRequested[c].Current
			}
			if rounded <= 0 || rounded >= 5*512 {
				t.Errorf("the five state buffers round up by %d bytes, want 1 to 2559 (at most 511 each)", rounded)
			}
			if rr := r.Row(RowRounding); *rr.Measured < rounded {
				t.Errorf("rounding row %d, below the states' own %d", *rr.Measured, rounded)
			}
			t.Logf("%s: %d·Φ = %d bytes requested; allocator blocks round them up by %d", name, total, total*phi, rounded)
		})
	}
}

// Each formula's split by kind of tensor (model.ByKind, from the terms'
// parts) matches the kinds worked out from the papers' per-layer counts: the
// ZeRO paper's 12·s·b·h values a layer; Korthikanti's 16·s·b·h values, two
// a·s²·b·e score tensors and 2·s·b·h + a·s²·b bytes of masks a layer, one
// s·b·h mask after the embedding, 2·e·s·b·h + 4·s·b·V outside the layers;
// and trainmem's kinds hold whole tensors of their unit. Every byte is
// attributed, so the explanation lines sum to the gap, for every preset
// shape, precision and policy.
func TestExplanationKinds(t *testing.T) {
	n := 0
	for _, sh := range []struct {
		preset string
		B, T   int
	}{{"tiny", 8, 64}, {"tiny", 3, 17}, {"gpt2", 4, 256}, {"gpt2-xl", 32, 1000}, {"6b", 1, 2048}} {
		for _, prec := range []model.Precision{model.FP32, model.FP16, model.BF16} {
			for _, pol := range []string{"none", "selective", "full", "every:2", "sqrt"} {
				s := setup(t, sh.preset, sh.B, sh.T, prec, model.Adam, pol)
				e, err := s.Estimate()
				if err != nil {
					t.Fatal(err)
				}
				name := fmt.Sprintf("%s b=%d s=%d %s %s", sh.preset, sh.B, sh.T, prec, pol)
				d := dimsOf(s)
				var zero, korth [model.NumTensorKinds]int64
				if d.k > 0 {
					zero[model.Checkpoints] = ceilDiv(d.L, d.k) * d.nh
					zero[model.LayerValues] = d.k * 12 * d.nh
				} else {
					zero[model.LayerValues] = d.L * 12 * d.nh
				}
				masks := 2*d.sbh + d.as2b
				switch {
				case s.Checkpoint.Kind == model.CheckpointSelective:
					korth[model.LayerValues] = d.L * 16 * d.nh
					korth[model.Masks] = d.L*2*d.sbh + d.as2b
					korth[model.Scores] = 2 * d.P
				case d.k > 0:
					korth[model.Checkpoints] = ceilDiv(d.L, d.k) * d.nh
					korth[model.LayerValues] = d.k * 16 * d.nh
					korth[model.Scores] = d.k * 2 * d.P
					korth[model.Masks] = d.k * masks
				default:
					korth[model.LayerValues] = d.L * 16 * d.nh
					korth[model.Scores] = d.L * 2 * d.P
					korth[model.Masks] = d.L * masks
				}
				korth[model.Masks] += d.sbh
				korth[model.Outside] = 2*d.nh + 4*d.N*d.V
				tk, _ := formulaKinds(e, model.Exact)
				var sum int64
				unit := map[model.TensorKind]int64{model.LayerValues: d.nh, model.Scores: d.P, model.Statistics: 8 * d.N, model.Checkpoints: d.nh, model.TokenIDs: 4 * d.N}
				for k, kt := range tk.by {
					sum += kt.Bytes
					if u, ok := unit[model.TensorKind(k)]; ok && kt.Bytes != kt.Count*u {
						t.Errorf("%s: trainmem's kind %d holds %d bytes, not its %d tensors of %d", name, k, kt.Bytes, kt.Count, u)
					}
				}
				if tk.other != 0 || sum != e.ActivationBytes(model.Exact) {
					t.Errorf("%s: trainmem's terms split with %d bytes unclassified", name, tk.other)
				}
				for _, f := range []model.Formula{model.ZeROPaper, model.Korthikanti} {
					want := map[model.Formula][model.NumTensorKinds]int64{model.ZeROPaper: zero, model.Korthikanti: korth}[f]
					fk, _ := formulaKinds(e, f)
					if fk.other != 0 {
						t.Errorf("%s: %s's split leaves %d bytes unclassified", name, f, fk.other)
					}
					var gap int64
					for k := range model.NumTensorKinds {
						gap += fk.by[k].Bytes - tk.by[k].Bytes
						if fk.by[k].Bytes != want[k] {
							t.Errorf("%s: %s: kind %d holds %d bytes, the paper's count is %d", name, f, k, fk.by[k].Bytes, want[k])
						}
					}
					if want := e.ActivationBytes(f) - e.ActivationBytes(model.Exact); gap != want {
						t.Errorf("%s: %s: kinds sum to %d, the gap is %d", name, f, gap, want)
					}
				}
				n++
			}
		}
	}
	t.Logf("%d setups", n)
}

// ceilDiv is ⌈a/b⌉.
func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// Not measuring still simulates and explains; tensor parallelism is refused.
func TestValidateWithoutMeasuring(t *testing.T) {
	s := setup(t, "gpt2-xl", 32, 1000, model.FP16, model.Adam, "full")
	r, err := Validate(context.Background(), nil, runOf(checked(t, s), 0, nil, zero.Setting{}))
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range r.Rows {
		if row.Measured != nil {
			t.Errorf("%s: measured %d without a device", row.Category, *row.Measured)
		}
	}
	if !strings.Contains(strings.Join(r.Explanations, "\n"), "not measured") {
		t.Error("no line says nothing was measured")
	}
	// Over ranks the same call validates every simulated rank, and a
	// pipeline's stages; a parameter count alone is refused.
	s.Ranks = 4
	r, err = Validate(context.Background(), nil, runOf(checked(t, s), 0, nil, zero.Setting{}))
	if err != nil || len(r.SimulatedRanks) != 4 || r.MeasuredRanks != nil || r.Rows != nil {
		t.Errorf("4 ranks: %v", err)
	}
	s.Ranks, s.PP, s.MicroBatches = 1, 2, 3
	r, err = Validate(context.Background(), nil, runOf(checked(t, s), 0, nil, zero.Setting{}))
	if err != nil || len(r.SimulatedRanks) != 2 || r.SimulatedRanks[0].Record.InFlight != 2 || r.SimulatedRanks[1].Record.InFlight != 1 {
		t.Errorf("pp 2 of 3 micro-batches: %v, want its two stages simulated, 2 and 1 micro-batches in flight", err)
	}
}

// validate of dp × tp × pp layouts measured on host ranks in one process:
// every rank's categories and traffic (by group) simulated = measured, and
// the trainmem formula of each rank's part equal to its activations; the
// tensor ranks of a 5-way split of a vocabulary of 256 (rank 0 one row
// more) are each held to their own part, and so is every pipeline stage
// (its blocks, its ends, its micro-batches in flight).
func TestValidateTensorParallel(t *testing.T) {
	for _, tc := range []struct {
		cfg        model.Config
		tp, dp, pp int
		set        zero.Setting
		ck         model.CheckpointKind
	}{
		{model.Config{Name: "t", Layers: 2, Hidden: 64, Heads: 4, Vocab: 256, Context: 64}, 2, 2, 1, zero.Setting{Stage: 1}, 0},
		{model.Config{Name: "t5", Layers: 2, Hidden: 80, Heads: 5, Vocab: 256, Context: 64}, 5, 1, 1, zero.Setting{}, 0},
		{model.Config{Name: "p3", Layers: 4, Hidden: 64, Heads: 4, Vocab: 256, Context: 64}, 1, 1, 3, zero.Setting{}, model.CheckpointFull},
		{model.Config{Name: "p2", Layers: 4, Hidden: 64, Heads: 4, Vocab: 256, Context: 64}, 2, 2, 2, zero.Setting{Stage: 1}, model.CheckpointSelective},
	} {
		s := model.Setup{Model: tc.cfg, Batch: 2, Seq: 16, Precision: model.BF16, Optimizer: model.AdamW, Ranks: tc.dp, ZeRO: tc.set.Stage, TP: tc.tp, PP: tc.pp,
			MicroBatches: 3, Checkpoint: model.Checkpoint{Kind: tc.ck}}
		where := &Where{New: func() (cuda.Device, error) { return host.New(host.Options{Threads: 1}) }}
		r, err := Validate(context.Background(), where, runOf(checked(t, s), 2, nil, tc.set))
		if err != nil {
			t.Fatal(err)
		}
		n := tc.tp * tc.dp * tc.pp
		if len(r.SimulatedRanks) != n || len(r.MeasuredRanks) != n || len(r.PartActivations) != tc.tp*tc.pp {
			t.Fatalf("tp %d dp %d pp %d: %d simulated, %d measured ranks, %d parts", tc.tp, tc.dp, tc.pp, len(r.SimulatedRanks), len(r.MeasuredRanks), len(r.PartActivations))
		}
		for i, sim := range r.SimulatedRanks {
			meas := r.MeasuredRanks[i]
			if sim.Stats != meas.Stats || sim.AxisTraffic != meas.AxisTraffic || sim.Traffic != meas.Traffic {
				t.Errorf("tp %d dp %d rank %d: simulated and measured differ", tc.tp, tc.dp, i)
			}
			if got, want := sim.Stats.CategoryRequested[cuda.Activations].Peak, r.PartActivations[r.partOf(sim.Rank)]; got != want {
				t.Errorf("tp %d dp %d rank %d: activations %d bytes, its part's formula %d", tc.tp, tc.dp, i, got, want)
			}
		}
		if tc.tp == 5 && r.PartActivations[0] <= r.PartActivations[1] {
			t.Errorf("a vocabulary of 256 over 5 ranks: rank 0's part keeps %d bytes, rank 1's %d: want rank 0's row more", r.PartActivations[0], r.PartActivations[1])
		}
		var text strings.Builder
		if err := r.WriteText(&text); err != nil {
			t.Fatal(err)
		}
		wants := []string{"trainmem (this rank's part)", "korthikanti (tensor parallel)", "group", "tensor"}
		if tc.pp > 1 {
			wants = []string{"trainmem (this rank's part)", "korthikanti (the heavier end stage)", "per pipeline stage", "pipeline"}
		}
		// Megatron-LM's theoretical memory of the layout (model's
		// TestMegatron holds it to Megatron-LM's code) beside rank 0's.
		m, err := r.Setup.Megatron()
		if err != nil {
			t.Fatal(err)
		}
		// A block as Megatron-LM counts it, 12h² + 4h (no biases; 49,408
		// at h 64), beside the table's 12h² + 13h (49,984).
		h := int64(tc.cfg.Hidden)
		wants = append(wants, "megatron counts the most loaded rank, the first stage", "  megatron, weights and optimizer  "+model.GiB(m.WeightsAndOptimizer), "  megatron, activations  "+model.GiB(m.Activations),
			fmt.Sprintf("no biases but the norms' (%s parameters a block, trainmem's %s), no position embeddings", model.Comma(12*h*h+4*h), model.Comma(12*h*h+13*h)))
		for _, want := range wants {
			if !strings.Contains(strings.Join(strings.Fields(text.String()), " "), strings.Join(strings.Fields(want), " ")) {
				t.Errorf("tp %d dp %d: the report lacks %q:\n%s", tc.tp, tc.dp, want, text.String())
			}
		}
		var js strings.Builder
		if err := r.WriteJSON(&js); err != nil {
			t.Fatal(err)
		}
		var doc struct {
			Estimators struct {
				Megatron struct {
					W int64 `json:"weights_and_optimizer_bytes"`
					A int64 `json:"activations_bytes"`
				} `json:"megatron"`
			} `json:"estimators"`
		}
		if err := json.Unmarshal([]byte(js.String()), &doc); err != nil || doc.Estimators.Megatron.W != m.WeightsAndOptimizer || doc.Estimators.Megatron.A != m.Activations {
			t.Errorf("tp %d dp %d: JSON megatron %+v, want %d and %d (%v)", tc.tp, tc.dp, doc.Estimators.Megatron, m.WeightsAndOptimizer, m.Activations, err)
		}
	}
}

// A measured run that the simulation shows cannot fit is refused before it
// starts, saying how much it needs.
func TestValidateTooLarge(t *testing.T) {
	h, err := host.New(host.Options{Capacity: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	s := setup(t, "tiny", 8, 64, model.FP32, model.Adam, "none") // reserves 10 MiB
	_, err = Validate(context.Background(), on(h), runOf(checked(t, s), 0, nil, zero.Setting{}))
	var tl *TooLargeError
	if !errors.As(err, &tl) || tl.Need != 10<<20 {
		t.Fatalf("got %v, want a TooLargeError needing 10 MiB", err)
	}
	t.Log(err)
}

// on is where a measured run runs on dev, one rank in this process.
func on(dev cuda.Device) *Where {
	return &Where{New: func() (cuda.Device, error) { return dev, nil }}
}

// gpuLike is a host whose MemInfo reads like a card's: the allocator's
// reserved bytes plus a context of ctxBytes.
type gpuLike struct {
	*host.Device
	ctxBytes int64
}

// MachineMemory: a card's memory is its own, not the machine's.
func (g gpuLike) MachineMemory() bool { return false }

func (g gpuLike) MemInfo() (free, total int64, err error) {
	total = 1 << 40
	return total - g.Stats().ReservedBytes.Current - g.ctxBytes, total, nil
}

// On a device whose used memory exceeds what its allocator reserved (a
// GPU), the report has a row for the context and libraries, and a line.
func TestContextRow(t *testing.T) {
	h, err := host.New(host.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	const ctx = 500 << 20
	s := setup(t, "tiny", 2, 16, model.BF16, model.Adam, "none")
	r, err := Validate(context.Background(), on(gpuLike{h, ctx}), runOf(checked(t, s), 2, nil, zero.Setting{}))
	if err != nil {
		t.Fatal(err)
	}
	row := r.Row(RowContext)
	if row == nil || row.Measured == nil || *row.Measured != ctx || row.Simulated != nil {
		t.Fatalf("context row %+v, want measured %d and nothing simulated", row, ctx)
	}
	if !strings.Contains(strings.Join(r.Explanations, "\n"), "CUDA context") {
		t.Error("no line explains the context")
	}
}

// The sweep on tiny: every policy, the measured activations equal the
// simulated and the implementation-exact formula's; full checkpointing
// keeps less than none and recomputes; the text has its bar charts and
// the plots are written.
func TestSweepTiny(t *testing.T) {
	s := setup(t, "tiny", 8, 64, model.FP32, model.Adam, "none")
	r, err := Sweep(context.Background(), func() (cuda.Device, error) { return host.New(host.Options{}) }, runOf(checked(t, s), 4, nil, zero.Setting{}))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"none", "selective", "full", "sqrt"}
	if len(r.Rows) != len(want) {
		t.Fatalf("%d rows, want %v", len(r.Rows), want)
	}
	by := map[string]SweepRow{}
	for i, row := range r.Rows {
		by[row.Policy] = row
		if row.Policy != want[i] {
			t.Errorf("row %d is %s, want %s", i, row.Policy, want[i])
		}
		if *row.Measured != row.Simulated || row.Estimate[model.Exact] != row.Simulated || *row.MeasuredPeak != row.SimulatedPeak {
			t.Errorf("%s: activations measured %d, simulated %d, trainmem %d; peaks %d and %d", row.Policy, *row.Measured, row.Simulated, row.Estimate[model.Exact], *row.MeasuredPeak, row.SimulatedPeak)
		}
		if row.StepMs == nil || !(*row.StepMs > 0) || row.Overhead == nil {
			t.Errorf("%s: step %v ms, overhead %v", row.Policy, row.StepMs, row.Overhead)
		}
	}
	if *by["none"].Overhead != 0 || *by["none"].RecomputeMs != 0 {
		t.Errorf("none: overhead %v, recompute %v ms; want 0 and 0", *by["none"].Overhead, *by["none"].RecomputeMs)
	}
	if !(by["full"].Simulated < by["none"].Simulated) || !(*by["full"].RecomputeMs > 0) || by["full"].RecomputeFraction <= 0 {
		t.Errorf("full: activations %d vs none's %d, recompute %v ms, FLOP fraction %v", by["full"].Simulated, by["none"].Simulated, *by["full"].RecomputeMs, by["full"].RecomputeFraction)
	}
	var b bytes.Buffer
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"activation memory", "step time", "█", "overhead", "recompute FLOPs"} {
		if !strings.Contains(b.String(), w) {
			t.Errorf("sweep text lacks %q:\n%s", w, b.String())
		}
	}
	dir := t.TempDir()
	for ext, magic := range map[string]string{".svg": "<?xml", ".png": "\x89PNG"} {
		p := filepath.Join(dir, "sweep"+ext)
		if err := r.Plot(p); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(p)
		if err != nil || !strings.HasPrefix(string(got), magic) {
			t.Errorf("%s: %v, starts %q", p, err, string(got[:min(len(got), 8)]))
		}
	}
	if err := r.Plot(filepath.Join(dir, "sweep.gif")); err == nil || !strings.Contains(err.Error(), ".svg") {
		t.Errorf("a .gif plot: %v, want an error naming the formats", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 2 {
		t.Errorf("%d files in the plot directory, want the 2 plots (no temporaries)", len(entries))
	}
}

func TestSweepPolicies(t *testing.T) {
	for _, tc := range []struct {
		layers int
		want   string
	}{
		{1, "none selective full sqrt"},
		{2, "none selective full sqrt"},
		{8, "none selective full sqrt every:2 every:4"},
		{12, "none selective full sqrt every:2 every:6"},
		{48, "none selective full sqrt every:2 every:24"},
	} {
		var got []string
		for _, p := range SweepPolicies(tc.layers) {
			got = append(got, p.String())
		}
		if strings.Join(got, " ") != tc.want {
			t.Errorf("%d layers: %v, want %s", tc.layers, got, tc.want)
		}
	}
}

func TestPercent(t *testing.T) {
	for _, tc := range []struct {
		a, b int64
		want string
	}{{5, 5, "0"}, {6, 5, "+20.0%"}, {4, 5, "−20.0%"}, {100001, 100000000, "−99.9%"}, {100000001, 100000000, "+0.000%"}, {1, 0, "-"}} {
		if got := Percent(tc.a, tc.b); got != tc.want {
			t.Errorf("Percent(%d, %d) = %q, want %q", tc.a, tc.b, got, tc.want)
		}
	}
}

// The explanation at a peak inside the backward pass, worked out by hand.
// Under every:3 on 8 blocks, blocks 3-5 recomputed hold 16·3 − 1 = 47
// values (the segment's last output already freed), 3 probabilities, and 2
// checkpoints (the embedding output and segment 1's input) where the
// formulas keep ceil(8/3) = 3. Under selective, with scores far larger than
// the head (16 heads, sequence 1024, 16 tokens), block 3's probabilities
// recomputed leave 16·3 + 4 values: the earlier blocks' 16 and this block's
// ln1 output and qkv.
func TestExplanationAtRecomputation(t *testing.T) {
	for _, tc := range []struct {
		cfg   model.Config
		B, T  int
		pol   string
		lines []string
	}{
		{model.Config{Name: "every3", Layers: 8, Hidden: 256, Heads: 8, Vocab: 256, Context: 256}, 8, 128, "every:3", []string{
			"peaking at the recomputation of blocks 3-5",
			"Korthikanti counts 16 values of s·b·h a layer × 3 layers = 48.00 MiB; trainmem holds 47 s·b·h tensors of 4-byte values = 47.00 MiB (16 a kept layer:",
			"the recomputed segment's last output is already freed",
			"Korthikanti keeps two a·s²·b·e copies a layer (the softmax output and its dropout output) × 3 = 24.00 MiB; trainmem keeps the probabilities once (no dropout) × 3 = 12.00 MiB",
			"the ZeRO paper keeps ceil(L/K) = 3 layer inputs (e·s·b·h each) = 3.00 MiB; trainmem holds 2 at its peak",
		}},
		{model.Config{Name: "scores", Layers: 4, Hidden: 64, Heads: 16, Vocab: 16, Context: 1024}, 1, 1024, "selective", []string{
			"peaking at the recomputation of block 3's attention probabilities",
			"trainmem holds 52 s·b·h tensors of 4-byte values",
			"of it remain the 4 values its attention probabilities are recomputed from (its ln1 output and qkv)",
		}},
	} {
		cp, err := model.ParseCheckpoint(tc.pol)
		if err != nil {
			t.Fatal(err)
		}
		s := model.Setup{Model: tc.cfg, Batch: tc.B, Seq: tc.T, Precision: model.FP32, Optimizer: model.Adam, Checkpoint: cp, Ranks: 1, TP: 1, PP: 1}
		r, err := Validate(context.Background(), nil, runOf(checked(t, s), 0, nil, zero.Setting{}))
		if err != nil {
			t.Fatal(err)
		}
		all := strings.Join(r.Explanations, "\n")
		for _, want := range tc.lines {
			if !strings.Contains(all, want) {
				t.Errorf("%s: no explanation says %q; they say:\n%s", tc.pol, want, all)
			}
		}
	}
}

// fit's simulated answer is the simulation's own: at that micro-batch
// simulate fits the card, one more and it runs out of memory, for one rank
// and for every simulated rank of a ZeRO-3 group, and with the optimizer or
// (at ZeRO-3; below it the optimizer alone) the weights offloaded.
func TestFitSimulatedIsSimulates(t *testing.T) {
	const memory = 24 << 20
	for _, tc := range []struct {
		ranks int
		off   model.Offload
	}{{1, model.OffloadNone}, {4, model.OffloadNone}, {1, model.OffloadOptimizer}, {1, model.OffloadParams}, {4, model.OffloadParams}} {
		ranks := tc.ranks
		s := setup(t, "tiny", 1, 64, model.BF16, model.Adam, "none")
		s.Ranks, s.Offload = ranks, tc.off
		if tc.off == model.OffloadParams {
			s.ZeRO = 3
		}
		rep, err := Fit(checked(t, s), memory, model.Korthikanti, false, model.Cluster{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range rep.cells {
			if c.simulated <= 0 {
				t.Fatalf("ranks %d, offload %s, %s ZeRO-%d: simulated %d", ranks, tc.off, c.policy, c.zero, c.simulated)
			}
			for _, b := range []int{c.simulated, c.simulated + 1} {
				u := s.AtStage(c.zero)
				u.Batch, u.Checkpoint = b, c.policy
				var err error
				if ranks == 1 && u.Offload != model.OffloadParams {
					_, _, err = train.Simulate(shape.New(memory), checked(t, u), 2, nil)
				} else {
					_, err = zero.Simulate(func() cuda.Device { return shape.New(memory) }, checked(t, u), zero.Setting{Stage: c.zero}, 2, nil)
				}
				var oom *cuda.OutOfMemoryError
				if fits := err == nil; fits != (b == c.simulated) || (err != nil && !errors.As(err, &oom)) {
					t.Errorf("ranks %d, offload %s, %s ZeRO-%d: fit says %d; micro-batch %d simulates with %v", ranks, u.Offload, c.policy, c.zero, c.simulated, b, err)
				}
			}
		}
	}
}

// fit --batch's simulated answer is the simulation's fewest ranks: one
// rank of that many fits the card, one rank of one fewer does not.
func TestFitSimulatedRanksAreSimulates(t *testing.T) {
	const memory = 3 << 20
	s := setup(t, "tiny", 8, 64, model.BF16, model.Adam, "none")
	s.Ranks = 2
	rep, err := Fit(checked(t, s), memory, model.Korthikanti, true, model.Cluster{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, c := range rep.cells {
		if c.simulated < 0 {
			t.Fatalf("%s ZeRO-%d: not simulated", c.policy, c.zero)
		}
		if c.simulated <= 1 {
			continue // one rank fits, or no count does
		}
		found = true
		for _, n := range []int{c.simulated, c.simulated - 1} {
			u := s
			u.Ranks, u.Checkpoint, u.ZeRO = n, c.policy, c.zero
			_, err := zero.SimulateRank(shape.New(memory), checked(t, u), zero.Setting{Stage: c.zero}, 0, 2)
			var oom *cuda.OutOfMemoryError
			if fits := err == nil; fits != (n == c.simulated) || (err != nil && !errors.As(err, &oom)) {
				t.Errorf("%s ZeRO-%d: fit says %d ranks; %d ranks simulate with %v", c.policy, c.zero, c.simulated, n, err)
			}
		}
	}
	if !found {
		t.Error("no cell needs more than one rank: the test says nothing")
	}
}

// fit --gpus is the simulation's own answer: a layout fits when every
// distinct rank of it simulates on a card of the memory, its heaviest
// rank is the one with the largest peak reserved, a layout whose every
// rank reserves at most the memory fits, and the smallest layout is the
// first that fits by tp × pp (then fewer stages); the formula's answer is
// its estimate against the memory; a layout the model cannot take says
// why. The memory is set between the layouts' peaks, so some fit and
// some do not.
func TestFitLayoutsAreSimulates(t *testing.T) {
	s := setup(t, "tiny", 4, 64, model.BF16, model.Adam, "none")
	s.Model.Layers, s.Model.Hidden, s.Model.Vocab = 4, 256, 4096 // peaks past the small pool's segments
	s.ZeRO = 1
	const gpus = 8
	simulate := func(tp, pp int, memory int64) ([]zero.RankResult, error) {
		u := s
		u.TP, u.PP, u.Ranks = tp, pp, gpus/(tp*pp)
		if pp > 1 {
			u.MicroBatches = pp
		}
		return zero.Simulate(func() cuda.Device { return shape.New(memory) }, checked(t, u), zero.Setting{Stage: 1}, 2, nil)
	}
	heaviest := func(rs []zero.RankResult) int64 {
		var most int64
		for _, r := range rs {
			most = max(most, r.Stats.ReservedBytes.Peak)
		}
		return most
	}
	peaks := map[[2]int]int64{}
	var all []int64
	for _, tp := range []int{1, 2, 4} {
		for _, pp := range []int{1, 2, 4} {
			if tp*pp > gpus {
				continue
			}
			rs, err := simulate(tp, pp, 0)
			if err != nil {
				t.Fatal(err)
			}
			peaks[[2]int{tp, pp}] = heaviest(rs)
			all = append(all, heaviest(rs))
		}
	}
	slices.Sort(all)
	memory := all[len(all)/2]
	rep, err := FitLayouts(checked(t, s), gpus, memory, model.Korthikanti, nil)
	if err != nil {
		t.Fatal(err)
	}
	var fits, fail, refused int
	var first *layoutCell
	for i, c := range rep.cells {
		if i > 0 && (c.degree() < rep.cells[i-1].degree() || (c.degree() == rep.cells[i-1].degree() && c.pp < rep.cells[i-1].pp)) {
			t.Errorf("layout %d (tp %d × pp %d) out of order", i, c.tp, c.pp)
		}
		peak, ok := peaks[[2]int{c.tp, c.pp}]
		if !ok {
			if c.why == "" || !(strings.Contains(c.why, "heads") || strings.Contains(c.why, "layers")) {
				t.Errorf("tp %d × pp %d: a layout of tiny? why %q", c.tp, c.pp, c.why)
			}
			refused++
			continue
		}
		if c.why != "" {
			t.Fatalf("tp %d × pp %d refused: %s", c.tp, c.pp, c.why)
		}
		_, err := simulate(c.tp, c.pp, memory)
		var oom *cuda.OutOfMemoryError
		if err != nil && !errors.As(err, &oom) {
			t.Fatal(err)
		}
		if c.simFits != (err == nil) || (peak <= memory && !c.simFits) {
			t.Errorf("tp %d × pp %d: fit says %v; its ranks reserve %d of %d and simulate on the card with %v", c.tp, c.pp, c.simFits, peak, memory, err)
		}
		if !c.simFits && c.heaviest.Stats.ReservedBytes.Peak != peak {
			t.Errorf("tp %d × pp %d: heaviest rank reserves %d, the ranks' most %d", c.tp, c.pp, c.heaviest.Stats.ReservedBytes.Peak, peak)
		}
		u := s
		u.TP, u.PP, u.Ranks = c.tp, c.pp, gpus/(c.tp*c.pp)
		e, err := u.EstimateBy(model.Korthikanti)
		if err != nil {
			t.Fatal(err)
		}
		if c.formulaFits != (e.Total(model.Korthikanti) <= memory) {
			t.Errorf("tp %d × pp %d: the formula's %d fits %d: %v", c.tp, c.pp, e.Total(model.Korthikanti), memory, c.formulaFits)
		}
		if c.simFits {
			fits++
			if first == nil {
				first = &rep.cells[i]
			}
		} else {
			fail++
		}
	}
	if fits == 0 || fail == 0 || refused == 0 {
		t.Fatalf("%d layouts fit, %d do not, %d refused: the test says little", fits, fail, refused)
	}
	if got := rep.smallest(true); got != first {
		t.Errorf("smallest %s, want %s", layoutText(got), layoutText(first))
	}
}

// --main-grads fp32 over 4 ranks at every ZeRO stage, measured on host
// ranks in one process: the gradients each rank keeps after a step are 2
// bytes a parameter more than with 16-bit gradients, 2Φ at stages 0 and 1
// (whole gradients) and 2Φ/N at stages 2 and 3 (a shard), simulated =
// measured in every category, and the formula's grads the kept buffer.
func TestMainGradsShardedAsTheStageSays(t *testing.T) {
	cfg, err := model.Preset("tiny")
	if err != nil {
		t.Fatal(err)
	}
	const n = 4
	phi := cfg.NumParams() // 120,576: a multiple of 4, no padding
	for stage := 0; stage <= 3; stage++ {
		kept := map[model.MainGrads]int64{}
		for _, g := range []model.MainGrads{model.GradsLikeWeights, model.GradsFP32} {
			s := model.Setup{Model: cfg, Batch: 1, Seq: 32, Precision: model.FP16, Optimizer: model.Adam, Ranks: n, ZeRO: stage, TP: 1, PP: 1, MainGrads: g}
			where := &Where{New: func() (cuda.Device, error) { return host.New(host.Options{Threads: 1}) }}
			r, err := Validate(context.Background(), where, runOf(checked(t, s), 2, nil, zero.Setting{Stage: stage}))
			if err != nil {
				t.Fatal(err)
			}
			for i, sim := range r.SimulatedRanks {
				if m := r.MeasuredRanks[i]; m.Stats.CategoryRequested != sim.Stats.CategoryRequested {
					t.Errorf("ZeRO-%d, %s gradients, rank %d: measured %v, simulated %v", stage, g, i, m.Stats.CategoryRequested, sim.Stats.CategoryRequested)
				}
			}
			kept[g] = r.MeasuredRanks[0].Stats.CategoryRequested[cuda.Grads].Current
			if f := r.Estimate.States.Grads; f != kept[g] {
				t.Errorf("ZeRO-%d, %s gradients: the formula's grads %d bytes, the rank keeps %d", stage, g, f, kept[g])
			}
		}
		want := 2 * phi
		if stage >= 2 {
			want = 2 * phi / n
		}
		if d := kept[model.GradsFP32] - kept[model.GradsLikeWeights]; d != want {
			t.Errorf("ZeRO-%d: fp32 main gradients keep %d bytes more (%d against %d), want %d", stage, d, kept[model.GradsFP32], kept[model.GradsLikeWeights], want)
		}
	}
}

// --offload optimizer at every ZeRO stage over 2 ranks (and on one), and
// --offload params at ZeRO-3 (the weight shard in host memory too, copied
// up at each of the step's two gathers),
// measured on host ranks in one process, each with its own host device
// for the offloaded states: on the offload device every category is the
// formula's (the fp32 master, m and v of the parameters a rank updates,
// 12 bytes each, and its 2-byte copies of their gradients and weights),
// simulated = measured, and the step's PCIe copies (2 bytes a parameter
// each way) too; the device keeps no optimizer state; and the losses are
// those of the same run without offload (the update's kernels are the
// host's either way).
func TestOffloadOptimizer(t *testing.T) {
	cfg, err := model.Preset("tiny")
	if err != nil {
		t.Fatal(err)
	}
	phi := cfg.NumParams()
	open := func() (cuda.Device, error) { return host.New(host.Options{Threads: 1}) }
	for _, tc := range []struct {
		ranks, stage int
		off          model.Offload
	}{{1, 0, model.OffloadOptimizer}, {2, 0, model.OffloadOptimizer}, {2, 1, model.OffloadOptimizer}, {2, 2, model.OffloadOptimizer}, {2, 3, model.OffloadOptimizer},
		{1, 3, model.OffloadParams}, {2, 3, model.OffloadParams}} {
		losses := map[model.Offload]float64{}
		for _, off := range []model.Offload{model.OffloadNone, tc.off} {
			s := model.Setup{Model: cfg, Batch: 1, Seq: 32, Precision: model.BF16, Optimizer: model.AdamW, Ranks: tc.ranks, ZeRO: tc.stage, TP: 1, PP: 1, Offload: off}
			r, err := Validate(context.Background(), &Where{New: open, Offload: open}, runOf(checked(t, s), 2, nil, zero.Setting{Stage: tc.stage}))
			if err != nil {
				t.Fatal(err)
			}
			name := fmt.Sprintf("%d ranks, ZeRO-%d, offload %s", tc.ranks, tc.stage, off)
			sims, meas := r.SimulatedRanks, r.MeasuredRanks
			losses[off] = meas[0].Record.Loss
			if off == model.OffloadNone {
				if meas[0].Record.Offload != nil {
					t.Errorf("%s: an offload record", name)
				}
				continue
			}
			count := phi
			if tc.stage >= 1 {
				count = phi / int64(tc.ranks)
			}
			want := map[cuda.Category]int64{cuda.Params: 2 * count, cuda.Grads: 2 * count, cuda.Master: 4 * count, cuda.AdamM: 4 * count, cuda.AdamV: 4 * count}
			up := 2 * count // the updated weights
			if off == model.OffloadParams {
				up = 2 * 2 * count // the shard at each of the two gathers (tiny's every unit is read in both passes)
			}
			for i := range sims {
				so, mo := sims[i].Record.Offload, meas[i].Record.Offload
				if so == nil || mo == nil {
					t.Fatalf("%s, rank %d: no offload record", name, i)
				}
				for c, b := range want {
					if so.Memory.PeakRequested[c] != b || mo.Memory.PeakRequested[c] != b {
						t.Errorf("%s, rank %d: host %v simulated %d, measured %d, want %d", name, i, c, so.Memory.PeakRequested[c], mo.Memory.PeakRequested[c], b)
					}
				}
				if so.ToHostBytes != 2*count || mo.ToHostBytes != 2*count || so.ToDeviceBytes != up || mo.ToDeviceBytes != up {
					t.Errorf("%s, rank %d: PCIe simulated %d/%d, measured %d/%d, want %d down and %d up", name, i, so.ToHostBytes, so.ToDeviceBytes, mo.ToHostBytes, mo.ToDeviceBytes, 2*count, up)
				}
				onDevice := []cuda.Category{cuda.Master, cuda.AdamM, cuda.AdamV}
				if off == model.OffloadParams {
					onDevice = append(onDevice, cuda.Params)
				}
				for _, c := range onDevice {
					if p := meas[i].Stats.CategoryRequested[c].Peak; p != 0 {
						t.Errorf("%s, rank %d: the device holds %v, %d bytes", name, i, c, p)
					}
				}
				if meas[i].Stats.CategoryRequested != sims[i].Stats.CategoryRequested {
					t.Errorf("%s, rank %d: the device measured %v, simulated %v", name, i, meas[i].Stats.CategoryRequested, sims[i].Stats.CategoryRequested)
				}
			}
			if tc.ranks == 1 && off == model.OffloadParams {
				// One rank gathers its units from host memory: the
				// gathered row is the formula's.
				row := r.Row(cuda.Gathered.String())
				if row.Simulated == nil || row.Measured == nil || *row.Simulated == 0 || *row.Simulated != *row.Estimate[model.Exact] || *row.Measured != *row.Simulated {
					t.Errorf("%s: the gathered row %+v", name, row)
				}
			}
			e := r.Estimate
			if e.Offloaded.Total() != 16*count || e.PCIe.ToHost != 2*count || e.PCIe.ToDevice != up {
				t.Errorf("%s: the formula's host %d bytes, PCIe %+v; want 16·%d, 2·%d down and %d up", name, e.Offloaded.Total(), e.PCIe, count, count, up)
			}
		}
		if losses[model.OffloadNone] != losses[tc.off] || losses[model.OffloadNone] == 0 {
			t.Errorf("%d ranks, ZeRO-%d: last loss %v offloading the %s, %v on the device", tc.ranks, tc.stage, losses[tc.off], tc.off, losses[model.OffloadNone])
		}
	}
}
