package model

import (
	"errors"
	"math"
	"strings"
	"testing"
	"trainmem/cuda"
)

// The rows are what DeepSpeed's own functions return for these arguments:
// estimate_zero2_model_states_mem_needs (deepspeed/runtime/zero/
// stage_1_and_2.py) and estimate_zero3_model_states_mem_needs
// (deepspeed/runtime/zero/stage3.py) of microsoft/DeepSpeed 0.16.5
// (38327e07), run unchanged under CPython 3 (the functions need nothing of
// DeepSpeed's but their bodies). The gpt2 rows (3 GPUs a node, 5 nodes, a
// factor of 1.1) make the float arithmetic round.
func TestDeepSpeedMatchesItsCode(t *testing.T) {
	for _, c := range []struct {
		total          int64
		perNode, nodes int
		offload        bool
		factor         float64
		cpu, gpu       int64
	}{
		{1557611200, 1, 1, true, 1.5, 37382668800, 3115222400},    // gpt2-xl
		{1557611200, 1, 1, false, 1.5, 9345667200, 31152224000},   // gpt2-xl
		{1557611200, 8, 1, true, 1.5, 74765337600, 3115222400},    // gpt2-xl
		{1557611200, 8, 1, false, 1.5, 74765337600, 6619847600},   // gpt2-xl
		{1557611200, 8, 8, true, 1.5, 598122700800, 3115222400},   // gpt2-xl
		{1557611200, 8, 8, false, 1.5, 74765337600, 3553300550},   // gpt2-xl
		{6738415616, 1, 1, true, 1.5, 161721974784, 13476831232},  // llama2-7b
		{6738415616, 1, 1, false, 1.5, 40430493696, 134768312320}, // llama2-7b
		{6738415616, 1, 1, true, 2.0, 215629299712, 13476831232},  // llama2-7b
		{6738415616, 1, 1, false, 2.0, 53907324928, 134768312320}, // llama2-7b
		{6738415616, 8, 1, true, 1.5, 323443949568, 13476831232},  // llama2-7b
		{6738415616, 8, 1, false, 1.5, 323443949568, 28638266368}, // llama2-7b
		{6738415616, 8, 1, true, 2.0, 431258599424, 13476831232},  // llama2-7b
		{6738415616, 8, 1, false, 2.0, 431258599424, 28638266368}, // llama2-7b
		{6738415616, 8, 8, true, 1.5, 2587551596544, 13476831232}, // llama2-7b
		{6738415616, 8, 8, false, 1.5, 323443949568, 15372010624}, // llama2-7b
		{6738415616, 8, 8, true, 2.0, 3450068795392, 13476831232}, // llama2-7b
		{6738415616, 8, 8, false, 2.0, 431258599424, 15372010624}, // llama2-7b
		{7500000000, 8, 8, true, 1.5, 2880000000000, 15000000000}, // 7.5B
		{7500000000, 8, 8, false, 1.5, 360000000000, 17109375000}, // 7.5B
		{124439808, 3, 5, true, 1.1, 8213027328, 248879616},       // gpt2
		{124439808, 3, 5, false, 1.1, 1642605465, 398207385},      // gpt2
	} {
		cpu, gpu, err := DeepSpeedZeRO2(c.total, c.perNode, c.nodes, c.offload, c.factor)
		if err != nil || cpu != c.cpu || gpu != c.gpu {
			t.Errorf("zero2(%d, %d, %d, %t, %v) = %d, %d, %v; DeepSpeed gives %d, %d", c.total, c.perNode, c.nodes, c.offload, c.factor, cpu, gpu, err, c.cpu, c.gpu)
		}
	}
	for _, c := range []struct {
		total, largest            int64
		perNode, nodes            int
		offload, params, zeroInit bool
		factor                    float64
		cpu, gpu                  int64
	}{
		{1557611200, 80411200, 1, 1, true, true, true, 1.5, 42055502400, 321644800},        // gpt2-xl
		{1557611200, 80411200, 1, 1, true, true, false, 1.5, 42055502400, 321644800},       // gpt2-xl
		{1557611200, 80411200, 1, 1, true, false, true, 1.5, 37382668800, 3436867200},      // gpt2-xl
		{1557611200, 80411200, 1, 1, true, false, false, 1.5, 37382668800, 3436867200},     // gpt2-xl
		{1557611200, 80411200, 1, 1, false, false, true, 1.5, 482467200, 28358646400},      // gpt2-xl
		{1557611200, 80411200, 1, 1, false, false, false, 1.5, 9345667200, 28358646400},    // gpt2-xl
		{1557611200, 80411200, 8, 1, true, true, true, 1.5, 42055502400, 321644800},        // gpt2-xl
		{1557611200, 80411200, 8, 1, true, true, false, 1.5, 74765337600, 321644800},       // gpt2-xl
		{1557611200, 80411200, 8, 1, true, false, true, 1.5, 37382668800, 711047600},       // gpt2-xl
		{1557611200, 80411200, 8, 1, true, false, false, 1.5, 74765337600, 711047600},      // gpt2-xl
		{1557611200, 80411200, 8, 1, false, false, true, 1.5, 3859737600, 3826270000},      // gpt2-xl
		{1557611200, 80411200, 8, 1, false, false, false, 1.5, 74765337600, 3826270000},    // gpt2-xl
		{1557611200, 80411200, 8, 8, true, true, true, 1.5, 5256937800, 321644800},         // gpt2-xl
		{1557611200, 80411200, 8, 8, true, true, false, 1.5, 74765337600, 321644800},       // gpt2-xl
		{1557611200, 80411200, 8, 8, true, false, true, 1.5, 4672833600, 370320150},        // gpt2-xl
		{1557611200, 80411200, 8, 8, true, false, false, 1.5, 74765337600, 370320150},      // gpt2-xl
		{1557611200, 80411200, 8, 8, false, false, true, 1.5, 3859737600, 759722950},       // gpt2-xl
		{1557611200, 80411200, 8, 8, false, false, false, 1.5, 74765337600, 759722950},     // gpt2-xl
		{6738415616, 131072000, 1, 1, true, true, true, 1.5, 181937221632, 524288000},      // llama2-7b
		{6738415616, 131072000, 1, 1, true, true, false, 1.5, 181937221632, 524288000},     // llama2-7b
		{6738415616, 131072000, 1, 1, true, false, true, 1.5, 161721974784, 14001119232},   // llama2-7b
		{6738415616, 131072000, 1, 1, true, false, false, 1.5, 161721974784, 14001119232},  // llama2-7b
		{6738415616, 131072000, 1, 1, false, false, true, 1.5, 786432000, 121815769088},    // llama2-7b
		{6738415616, 131072000, 1, 1, false, false, false, 1.5, 40430493696, 121815769088}, // llama2-7b
		{6738415616, 131072000, 1, 1, true, true, true, 2.0, 242582962176, 524288000},      // llama2-7b
		{6738415616, 131072000, 1, 1, true, true, false, 2.0, 242582962176, 524288000},     // llama2-7b
		{6738415616, 131072000, 1, 1, true, false, true, 2.0, 215629299712, 14001119232},   // llama2-7b
		{6738415616, 131072000, 1, 1, true, false, false, 2.0, 215629299712, 14001119232},  // llama2-7b
		{6738415616, 131072000, 1, 1, false, false, true, 2.0, 1048576000, 121815769088},   // llama2-7b
		{6738415616, 131072000, 1, 1, false, false, false, 2.0, 53907324928, 121815769088}, // llama2-7b
		{6738415616, 131072000, 8, 1, true, true, true, 1.5, 181937221632, 524288000},      // llama2-7b
		{6738415616, 131072000, 8, 1, true, true, false, 1.5, 323443949568, 524288000},     // llama2-7b
		{6738415616, 131072000, 8, 1, true, false, true, 1.5, 161721974784, 2208891904},    // llama2-7b
		{6738415616, 131072000, 8, 1, true, false, false, 1.5, 323443949568, 2208891904},   // llama2-7b
		{6738415616, 131072000, 8, 1, false, false, true, 1.5, 6291456000, 15685723136},    // llama2-7b
		{6738415616, 131072000, 8, 1, false, false, false, 1.5, 323443949568, 15685723136}, // llama2-7b
		{6738415616, 131072000, 8, 1, true, true, true, 2.0, 242582962176, 524288000},      // llama2-7b
		{6738415616, 131072000, 8, 1, true, true, false, 2.0, 431258599424, 524288000},     // llama2-7b
		{6738415616, 131072000, 8, 1, true, false, true, 2.0, 215629299712, 2208891904},    // llama2-7b
		{6738415616, 131072000, 8, 1, true, false, false, 2.0, 431258599424, 2208891904},   // llama2-7b
		{6738415616, 131072000, 8, 1, false, false, true, 2.0, 8388608000, 15685723136},    // llama2-7b
		{6738415616, 131072000, 8, 1, false, false, false, 2.0, 431258599424, 15685723136}, // llama2-7b
		{6738415616, 131072000, 8, 8, true, true, true, 1.5, 22742152704, 524288000},       // llama2-7b
		{6738415616, 131072000, 8, 8, true, true, false, 1.5, 323443949568, 524288000},     // llama2-7b
		{6738415616, 131072000, 8, 8, true, false, true, 1.5, 20215246848, 734863488},      // llama2-7b
		{6738415616, 131072000, 8, 8, true, false, false, 1.5, 323443949568, 734863488},    // llama2-7b
		{6738415616, 131072000, 8, 8, false, false, true, 1.5, 6291456000, 2419467392},     // llama2-7b
		{6738415616, 131072000, 8, 8, false, false, false, 1.5, 323443949568, 2419467392},  // llama2-7b
		{6738415616, 131072000, 8, 8, true, true, true, 2.0, 30322870272, 524288000},       // llama2-7b
		{6738415616, 131072000, 8, 8, true, true, false, 2.0, 431258599424, 524288000},     // llama2-7b
		{6738415616, 131072000, 8, 8, true, false, true, 2.0, 26953662464, 734863488},      // llama2-7b
		{6738415616, 131072000, 8, 8, true, false, false, 2.0, 431258599424, 734863488},    // llama2-7b
		{6738415616, 131072000, 8, 8, false, false, true, 2.0, 8388608000, 2419467392},     // llama2-7b
		{6738415616, 131072000, 8, 8, false, false, false, 2.0, 431258599424, 2419467392},  // llama2-7b
		{7500000000, 200000000, 8, 8, true, true, true, 1.5, 25312500000, 800000000},       // 7.5B
		{7500000000, 200000000, 8, 8, true, true, false, 1.5, 360000000000, 800000000},     // 7.5B
		{7500000000, 200000000, 8, 8, true, false, true, 1.5, 22500000000, 1034375000},     // 7.5B
		{7500000000, 200000000, 8, 8, true, false, false, 1.5, 360000000000, 1034375000},   // 7.5B
		{7500000000, 200000000, 8, 8, false, false, true, 1.5, 9600000000, 2909375000},     // 7.5B
		{7500000000, 200000000, 8, 8, false, false, false, 1.5, 360000000000, 2909375000},  // 7.5B
		{124439808, 38597376, 3, 5, true, true, true, 1.1, 492781639, 154389504},           // gpt2
		{124439808, 38597376, 3, 5, true, true, false, 1.1, 1642605465, 154389504},         // gpt2
		{124439808, 38597376, 3, 5, true, false, true, 1.1, 438028124, 170981478},          // gpt2
		{124439808, 38597376, 3, 5, true, false, false, 1.1, 1642605465, 170981478},        // gpt2
		{124439808, 38597376, 3, 5, false, false, true, 1.1, 509485363, 303717273},         // gpt2
		{124439808, 38597376, 3, 5, false, false, false, 1.1, 1642605465, 303717273},       // gpt2
	} {
		cpu, gpu, err := DeepSpeedZeRO3(c.total, c.largest, c.perNode, c.nodes, c.offload, c.params, c.zeroInit, c.factor)
		if err != nil || cpu != c.cpu || gpu != c.gpu {
			t.Errorf("zero3(%d, %d, %d, %d, %t, %t, %t, %v) = %d, %d, %v; DeepSpeed gives %d, %d", c.total, c.largest, c.perNode, c.nodes, c.offload, c.params, c.zeroInit, c.factor, cpu, gpu, err, c.cpu, c.gpu)
		}
	}
}

