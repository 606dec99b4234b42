package bench

// The estimators users arrive with, DeepSpeed's and Megatron-LM's, computed
// as their code computes them, for the estimate report and for validate's
// explanations of where each departs from the simulation.

import (
	"errors"
	"fmt"
	"io"
	"math"

	"trainmem/cuda"
	"trainmem/model"
	"trainmem/train"
)

// Estimators are a setup's published estimates. A nil one has none, and
// its None field says why (a stage or a layout its code does not count,
// in a sentence that names the estimator).
type Estimators struct {
	Cluster model.Cluster
	// Offload is the setup's: DeepSpeed's row it runs (DeepSpeedMemory.Row).
	Offload       model.Offload
	DeepSpeed     *model.DeepSpeedMemory
	DeepSpeedNone string
	Megatron      *model.MegatronMemory
	MegatronNone  string
}

// estimatorsOf computes them; an error is a setup too large to count.
func estimatorsOf(s model.Setup, cl model.Cluster) (Estimators, error) {
	e := Estimators{Cluster: cl, Offload: s.Offload}
	d, err := s.DeepSpeed(cl)
	switch {
	case err == nil:
		e.DeepSpeed = &d
	case errors.Is(err, model.ErrNoDeepSpeed):
		e.DeepSpeedNone = err.Error()
	default:
		return Estimators{}, err
	}
	if s.ParamsOnly() {
		e.MegatronNone = "no Megatron-LM estimate: its report counts a model's shape, not a parameter count"
		return e, nil
	}
	m, err := s.Megatron()
	if err != nil {
		return Estimators{}, err
	}
	e.Megatron = &m
	return e, nil
}

// megatronRate names Megatron-LM's bytes a parameter.
func megatronRate(m model.MegatronMemory, s model.Setup) string {
	if m.DistributedOptimizer {
		return fmt.Sprintf("distributed optimizer, 6 + 12/%d bytes a parameter", s.Ranks)
	}
	return "18 bytes a parameter"
}

// writeText prints the estimators beside the estimate's model states, per
// GPU and per node's CPU memory.
func (x Estimators) writeText(w io.Writer, e model.Estimate) {
	var t Table
	cpu := func(n int64) []string { return []string{model.Comma(n), model.GiB(n)} }
	if x.DeepSpeed != nil {
		t.Add("estimators per GPU", "bytes", "GB", "GiB", "per node's CPU", "GiB")
	} else {
		t.Add("estimators per GPU", "bytes", "GB", "GiB")
	}
	t.Add(row("  zero_paper: model states", sizeCells(e.States.Total()))...)
	tm := row("  trainmem: model states + gathered", sizeCells(e.States.Total()+e.Gathered))
	if d := x.DeepSpeed; d != nil && e.Offloaded.Total() > 0 {
		// The node's ranks' offloaded states, beside DeepSpeed's CPU figure.
		tm = append(tm, cpu(e.Offloaded.Total()*int64(d.GPUsPerNode))...)
	}
	t.Add(tm...)
	if d := x.DeepSpeed; d != nil {
		largest := ""
		if d.Stage == 3 {
			largest = fmt.Sprintf(", largest layer %s parameters", model.Comma(d.LargestLayer))
			if d.LargestName != "" {
				largest = fmt.Sprintf(", largest layer %s (%s parameters)", d.LargestName, model.Comma(d.LargestLayer))
			}
		}
		t.Add(fmt.Sprintf("  deepspeed: estimate_zero%d, %s × %s%s, additional_buffer_factor %v", d.Stage, plural(d.Nodes, "node"), plural(d.GPUsPerNode, "GPU"), largest, d.BufferFactor))
		none := d.Row(x.Offload)
		for _, o := range d.Options {
			name := "    " + o.Options(d.Stage)
			if o == none {
				name += " (this setup)"
			}
			t.Add(row(name, sizeCells(o.GPU), cpu(o.CPU))...)
		}
	}
	if m := x.Megatron; m != nil {
		t.Add(fmt.Sprintf("  megatron: the first pipeline stage, %s, %s parameters", megatronRate(*m, e.Setup), model.Comma(int64(m.Params))))
		t.Add(row("    weights and optimizer", sizeCells(m.WeightsAndOptimizer))...)
		t.Add(row("    activations", sizeCells(m.Activations))...)
		t.Add(row("    total", sizeCells(m.Total()))...)
	}
	t.Write(w)
	if x.DeepSpeed != nil {
		fmt.Fprintf(w, "  deepspeed: %s; model states only (no activations), the CPU per node\n", model.DeepSpeedSource)
	} else {
		fmt.Fprintf(w, "  deepspeed: %s\n", x.DeepSpeedNone)
	}
	if x.Megatron != nil {
		what := "Korthikanti et al.'s Table 2 without scores, times 1.05"
		if x.Megatron.SequenceParallelPath {
			what = "sequence parallel with selective recomputation, 34sbh/t a layer"
		}
		fmt.Fprintf(w, "  megatron: %s; activations %s\n", model.MegatronSource, what)
	} else {
		fmt.Fprintf(w, "  megatron: %s\n", x.MegatronNone)
	}
}

