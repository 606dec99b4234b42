package model

// DeepSpeed's model-state estimators, computed as its code computes them:
// estimate_zero2_model_states_mem_needs (deepspeed/runtime/zero/
// stage_1_and_2.py, the one estimator of stages 1 and 2) and
// estimate_zero3_model_states_mem_needs (deepspeed/runtime/zero/stage3.py),
// microsoft/DeepSpeed 0.16.5 at 38327e07. They count per GPU
//
//	ZeRO-2: 2Φ + int(18Φ/N)            (16-bit weights; 16-bit and fp32
//	                                    gradients, fp32 weights, Adam's m
//	                                    and v: 2 + 4 + 4 + 8 bytes, sharded)
//	        2Φ with the optimizer offloaded
//	ZeRO-3: 4·largest + int(18Φ/N)     (the largest layer gathered, as 2
//	                                    bytes of weights and 2 of gradients)
//	        4·largest + int(2Φ/N) with the optimizer offloaded, 4·largest
//	        with the weights offloaded too
//
// and per node's CPU memory the buffers their offload and initialization
// use, times additional_buffer_factor (1.5 by default). The arithmetic is
// Python's: integer products exact, a true division or a product with a
// float rounded to the nearest float64, int() truncating; the same here.
// Its _all_cold functions print every option for a total and a largest
// layer given by hand, its _all_live ones the same for a model's own
// counts (model_to_params): here a parameter-count setup is the cold case
// (--largest-layer), a shape the live one (LargestModule).

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"strings"
	"trainmem/cuda"
)

// DeepSpeedSource is the code the deepspeed estimator follows.
const DeepSpeedSource = "estimate_zero2_model_states_mem_needs (deepspeed/runtime/zero/stage_1_and_2.py) and estimate_zero3_model_states_mem_needs (deepspeed/runtime/zero/stage3.py), microsoft/DeepSpeed 0.16.5 (38327e07)"

// DeepSpeedBufferFactor is additional_buffer_factor's default.
const DeepSpeedBufferFactor = 1.5

// DefaultGPUsPerNode is the GPUs a node when none is given: a DGX's or
// HGX's 8.
const DefaultGPUsPerNode = 8

// Cluster is how the ranks sit on nodes and what the estimators that count
// per node need beside a setup.
type Cluster struct {
	// GPUsPerNode is the GPUs (ranks) a node holds: it must divide the
	// world, ranks × tp × pp. 0 is DefaultGPUsPerNode, or fewer when the
	// world is not a multiple of it: gcd(world, 8).
	GPUsPerNode int
	// BufferFactor is DeepSpeed's additional_buffer_factor, which scales
	// its CPU estimates; 0 is DeepSpeedBufferFactor.
	BufferFactor float64
	// LargestLayer is the largest module's parameters of a parameter-count
	// setup (DeepSpeed's largest_layer_params, which its ZeRO-3 estimate
	// needs); a setup with a shape counts its own (LargestModule).
	LargestLayer int64
}

// Nodes is the setup's nodes and GPUs a node under c.
func (c Cluster) Nodes(s Setup) (nodes, perNode int, err error) {
	world := s.Ranks * s.TP * s.PP
	perNode = c.GPUsPerNode
	if perNode == 0 {
		perNode = gcd(world, DefaultGPUsPerNode)
	}
	if perNode < 1 || world%perNode != 0 {
		return 0, 0, fmt.Errorf("model: %d GPUs a node do not divide the world of %d ranks (ranks × tp × pp; valid: %s)", c.GPUsPerNode, world, divisors(world))
	}
	return world / perNode, perNode, nil
}

