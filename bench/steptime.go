package bench

// The formula's step time (zero.StepTimeOf) in a report: text and JSON.

import (
	"fmt"
	"io"
	"time"

	"trainmem/zero"
)

// stepTimeDoc is a step time in JSON, milliseconds.
type stepTimeDoc struct {
	Card            string  `json:"card"`
	Network         string  `json:"network"`
	GPUs            int     `json:"gpus"`
	StepMs          float64 `json:"step_ms"`
	ComputeMs       float64 `json:"compute_ms"`
	BubbleMs        float64 `json:"bubble_ms"`
	DataCommMs      float64 `json:"data_comm_ms"`
	DataExposedMs   float64 `json:"data_comm_exposed_ms"`
	OptimizerMs     float64 `json:"optimizer_ms"`
	OffloadMs       float64 `json:"offload_ms"`
	ForwardMs       float64 `json:"micro_batch_forward_ms"`
	BackwardMs      float64 `json:"micro_batch_backward_ms"`
	RecomputeMs     float64 `json:"micro_batch_recompute_ms"`
	TensorCommMs    float64 `json:"micro_batch_tensor_comm_ms"`
	PipelineCommMs  float64 `json:"micro_batch_pipeline_comm_ms"`
	TokensPerSecond float64 `json:"tokens_per_second"`
	MFU             float64 `json:"mfu"`
	HFU             float64 `json:"hfu"`
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func stepTimeDocOf(st zero.StepTime) *stepTimeDoc {
	return &stepTimeDoc{Card: st.Card, Network: st.Network, GPUs: st.GPUs, StepMs: ms(st.Step), ComputeMs: ms(st.Compute), BubbleMs: ms(st.Bubble),
		DataCommMs: ms(st.DataComm), DataExposedMs: ms(st.DataExposed), OptimizerMs: ms(st.Optimizer), OffloadMs: ms(st.Offload),
		ForwardMs: ms(st.Forward), BackwardMs: ms(st.Backward), RecomputeMs: ms(st.Recompute), TensorCommMs: ms(st.TensorComm),
		PipelineCommMs: ms(st.PipelineComm), TokensPerSecond: st.TokensPerSecond, MFU: st.MFU, HFU: st.HFU}
}

// writeStepTime prints the step's time and where it goes.
func writeStepTime(w io.Writer, st zero.StepTime) {
	s := st.Setup
	share := func(d time.Duration) string {
		if st.Step <= 0 {
			return "-"
		}
		return fmt.Sprintf("%.1f%%", 100*float64(d)/float64(st.Step))
	}
	fmt.Fprintf(w, "step time by formula on %d × %s, %s: %s, %.0f tokens/s, MFU %.1f%%, HFU %.1f%% (recomputation counted in HFU only; Korthikanti et al. 2022)\n",
		st.GPUs, st.Card, st.Network, msText(ms(st.Step)), st.TokensPerSecond, 100*st.MFU, 100*st.HFU)
	t := Table{}
	t.Add("  part", "time", "share")
	m := max(1, s.MicroBatches)
	t.Add(fmt.Sprintf("  micro-batches (%d): kernels and tensor-parallel collectives", m), msText(ms(st.Compute)), share(st.Compute))
	if st.Bubble > 0 {
		t.Add(fmt.Sprintf("  pipeline bubble (%d stages)", s.PP), msText(ms(st.Bubble)), share(st.Bubble))
	}
	if st.DataComm > 0 {
		t.Add(fmt.Sprintf("  data-parallel collectives, not hidden (of %s)", msText(ms(st.DataComm))), msText(ms(st.DataExposed)), share(st.DataExposed))
	}
	t.Add("  optimizer step", msText(ms(st.Optimizer)), share(st.Optimizer))
	if st.Offload > 0 {
		t.Add("  offload copies over PCIe", msText(ms(st.Offload)), share(st.Offload))
	}
	t.Write(w)
	fmt.Fprintf(w, "  a micro-batch on the busiest stage: forward %s, backward %s, recompute %s, tensor-parallel collectives %s, pipeline sends %s\n",
		msText(ms(st.Forward)), msText(ms(st.Backward)), msText(ms(st.Recompute)), msText(ms(st.TensorComm)), msText(ms(st.PipelineComm)))
	fmt.Fprintln(w, "  products in tiles and waves at the card's measured fraction of its peak, memory-bound kernels at its measured bandwidth, NCCL's collectives over the network; a model, not a measurement (docs/guide.md, --gpu)")
}