// estimatorsJSON is the estimators in trainmem's JSON.
type estimatorsJSON struct {
	DeepSpeed     *deepSpeedJSON `json:"deepspeed,omitempty"`
	DeepSpeedNone string         `json:"deepspeed_none,omitempty"`
	Megatron      *megatronJSON  `json:"megatron,omitempty"`
	MegatronNone  string         `json:"megatron_none,omitempty"`
}

type deepSpeedJSON struct {
	Estimator    string             `json:"estimator"`
	Params       int64              `json:"total_params"`
	LargestLayer int64              `json:"largest_layer_params,omitempty"`
	LargestName  string             `json:"largest_layer,omitempty"`
	Nodes        int                `json:"num_nodes"`
	GPUsPerNode  int                `json:"num_gpus_per_node"`
	BufferFactor float64            `json:"additional_buffer_factor"`
	Options      []deepSpeedRowJSON `json:"options"`
	Source       string             `json:"source"`
}

type deepSpeedRowJSON struct {
	Options string `json:"options"`
	GPU     int64  `json:"gpu_bytes"`
	CPU     int64  `json:"cpu_bytes_per_node"`
	This    bool   `json:"this_setup,omitempty"`
}

type megatronJSON struct {
	PaddedVocab          int     `json:"padded_vocab"`
	Params               float64 `json:"params"`
	BytesPerParam        float64 `json:"bytes_per_param"`
	DistributedOptimizer bool    `json:"distributed_optimizer"`
	InFlight             int     `json:"micro_batches_in_flight"`
	WeightsAndOptimizer  int64   `json:"weights_and_optimizer_bytes"`
	Activations          int64   `json:"activations_bytes"`
	Total                int64   `json:"total_bytes"`
	Source               string  `json:"source"`
}

func (x Estimators) doc() *estimatorsJSON {
	d := &estimatorsJSON{DeepSpeedNone: x.DeepSpeedNone, MegatronNone: x.MegatronNone}
	if s := x.DeepSpeed; s != nil {
		ds := &deepSpeedJSON{Estimator: fmt.Sprintf("estimate_zero%d_model_states_mem_needs", s.Stage), Params: s.Params, LargestName: s.LargestName,
			Nodes: s.Nodes, GPUsPerNode: s.GPUsPerNode, BufferFactor: s.BufferFactor, Source: model.DeepSpeedSource}
		if s.Stage == 3 {
			ds.LargestLayer = s.LargestLayer
		}
		none := s.Row(x.Offload)
		for _, o := range s.Options {
			ds.Options = append(ds.Options, deepSpeedRowJSON{Options: o.Options(s.Stage), GPU: o.GPU, CPU: o.CPU, This: o == none})
		}
		d.DeepSpeed = ds
	}
	if m := x.Megatron; m != nil {
		d.Megatron = &megatronJSON{PaddedVocab: m.PaddedVocab, Params: m.Params, BytesPerParam: m.BytesPerParam, DistributedOptimizer: m.DistributedOptimizer, InFlight: m.InFlight,
			WeightsAndOptimizer: m.WeightsAndOptimizer, Activations: m.Activations, Total: m.Total(), Source: model.MegatronSource}
	}
	return d
}