// The figures for gpt2-xl in fp16 over 64 ranks (8 nodes of 8),
// DeepSpeed's functions run on its counts: 3,553,300,550 bytes a GPU at
// ZeRO-2 and 759,722,950 at ZeRO-3, whose largest layer is the token
// embedding, 50257 × 1600.
func TestDeepSpeedOfASetup(t *testing.T) {
	xl, _ := Preset("gpt2-xl")
	s := Setup{Model: xl, Batch: 1, Seq: 1024, Precision: FP16, Optimizer: Adam, Ranks: 64, TP: 1, PP: 1}
	for _, c := range []struct {
		zero, stage int
		gpu         int64
		rows        int
	}{{1, 2, 3553300550, 2}, {2, 2, 3553300550, 2}, {3, 3, 759722950, 6}} {
		s.ZeRO = c.zero
		m, err := s.DeepSpeed(Cluster{})
		if err != nil {
			t.Fatal(err)
		}
		if m.Stage != c.stage || m.Nodes != 8 || m.GPUsPerNode != 8 || len(m.Options) != c.rows || m.Row(OffloadNone).GPU != c.gpu {
			t.Errorf("zero %d: %+v, want estimator %d, 8 × 8, %d rows, %d bytes a GPU without offload", c.zero, m, c.stage, c.rows, c.gpu)
		}
		if m.Params != 1557611200 || (c.zero == 3 && (m.LargestLayer != 80411200 || m.LargestName != "wte")) {
			t.Errorf("zero %d: counts %d, largest %s %d", c.zero, m.Params, m.LargestName, m.LargestLayer)
		}
	}
	// The cold case: a parameter count with the largest layer by hand.
	cold := Setup{Params: 1557611200, Precision: BF16, Optimizer: AdamW, Ranks: 64, ZeRO: 3, TP: 1, PP: 1}
	m, err := cold.DeepSpeed(Cluster{LargestLayer: 80411200, GPUsPerNode: 4, BufferFactor: 2})
	if err != nil || m.Nodes != 16 || m.Row(OffloadNone).GPU != 759722950 || m.Options[0].Options(3) != "offload_param=cpu, offload_optimizer=cpu, zero_init=1" {
		t.Errorf("cold: %+v, %v", m, err)
	}
	if want, _, _ := DeepSpeedZeRO3(1557611200, 80411200, 4, 16, true, true, true, 2); m.Options[0].CPU != want {
		t.Errorf("cold: CPU %d with factor 2, want %d", m.Options[0].CPU, want)
	}
}