// Validate checks c's fields against s.
func (c Cluster) Validate(s Setup) error {
	if c.GPUsPerNode < 0 {
		return cuda.Argf("model", "GPUs a node", c.GPUsPerNode, "must be a positive integer", "")
	}
	if _, _, err := c.Nodes(s); err != nil {
		return err
	}
	if c.BufferFactor < 0 || math.IsNaN(c.BufferFactor) || math.IsInf(c.BufferFactor, 0) {
		return cuda.Argf("model", "buffer factor", c.BufferFactor, "must be a finite number ≥ 0", fmt.Sprintf("0, DeepSpeed's default of %v, or more", DeepSpeedBufferFactor))
	}
	if c.LargestLayer < 0 {
		return cuda.Argf("model", "largest layer", c.LargestLayer, "must be ≥ 0", "")
	}
	if c.LargestLayer > 0 && !s.ParamsOnly() {
		return fmt.Errorf("model: a largest layer of %d parameters given for a model shape, which counts its own (valid: only with a parameter count)", c.LargestLayer)
	}
	if c.LargestLayer > 0 && c.LargestLayer > s.Params {
		return fmt.Errorf("model: a largest layer of %d parameters in a model of %d (valid: at most the model's)", c.LargestLayer, s.Params)
	}
	return nil
}

func (c Cluster) bufferFactor() float64 {
	if c.BufferFactor == 0 {
		return DeepSpeedBufferFactor
	}
	return c.BufferFactor
}

// DeepSpeedOption is one row of DeepSpeed's estimate table: an offload
// choice and what it needs per GPU and per node's CPU.
type DeepSpeedOption struct {
	OffloadOptimizer bool // offload_optimizer=cpu
	OffloadParams    bool // offload_param=cpu (ZeRO-3)
	// ZeroInit is zero_init=1 (ZeRO-3): the model built partitioned, under
	// deepspeed.zero.Init, so no node holds it whole on its CPU.
	ZeroInit bool
	GPU, CPU int64 // bytes a GPU, bytes a node's CPU memory
}

// Options names the row as DeepSpeed prints it.
func (o DeepSpeedOption) Options(stage int) string {
	dev := func(b bool) string {
		if b {
			return "cpu"
		}
		return "none"
	}
	if stage < 3 {
		return "offload_optimizer=" + dev(o.OffloadOptimizer)
	}
	init := 0
	if o.ZeroInit {
		init = 1
	}
	return fmt.Sprintf("offload_param=%s, offload_optimizer=%s, zero_init=%d", dev(o.OffloadParams), dev(o.OffloadOptimizer), init)
}

// Offloaded is whether the row moves anything to the CPU.
func (o DeepSpeedOption) Offloaded() bool { return o.OffloadOptimizer || o.OffloadParams }

// DeepSpeedMemory is DeepSpeed's estimate table for a setup.
type DeepSpeedMemory struct {
	// Stage is the estimator's: 2 (estimate_zero2, which DeepSpeed's stage
	// 1 and 2 share) or 3.
	Stage int
	// Params is total_params, LargestLayer largest_layer_params (ZeRO-3)
	// and LargestName the module that has them ("" when given by hand).
	Params, LargestLayer int64
	LargestName          string
	Nodes, GPUsPerNode   int
	BufferFactor         float64
	// Options are the rows in the order DeepSpeed prints them.
	Options []DeepSpeedOption
}

// Row is the row a setup offloading off runs: offload_optimizer=cpu under
// OffloadOptimizer, offload_param=cpu too under OffloadParams, with
// zero_init=1 at ZeRO-3.
func (m DeepSpeedMemory) Row(off Offload) DeepSpeedOption {
	for _, o := range m.Options {
		if o.OffloadOptimizer == (off != OffloadNone) && o.OffloadParams == (off == OffloadParams) && (m.Stage < 3 || o.ZeroInit) {
			return o
		}
	}
	return DeepSpeedOption{}
}

// ErrNoDeepSpeed says a setup has no DeepSpeed estimate; the wrapping error
// says why.
var ErrNoDeepSpeed = errors.New("no DeepSpeed estimate")