// csvRows writes the estimators' byte counts as section,name,bytes rows.
func (x Estimators) csvRows(row func(section, name string, n int64)) {
	if s := x.DeepSpeed; s != nil {
		for _, o := range s.Options {
			row("estimators.deepspeed.gpu", o.Options(s.Stage), o.GPU)
			row("estimators.deepspeed.cpu_per_node", o.Options(s.Stage), o.CPU)
		}
	}
	if m := x.Megatron; m != nil {
		row("estimators.megatron", "weights_and_optimizer", m.WeightsAndOptimizer)
		row("estimators.megatron", "activations", m.Activations)
		row("estimators.megatron", "total", m.Total())
	}
}

// simulatedStates are what the estimators are set against: the simulated
// rank's model states and gathered weights at their peaks (requested
// bytes), its activations' peak and its peak allocated.
type simulatedStates struct {
	Params, Grads, Optimizer, Gathered, Activations, Peak int64
	// Host is the offload device's model states (requested bytes at
	// their peaks), 0 without offload.
	Host int64
}

func simulatedOf(st cuda.Stats, rec train.Record) simulatedStates {
	p := func(c cuda.Category) int64 { return st.CategoryRequested[c].Peak }
	s := simulatedStates{Params: p(cuda.Params), Grads: p(cuda.Grads), Optimizer: p(cuda.Master) + p(cuda.AdamM) + p(cuda.AdamV),
		Gathered: p(cuda.Gathered), Activations: p(cuda.Activations), Peak: st.AllocatedBytes.Peak}
	if o := rec.Offload; o != nil {
		for _, c := range []cuda.Category{cuda.Params, cuda.Grads, cuda.Master, cuda.AdamM, cuda.AdamV} {
			s.Host += o.Memory.PeakRequested[c]
		}
	}
	return s
}

// States is the model states and gathered weights.
func (s simulatedStates) States() int64 { return s.Params + s.Grads + s.Optimizer + s.Gathered }