func TestDeepSpeedRefusals(t *testing.T) {
	xl, _ := Preset("gpt2-xl")
	base := Setup{Model: xl, Batch: 1, Seq: 1024, Precision: FP16, Optimizer: Adam, Ranks: 8, ZeRO: 2, TP: 1, PP: 1}
	for _, c := range []struct {
		name    string
		edit    func(*Setup, *Cluster)
		none    bool // ErrNoDeepSpeed rather than a bad value
		message string
		arg     string // the *cuda.ArgError's What, for a value out of range
	}{
		{"stage 0", func(s *Setup, _ *Cluster) { s.ZeRO = 0 }, true, "stages 1 to 3", ""},
		{"tensor parallel", func(s *Setup, _ *Cluster) { s.TP, s.Ranks = 5, 1 }, true, "data parallelism alone", ""},
		{"fp32", func(s *Setup, _ *Cluster) { s.Precision = FP32 }, true, "not fp32 adam", ""},
		{"sgd", func(s *Setup, _ *Cluster) { s.Optimizer = SGD }, true, "not fp16 sgd", ""},
		{"cold zero-3 without its largest layer", func(s *Setup, _ *Cluster) {
			*s = Setup{Params: 7.5e9, Precision: BF16, Ranks: 8, ZeRO: 3, TP: 1, PP: 1}
		}, true, "--largest-layer", ""},
		{"GPUs a node not dividing the world", func(_ *Setup, c *Cluster) { c.GPUsPerNode = 3 }, false, "3 GPUs a node do not divide the world of 8 ranks (ranks × tp × pp; valid: 1, 2, 4, 8)", ""},
		{"negative GPUs a node", func(_ *Setup, c *Cluster) { c.GPUsPerNode = -1 }, false, "must be a positive integer", "GPUs a node"},
		{"a NaN factor", func(_ *Setup, c *Cluster) { c.BufferFactor = math.NaN() }, false, "buffer factor NaN", "buffer factor"},
		{"a negative largest layer", func(s *Setup, c *Cluster) {
			*s = Setup{Params: 100, Precision: BF16, Ranks: 8, ZeRO: 3, TP: 1, PP: 1}
			c.LargestLayer = -1
		}, false, "must be ≥ 0", "largest layer"},
		{"a largest layer for a shape", func(_ *Setup, c *Cluster) { c.LargestLayer = 10 }, false, "counts its own", ""},
		{"a largest layer past the model", func(s *Setup, c *Cluster) {
			*s = Setup{Params: 100, Precision: BF16, Ranks: 8, ZeRO: 3, TP: 1, PP: 1}
			c.LargestLayer = 101
		}, false, "at most the model's", ""},
	} {
		s, cl := base, Cluster{}
		c.edit(&s, &cl)
		_, err := s.DeepSpeed(cl)
		if err == nil || errors.Is(err, ErrNoDeepSpeed) != c.none || !strings.Contains(err.Error(), c.message) {
			t.Errorf("%s: %v, want %q (no estimate: %t)", c.name, err, c.message, c.none)
		}
		// A value out of range is a typed error its caller reads by field
		// (the command line named the flag by trimming "model: " off the
		// text).
		var ae *cuda.ArgError
		if got := errors.As(err, &ae); got != (c.arg != "") || got && ae.What != c.arg {
			t.Errorf("%s: %#v, want an ArgError about %q: %t", c.name, err, c.arg, c.arg != "")
		}
	}
}