// DeepSpeed is DeepSpeed's model-state estimate table for s on cluster c:
// ZeRO stages 1 and 2 by estimate_zero2, stage 3 by estimate_zero3, over
// the data-parallel ranks. It has none for stage 0, for tensor or pipeline
// parallelism (DeepSpeed's estimators count data parallelism alone), for a
// ZeRO-3 parameter count without a largest layer, and for a precision or
// optimizer other than mixed-precision Adam (its 2 + 18 bytes a parameter);
// those errors wrap ErrNoDeepSpeed.
func (s Setup) DeepSpeed(c Cluster) (DeepSpeedMemory, error) {
	if err := s.Validate(); err != nil {
		return DeepSpeedMemory{}, err
	}
	if err := c.Validate(s); err != nil {
		return DeepSpeedMemory{}, err
	}
	none := func(why string) (DeepSpeedMemory, error) {
		return DeepSpeedMemory{}, fmt.Errorf("%w: %s", ErrNoDeepSpeed, why)
	}
	switch {
	case s.ZeRO == 0:
		return none("DeepSpeed's estimators are for ZeRO stages 1 to 3 (estimate_zero2 for 1 and 2, estimate_zero3 for 3)")
	case s.TP > 1 || s.PP > 1:
		return none("DeepSpeed's estimators count data parallelism alone, not a tensor or pipeline split")
	case !s.Precision.Mixed() || (s.Optimizer != Adam && s.Optimizer != AdamW):
		return none(fmt.Sprintf("DeepSpeed's estimators count mixed-precision Adam (2 + 18 bytes a parameter), not %s %s", s.Precision, s.Optimizer))
	}
	nodes, perNode, _ := c.Nodes(s)
	m := DeepSpeedMemory{Stage: max(s.ZeRO, 2), Nodes: nodes, GPUsPerNode: perNode, BufferFactor: c.bufferFactor()}
	if s.ParamsOnly() {
		m.Params, m.LargestLayer = s.Params, c.LargestLayer
	} else {
		m.Params = s.Model.NumParams()
		m.LargestName, m.LargestLayer = s.Model.LargestModule()
	}
	if m.Stage == 2 {
		for _, off := range []bool{true, false} {
			cpu, gpu, err := DeepSpeedZeRO2(m.Params, perNode, nodes, off, m.BufferFactor)
			if err != nil {
				return DeepSpeedMemory{}, err
			}
			m.Options = append(m.Options, DeepSpeedOption{OffloadOptimizer: off, GPU: gpu, CPU: cpu})
		}
		return m, nil
	}
	if m.LargestLayer == 0 {
		return none("DeepSpeed's ZeRO-3 estimate needs the largest layer's parameters of a parameter count (--largest-layer)")
	}
	for _, opt := range []bool{true, false} {
		for _, params := range []bool{true, false} {
			if !opt && params {
				continue
			}
			for _, init := range []bool{true, false} {
				cpu, gpu, err := DeepSpeedZeRO3(m.Params, m.LargestLayer, perNode, nodes, opt, params, init, m.BufferFactor)
				if err != nil {
					return DeepSpeedMemory{}, err
				}
				m.Options = append(m.Options, DeepSpeedOption{OffloadOptimizer: opt, OffloadParams: params, ZeroInit: init, GPU: gpu, CPU: cpu})
			}
		}
	}
	return m, nil
}

// DeepSpeedZeRO2 is estimate_zero2_model_states_mem_needs(total_params,
// num_gpus_per_node, num_nodes, cpu_offload, additional_buffer_factor):
// bytes a node's CPU and bytes a GPU.
func DeepSpeedZeRO2(total int64, perNode, nodes int, offload bool, factor float64) (cpu, gpu int64, err error) {
	var c calc
	gpus := c.mul(int64(nodes), int64(perNode))
	var cpuF float64
	if offload {
		gpu = c.mul(2, total)
		cpuF = float64(c.mul(total, max(4*gpus, 16))) * factor
	} else {
		gpu = c.add(c.mul(2, total), pyInt(pyDiv(c.mul(18, total), gpus), &c))
		cpuF = float64(c.mul(total, 4, int64(perNode))) * factor
	}
	cpu = pyInt(cpuF, &c)
	return cpu, gpu, c.err()
}