// explain says where each estimator departs from the simulation, term by
// term in bytes, one line each.
func (x Estimators) explain(s model.Setup, sim simulatedStates) []string {
	var lines []string
	add := func(format string, args ...any) { lines = append(lines, fmt.Sprintf(format, args...)) }
	n := int64(s.Ranks)
	if d := x.DeepSpeed; d != nil {
		o := d.Row(x.Offload)
		phi := d.Params
		off := x.Offload != model.OffloadNone
		add("deepspeed's estimate_zero%d (%s) says %s a GPU for the model states, against the simulation's model states and gathered weights, %s (%s)",
			d.Stage, o.Options(d.Stage), model.Bytes(o.GPU), model.Bytes(sim.States()), Percent(o.GPU, sim.States()))
		shard := o.GPU
		switch {
		case off && d.Stage == 2:
			add("deepspeed: with the optimizer offloaded it counts the 16-bit weights alone, 2Φ = %s; trainmem's device holds them (params %s) and the gradients (grads %s), which its figure leaves out",
				model.Bytes(2*phi), model.Bytes(sim.Params), model.Bytes(sim.Grads))
		case off && x.Offload == model.OffloadParams:
			add("deepspeed: with the weights and the optimizer offloaded it counts 4·largest_layer_params alone, %s (%s gathered with its gradient); trainmem's device holds grads %s and gathered weights %s, the weights' shard being the host's",
				model.Bytes(o.GPU), largestName(d), model.Bytes(sim.Grads), model.Bytes(sim.Gathered))
		case off:
			big := 4 * d.LargestLayer
			add("deepspeed: with the optimizer offloaded it counts 4·largest_layer_params, %s (%s gathered with its gradient), and int(2Φ/N), %s, the 16-bit weights' shard; trainmem's device holds params %s, grads %s and gathered weights %s",
				model.Bytes(big), largestName(d), model.Bytes(o.GPU-big), model.Bytes(sim.Params), model.Bytes(sim.Grads), model.Bytes(sim.Gathered))
		case d.Stage == 2:
			shard -= 2 * phi
			add("deepspeed: its 2Φ, %s, is the 16-bit weights whole on every GPU, as trainmem holds them (params %s)", model.Bytes(2*phi), model.Bytes(sim.Params))
			if s.MainGrads == model.GradsFP32 {
				add("deepspeed: its int(18Φ/N), %s, is a shard at 18 bytes a parameter: 2 of 16-bit gradients, 4 of fp32 gradients, 4 of fp32 weights, 8 of Adam's m and v; trainmem's fp32 main gradients take the 16-bit ones' place (each kernel's 16-bit gradient is added into them and dropped), so its shard is 16: DeepSpeed's 16-bit partition beside them is %s (2Φ/N)",
					model.Bytes(shard), model.Bytes(2*phi/n))
			} else {
				add("deepspeed: its int(18Φ/N), %s, is a shard at 18 bytes a parameter: 2 of 16-bit gradients, 4 of fp32 gradients, 4 of fp32 weights, 8 of Adam's m and v; trainmem keeps no fp32 gradient copy (its Adam reads the 16-bit gradients), so its shard is 14: the copy is %s (4Φ/N; --main-grads fp32 keeps one)",
					model.Bytes(shard), model.Bytes(4*phi/n))
			}
			if s.ZeRO == 1 {
				add("deepspeed: at ZeRO-1 a rank keeps its gradients whole (grads %s simulated), which estimate_zero2, DeepSpeed's one estimator of stages 1 and 2, counts as a shard (2Φ/N = %s)",
					model.Bytes(sim.Grads), model.Bytes(2*phi/n))
			}
		default:
			big := 4 * d.LargestLayer
			shard -= big
			add("deepspeed: its 4·largest_layer_params, %s, is its largest layer (%s) gathered with its gradient at 2 + 2 bytes a parameter; trainmem's gathered weights peak at %s, the units it gathers at once (their gradients are grads)",
				model.Bytes(big), largestName(d), model.Bytes(sim.Gathered))
			if s.MainGrads == model.GradsFP32 {
				add("deepspeed: its int(18Φ/N), %s, is a shard at 18 bytes a parameter, as trainmem's with fp32 main gradients (2 of weights, 4 of gradients, 12 of fp32 weights, m and v)",
					model.Bytes(shard))
			} else {
				add("deepspeed: its int(18Φ/N), %s, is a shard at 18 bytes a parameter where trainmem's holds 16 (2 of weights, 2 of gradients, 12 of fp32 weights, m and v): %s more (2Φ/N, the fp32 gradients; --main-grads fp32 keeps them)",
					model.Bytes(shard), model.Bytes(2*phi/n))
			}
		}
		add("deepspeed: it counts no gradient bucket and no padding; trainmem's grads peak at %s, its optimizer states at %s", model.Bytes(sim.Grads), model.Bytes(sim.Optimizer+sim.Host))
		if off {
			add("deepspeed: its CPU column, %s a node (%s), is the offloaded states of the node's GPUs and the model's initialization, times additional_buffer_factor %v; trainmem's host holds %s a rank (the fp32 weights, m and v of the parameters it updates and its copies of their gradients and 16-bit weights), %s for the node's %s",
				model.Bytes(o.CPU), plural(d.GPUsPerNode, "GPU"), d.BufferFactor, model.Bytes(sim.Host), model.Bytes(sim.Host*int64(d.GPUsPerNode)), plural(d.GPUsPerNode, "rank"))
			if d.Stage == 2 {
				add("deepspeed: estimate_zero2 counts a node's CPU at max(4·GPUs, 16) bytes a parameter with GPUs the whole cluster's (%d here), not the node's, so its CPU figure grows with the cluster where a rank's offloaded shard shrinks", d.Nodes*d.GPUsPerNode)
			}
		} else {
			add("deepspeed: its CPU column is a node's host memory (%s) for the offloaded states and the model's initialization, times additional_buffer_factor %v; nothing is offloaded in this setup, whose row says %s a node",
				plural(d.GPUsPerNode, "GPU"), d.BufferFactor, model.Bytes(o.CPU))
		}
	}
	if m := x.Megatron; m != nil {
		states := sim.Params + sim.Grads + sim.Optimizer
		mp := int64(math.Round(m.Params))
		positions := ", no position embeddings"
		if s.Model.Positions == model.PosRoPE {
			positions = "" // rotary positions have none to count
		}
		add("megatron counts the most loaded rank, the first stage (%s in flight): %s parameters; its layers have no biases but the norms' (%s parameters a block, trainmem's %s)%s, and its vocabulary is padded to a multiple of %d·t (%s rows, trainmem's %s)",
			inFlight(m.InFlight), model.Comma(mp), model.Comma(int64(math.Round(m.Block))), model.Comma(s.Model.Whole().LayerParams()),
			positions, model.MegatronVocabMultiple, model.Comma(int64(m.PaddedVocab)), model.Comma(int64(s.Model.Vocab)))
		grads := fmt.Sprintf("its main gradients are fp32, 2 bytes a parameter more than trainmem's 16-bit ones (%s; --main-grads fp32 keeps them)", model.Bytes(2*mp))
		switch {
		case s.Precision.Mixed() && s.MainGrads == model.GradsFP32:
			grads = "its main gradients are fp32, as trainmem's here"
		case !s.Precision.Mixed():
			grads = "it counts bf16 weights and fp32 main gradients whatever the precision, where trainmem's fp32 training holds 4 bytes of weights and 4 of gradients"
		}
		if m.DistributedOptimizer {
			add("megatron's weights and optimizer, %s, count its %s parameters at 6 + 12/%d bytes (the distributed optimizer: 16-bit weights and fp32 main gradients whole, 12 of fp32 weights, m and v sharded), against the simulation's model states %s (%s); %s",
				model.Bytes(m.WeightsAndOptimizer), model.Comma(mp), s.Ranks, model.Bytes(states), Percent(m.WeightsAndOptimizer, states), grads)
			if s.ZeRO >= 2 {
				add("megatron: its distributed optimizer shards the optimizer states alone, ZeRO-1's place; trainmem's ZeRO-%d shards the gradients%s too", s.ZeRO, map[bool]string{true: " and the weights", false: ""}[s.ZeRO == 3])
			}
		} else {
			add("megatron's weights and optimizer, %s, count its %s parameters at 18 bytes (16-bit weights, fp32 main gradients, 12 of fp32 weights, m and v), against the simulation's model states %s (%s); %s",
				model.Bytes(m.WeightsAndOptimizer), model.Comma(mp), model.Bytes(states), Percent(m.WeightsAndOptimizer, states), grads)
		}
		if x.Offload != model.OffloadNone {
			host, device := "optimizer's states", "the weights and gradients"
			if x.Offload == model.OffloadParams {
				host, device = "optimizer's states and weight shard", "the gradients"
			}
			add("megatron: its report keeps every model state on the GPU; trainmem's %s are in host memory (%s a rank), and its device's model states are %s alone", host, model.Bytes(sim.Host), device)
		}
		if m.SequenceParallelPath {
			add("megatron's activations, %s, are 34·s·b·h a layer over t with no attention scores, against the simulation's %s (%s)",
				model.Bytes(m.Activations), model.Bytes(sim.Activations), Percent(m.Activations, sim.Activations))
		} else {
			add("megatron's activations, %s, are s·b·h·(10 + 24/t) a layer with no attention scores, whatever the recomputation, and the logits: %s, then its stated 5%% more for temporaries (%s); the simulation's are %s (%s)",
				model.Bytes(m.Activations), model.Bytes(m.BeforeOverhead), model.Bytes(m.Activations-m.BeforeOverhead), model.Bytes(sim.Activations), Percent(m.Activations, sim.Activations))
		}
	}
	return lines
}