// Hugging Face's modules as model_to_params sums them: GPT2LMHeadModel's
// wte (V·h) beside a block's c_attn (h·3h + 3h) and c_fc (h·4h + 4h);
// LlamaForCausalLM's embed_tokens and lm_head (V·h) beside gate_proj and
// up_proj (h·F each, no bias).
func TestLargestModule(t *testing.T) {
	for _, c := range []struct {
		preset string
		edit   func(*Config)
		name   string
		want   int64
	}{
		{"gpt2-xl", nil, "wte", 50257 * 1600},
		{"gpt2", nil, "wte", 50257 * 768},
		{"llama2-7b", nil, "wte", 32000 * 4096},
		{"gpt2", func(c *Config) { c.Vocab = 256 }, "h0.mlp.fc", 768*3072 + 3072},
		// LLaMA's gate_proj alone, not the fused gate and up.
		{"llama2-7b", func(c *Config) { c.Vocab = 256 }, "h0.mlp.fc.gate", 4096 * 11008},
		// Its q_proj (h·h) is larger than k_proj or v_proj of 4 KV heads.
		{"tinyllama-1.1b", func(c *Config) { c.Vocab, c.FFN = 8, 1024 }, "h0.attn.qkv.q", 2048 * 2048},
	} {
		m, err := Preset(c.preset)
		if err != nil {
			t.Fatal(err)
		}
		if c.edit != nil {
			c.edit(&m)
		}
		if name, n := m.LargestModule(); name != c.name || n != c.want {
			t.Errorf("%s: %s %d, want %s %d", c.preset, name, n, c.name, c.want)
		}
	}
}