// DeepSpeedZeRO3 is estimate_zero3_model_states_mem_needs(total_params,
// largest_layer_params, num_gpus_per_node, num_nodes, cpu_offload,
// cpu_offload_params, zero_init, additional_buffer_factor): bytes a node's
// CPU and bytes a GPU (its third result, 4·largest_layer_params, is the
// GPU figure's gathered layer).
func DeepSpeedZeRO3(total, largest int64, perNode, nodes int, offload, offloadParams, zeroInit bool, factor float64) (cpu, gpu int64, err error) {
	var c calc
	gpus := c.mul(int64(nodes), int64(perNode))
	gpusFactor := 1 / float64(nodes)
	largestMem := c.mul(4, largest)
	// total_params · max(4·num_gpus_per_node, k·gpus_factor) ·
	// additional_buffer_factor: Python's max keeps the integer unless the
	// float is larger, and an integer product stays exact.
	perGPUMax := func(k int64) float64 {
		i, f := int64(4*perNode), float64(k)*gpusFactor
		if f > float64(i) {
			return float64(total) * f * factor
		}
		return float64(c.mul(total, i)) * factor
	}
	var cpuF float64
	switch {
	case offload && offloadParams:
		gpu = largestMem
		if zeroInit {
			cpuF = float64(c.mul(total, 18)) * gpusFactor * factor
		} else {
			cpuF = perGPUMax(18)
		}
	case offload:
		gpu = c.add(largestMem, pyInt(pyDiv(c.mul(2, total), gpus), &c))
		if zeroInit {
			cpuF = float64(c.mul(total, 16)) * gpusFactor * factor
		} else {
			cpuF = perGPUMax(16)
		}
	default:
		gpu = c.add(largestMem, pyInt(pyDiv(c.mul(18, total), gpus), &c))
		if zeroInit {
			cpuF = float64(c.mul(largest, 4, int64(perNode))) * factor
		} else {
			cpuF = float64(c.mul(total, 4, int64(perNode))) * factor
		}
	}
	cpu = pyInt(cpuF, &c)
	return cpu, gpu, c.err()
}

// pyDiv is Python's a / b of two integers: the exact quotient rounded to
// the nearest float64.
func pyDiv(a, b int64) float64 {
	if b == 0 {
		return math.Inf(1)
	}
	f, _ := new(big.Rat).SetFrac64(a, b).Float64()
	return f
}

// pyInt is Python's int(x) of a float: truncated toward zero; an overflow
// past int64 (or a NaN) marks c.
func pyInt(x float64, c *calc) int64 {
	t := math.Trunc(x)
	if !(t >= 0 && t < math.MaxInt64) {
		c.overflow = true
		return 0
	}
	return int64(t)
}

// LargestModule is the largest module of the model as Hugging Face's
// class of its architecture holds it, and its parameters: DeepSpeed's
// model_to_params, which sums each module's own parameters (a linear
// layer's weight and bias). GPT-2's class fuses q, k and v into one c_attn
// and keeps c_fc whole; LLaMA's (a SwiGLU MLP) has q_proj, k_proj, v_proj,
// gate_proj and up_proj of their own. A tied head is the token embedding
// again, and an untied one a module of V·h.
func (c Config) LargestModule() (string, int64) {
	h := int64(c.Hidden)
	sizes := map[string]int64{}
	var order []string
	for _, p := range c.Params() {
		name, part := p.Name, p.Count
		if n := len(name); n > 2 && (name[n-2:] == ".w" || name[n-2:] == ".b") {
			name = name[:n-2]
		}
		if c.MLP == MLPSwiGLU {
			// LLaMA's separate projections: q is h of the qkv rows, k and v
			// kv each; gate and up halve fc.
			switch {
			case strings.HasSuffix(name, "attn.qkv"):
				kv := int64(c.kvWidth())
				per := part / (h + 2*kv) // the row's width: h for a weight, 1 for a bias
				add := func(n string, v int64) {
					if _, ok := sizes[n]; !ok {
						order = append(order, n)
					}
					sizes[n] += v
				}
				add(name+".q", per*h)
				add(name+".k", per*kv)
				add(name+".v", per*kv)
				continue
			case strings.HasSuffix(name, "mlp.fc"):
				for _, n := range []string{name + ".gate", name + ".up"} {
					if _, ok := sizes[n]; !ok {
						order = append(order, n)
					}
					sizes[n] += part / 2
				}
				continue
			}
		}
		if _, ok := sizes[name]; !ok {
			order = append(order, name)
		}
		sizes[name] += part
	}
	var best string
	var n int64
	for _, name := range order {
		if sizes[name] > n {
			best, n = name, sizes[name]
		}
	}
	return best, n
}