// largestName is the largest layer as DeepSpeed's estimate names it.
func largestName(d *model.DeepSpeedMemory) string {
	if d.LargestName == "" {
		return model.Comma(d.LargestLayer) + " parameters, given"
	}
	return fmt.Sprintf("%s, %s parameters", d.LargestName, model.Comma(d.LargestLayer))
}

// inFlight is "1 micro-batch", "4 micro-batches".
func inFlight(n int) string {
	if n == 1 {
		return "1 micro-batch"
	}
	return fmt.Sprintf("%d micro-batches", n)
}

// estimatorFit is an estimator's own answer to fit's question: the fewest
// data-parallel ranks whose figure a GPU fits the memory, by DeepSpeed's
// model states (one row of its table) or Megatron-LM's total.
type estimatorFit struct {
	Estimator string `json:"estimator"`
	// Stages are the ZeRO stages the row stands for: DeepSpeed's
	// estimate_zero2 is stages 1 and 2, Megatron-LM's distributed
	// optimizer 1 to 3.
	Stages  string `json:"zero_stages"`
	Options string `json:"options"`
	// MinRanks is 0 when no rank count up to model.MaxFitRanks fits;
	// GPUBytes is the figure at the answer, or at model.MaxFitRanks then.
	MinRanks int   `json:"min_ranks"`
	GPUBytes int64 `json:"gpu_bytes"`
}

