package bench

// The estimators users arrive with, DeepSpeed's and Megatron-LM's, computed
// as their code computes them, for the estimate report and for validate's
// explanations of where each departs from the simulation.

import (
	"errors"
	"fmt"
	"io"

	"trainmem/model"
)

// Estimators are a setup's published estimates. A nil one has none, and
// its None field says why (a stage or a layout its code does not count,
// in a sentence that names the estimator).
type Estimators struct {
	Cluster       model.Cluster
	DeepSpeed     *model.DeepSpeedMemory
	DeepSpeedNone string
	Megatron      *model.MegatronMemory
	MegatronNone  string
}

// estimatorsOf computes them; an error is a setup too large to count.
func estimatorsOf(s model.Setup, cl model.Cluster) (Estimators, error) {
	e := Estimators{Cluster: cl}
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
	t.Add(row("  trainmem: model states + gathered", sizeCells(e.States.Total()+e.Gathered))...)
	if d := x.DeepSpeed; d != nil {
		largest := ""
		if d.Stage == 3 {
			largest = fmt.Sprintf(", largest layer %s parameters", model.Comma(d.LargestLayer))
			if d.LargestName != "" {
				largest = fmt.Sprintf(", largest layer %s (%s parameters)", d.LargestName, model.Comma(d.LargestLayer))
			}
		}
		t.Add(fmt.Sprintf("  deepspeed: estimate_zero%d, %s × %s%s, additional_buffer_factor %v", d.Stage, plural(d.Nodes, "node"), plural(d.GPUsPerNode, "GPU"), largest, d.BufferFactor))
		none := d.NoOffload()
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
	WeightsAndOptimizer  int64   `json:"weights_and_optimizer"`
	Activations          int64   `json:"activations"`
	Total                int64   `json:"total"`
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
		none := s.NoOffload()
		for _, o := range s.Options {
			ds.Options = append(ds.Options, deepSpeedRowJSON{Options: o.Options(s.Stage), GPU: o.GPU, CPU: o.CPU, This: o == none})
		}
		d.DeepSpeed = ds
	}
	if m := x.Megatron; m != nil {
		d.Megatron = &megatronJSON{PaddedVocab: m.PaddedVocab, Params: m.Params, BytesPerParam: m.BytesPerParam, DistributedOptimizer: m.DistributedOptimizer,
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