// fitEstimators answers fit's question by each estimator's figure for s
// (its stage and rank count ignored), and says in a sentence why an
// estimator has no answer.
func fitEstimators(s model.Setup, memory int64, cl model.Cluster) ([]estimatorFit, []string, error) {
	var fits []estimatorFit
	var none []string
	// The node split does not change a GPU's figure; each count takes
	// its default one.
	cl.GPUsPerNode = 0
	for _, stage := range []int{2, 3} {
		t := s.AtStage(stage)
		t.Ranks = 1
		d, err := t.DeepSpeed(cl)
		if errors.Is(err, model.ErrNoDeepSpeed) {
			none = append(none, err.Error())
			break
		}
		if err != nil {
			return nil, nil, err
		}
		stages := "1, 2"
		if stage == 3 {
			stages = "3"
		}
		for i, o := range d.Options {
			if stage == 3 && !o.ZeroInit {
				continue // zero_init changes the CPU figure only
			}
			figure := func(n int) (int64, error) {
				t.Ranks = n
				d, err := t.DeepSpeed(cl)
				return d.Options[i].GPU, err
			}
			n, at, err := fewestBy(memory, figure)
			if err != nil {
				return nil, nil, err
			}
			fits = append(fits, estimatorFit{Estimator: "deepspeed", Stages: stages, Options: fmt.Sprintf("estimate_zero%d (%s)", stage, o.Options(stage)), MinRanks: n, GPUBytes: at})
		}
	}
	if s.ParamsOnly() {
		return fits, append(none, "no Megatron-LM answer: its report counts a model's shape, not a parameter count"), nil
	}
	for _, z := range []int{0, 1} {
		t := s.AtStage(z)
		figure := func(n int) (int64, error) {
			t.Ranks = n
			m, err := t.Megatron()
			return m.Total(), err
		}
		n, at, err := fewestBy(memory, figure)
		if err != nil {
			return nil, nil, err
		}
		f := estimatorFit{Estimator: "megatron", Stages: "0", Options: "18 bytes a parameter, activations", MinRanks: n, GPUBytes: at}
		if z == 1 {
			f.Stages, f.Options = "1, 2, 3", "distributed optimizer, 6 + 12/DP bytes a parameter, activations"
		}
		fits = append(fits, f)
	}
	return fits, none, nil
}

// fewestBy is the fewest ranks whose figure fits memory and the figure
// there (at model.MaxFitRanks when none does).
func fewestBy(memory int64, figure func(n int) (int64, error)) (int, int64, error) {
	n, err := model.FewestRanks(func(n int) (bool, error) {
		g, err := figure(n)
		return g <= memory, err
	})
	if err != nil {
		return 0, 0, err
	}
	if n == 0 {
		at, err := figure(model.MaxFitRanks)
		return 0, at, err
	}
	at, err := figure(n)
	return n, at, err
}

// writeEstimatorFits prints the estimators' answers to fit's question.
func writeEstimatorFits(w io.Writer, fits []estimatorFit, none []string, memory int64) {
	if len(fits) == 0 && len(none) == 0 {
		return
	}
	fmt.Fprintf(w, "\nby the estimators' own figures, the fewest data-parallel ranks whose figure a GPU fits in %s (DeepSpeed's: model states only; Megatron-LM's: its first stage's total):\n", model.Bytes(memory))
	var t Table
	t.Add("estimator", "ZeRO", "ranks", "a GPU at that")
	for _, f := range fits {
		n := "-"
		if f.MinRanks > 0 {
			n = model.Comma(int64(f.MinRanks))
		}
		t.Add("  "+f.Estimator+", "+f.Options, f.Stages, n, model.GiB(f.GPUBytes))
	}
	t.Write(w)
	for _, n := range none {
		fmt.Fprintln(w, n)
	}
}
