package model

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// LoRA is a low-rank adaptation of the linear layers (Hu et al. 2021,
// "LoRA: Low-Rank Adaptation of Large Language Models", Section 4.1):
// each targeted projection W (out × in) is frozen and gains two trained
// matrices, A (r × in) and B (out × r), its output becoming
// x·Wᵀ + (α/r)·x·Aᵀ·Bᵀ. Everything else in the model is frozen too, as
// PEFT's get_peft_model leaves it. The zero value adapts nothing.
//
// A projection is what PEFT adapts as one module: Hugging Face GPT-2's
// c_attn (the query, key and value projections in one matrix), c_proj and
// c_fc; LLaMA's q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj and
// down_proj, of which trainmem stacks q, k and v in attn.qkv and gate and
// up in mlp.fc: an adapted projection of a stacked layer adds into its
// columns only.
type LoRA struct {
	Rank    int
	Alpha   float64 // α; the scale is α/r (DefaultLoRAAlpha: PEFT's)
	Targets LoRATargets
	// RSLoRA scales by α/√r instead (Kalajdzievski 2023; PEFT's
	// use_rslora).
	RSLoRA bool
}

// On reports whether l adapts anything.
func (l LoRA) On() bool { return l.Rank > 0 }

// Scale is α/r, or α/√r with RSLoRA (PEFT's scaling).
func (l LoRA) Scale() float32 {
	if l.RSLoRA {
		return float32(l.Alpha / math.Sqrt(float64(l.Rank)))
	}
	return float32(l.Alpha / float64(l.Rank))
}

// LoRATargets is the projections a LoRA adapts, one bit a projection.
type LoRATargets uint16

const (
	TargetQ    LoRATargets = 1 << iota // LLaMA's q_proj: attn.qkv's query columns
	TargetK                            // k_proj: its key columns
	TargetV                            // v_proj: its value columns
	TargetQKV                          // GPT-2's c_attn: attn.qkv whole, one adapter
	TargetO                            // o_proj, GPT-2's attn.c_proj: attn.proj
	TargetGate                         // gate_proj: mlp.fc's gate columns (SwiGLU)
	TargetUp                           // up_proj: mlp.fc's up columns (SwiGLU)
	TargetFC                           // GPT-2's c_fc: mlp.fc whole (GELU)
	TargetDown                         // down_proj, GPT-2's mlp.c_proj: mlp.proj
)

// loraNames are the module names PEFT's target_modules match, by the
// architecture's module naming (Hugging Face's GPT-2 or LLaMA), with the
// bits each adapts. GPT-2's c_proj is both its attention's and its MLP's
// output projection, as PEFT's suffix match takes it.
var loraNames = map[bool][]struct {
	name string
	bits LoRATargets
}{
	false: { // GPT-2's modules (a GELU MLP)
		{"c_attn", TargetQKV}, {"c_proj", TargetO | TargetDown}, {"attn.c_proj", TargetO}, {"mlp.c_proj", TargetDown}, {"c_fc", TargetFC},
	},
	true: { // LLaMA's (a SwiGLU MLP)
		{"q_proj", TargetQ}, {"k_proj", TargetK}, {"v_proj", TargetV}, {"o_proj", TargetO},
		{"gate_proj", TargetGate}, {"up_proj", TargetUp}, {"down_proj", TargetDown},
	},
}

// llamaModules reports whether c's linear layers are named as LLaMA's (a
// SwiGLU MLP: q_proj ... down_proj) or as GPT-2's (c_attn, c_proj, c_fc).
func (c Config) llamaModules() bool { return c.MLP == MLPSwiGLU }

// LoRATargetNames says the names a --lora-targets of c takes.
func (c Config) LoRATargetNames() string {
	var ns []string
	for _, n := range loraNames[c.llamaModules()] {
		ns = append(ns, n.name)
	}
	return strings.Join(ns, ", ") + ", or attention, mlp, all-linear"
}

// DefaultLoRATargets is what PEFT adapts when target_modules is not
// given (peft/utils/constants.py,
// TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING): LLaMA's q_proj and
// v_proj, GPT-2's c_attn.
func (c Config) DefaultLoRATargets() LoRATargets {
	if c.llamaModules() {
		return TargetQ | TargetV
	}
	return TargetQKV
}

// ParseLoRATargets reads module names (comma-separated, as PEFT's
// target_modules lists them) and the shorthands attention (every
// attention projection), mlp (every MLP projection) and all-linear (every
// linear layer but the output head, PEFT's "all-linear").
func (c Config) ParseLoRATargets(s string) (LoRATargets, error) {
	var t LoRATargets
	llama := c.llamaModules()
	attention, mlp := TargetQKV|TargetO, TargetFC|TargetDown
	if llama {
		attention, mlp = TargetQ|TargetK|TargetV|TargetO, TargetGate|TargetUp|TargetDown
	}
	for _, name := range strings.Split(s, ",") {
		name = strings.TrimSpace(name)
		switch name {
		case "attention":
			t |= attention
			continue
		case "mlp":
			t |= mlp
			continue
		case "all-linear":
			t |= attention | mlp
			continue
		}
		i := slices.IndexFunc(loraNames[llama], func(n struct {
			name string
			bits LoRATargets
		}) bool {
			return n.name == name
		})
		if i < 0 {
			return 0, fmt.Errorf("model: LoRA target %q is no linear layer of %s (valid: %s)", name, c.Name, c.LoRATargetNames())
		}
		t |= loraNames[llama][i].bits
	}
	if t == 0 {
		return 0, fmt.Errorf("model: no LoRA targets in %q (valid: %s)", s, c.LoRATargetNames())
	}
	return t, nil
}

// Names is t as the module names of c (for the text reports and PEFT's
// adapter_config.json).
func (t LoRATargets) Names(c Config) []string {
	var ns []string
	left := t
	for _, n := range loraNames[c.llamaModules()] {
		if n.bits&left == n.bits && n.bits != TargetO|TargetDown {
			ns = append(ns, n.name)
			left &^= n.bits
		}
	}
	return ns
}

// check refuses a LoRA c cannot take: a rank out of range, a target its
// layers do not have, or other parts frozen beside it.
func (l LoRA) check(c Config) error {
	if !l.On() {
		if l != (LoRA{}) {
			return fmt.Errorf("model: LoRA alpha %g or targets without a rank (valid: a rank from 1)", l.Alpha)
		}
		return nil
	}
	valid := TargetQKV | TargetO | TargetFC | TargetDown
	if c.llamaModules() {
		valid = TargetQ | TargetK | TargetV | TargetO | TargetGate | TargetUp | TargetDown
	}
	switch {
	case l.Rank > MaxLoRARank || l.Rank > c.Hidden:
		return fmt.Errorf("model: LoRA rank %d (valid: 1 to %d, at most the hidden size)", l.Rank, min(MaxLoRARank, c.Hidden))
	case !(l.Alpha > 0) || l.Alpha > 1e6 || math.IsInf(l.Alpha, 0):
		return fmt.Errorf("model: LoRA alpha %g (valid: above 0, up to 1e6)", l.Alpha)
	case l.Targets == 0 || l.Targets&^valid != 0:
		return fmt.Errorf("model: LoRA targets %#x are not %s's layers (valid: %s)", uint16(l.Targets), c.Name, c.LoRATargetNames())
	case c.Freeze.Any():
		return fmt.Errorf("model: LoRA with --freeze %s: LoRA freezes every weight but its adapters already (valid: one of them)", c.Freeze)
	}
	return nil
}

// MaxLoRARank bounds a LoRA's rank.
const MaxLoRARank = 4096

// adapter is one adapted linear layer's LoRA: the column ranges of its
// output that each adapted projection adds into (one a projection, in
// order), A stacked ((parts·r) × in) and B stacked (Σ widths × r).
type adapter struct {
	parts [][2]int
}

// rows is B's rows: the adapted columns.
func (a adapter) rows() int {
	n := 0
	for _, p := range a.parts {
		n += p[1] - p[0]
	}
	return n
}

// adapterOf is the LoRA of the block's linear layer name ("attn.qkv",
// "attn.proj", "mlp.fc", "mlp.proj") of c, false when it has none.
func (c Config) adapterOf(name string) (adapter, bool) {
	l := c.LoRA
	if !l.On() {
		return adapter{}, false
	}
	h, kv, F := c.Hidden, c.kvWidth(), c.FFNWidth()
	var a adapter
	add := func(bit LoRATargets, lo, hi int) {
		if l.Targets&bit != 0 {
			a.parts = append(a.parts, [2]int{lo, hi})
		}
	}
	switch name {
	case "attn.qkv":
		add(TargetQKV, 0, h+2*kv)
		add(TargetQ, 0, h)
		add(TargetK, h, h+kv)
		add(TargetV, h+kv, h+2*kv)
	case "attn.proj":
		add(TargetO, 0, h)
	case "mlp.fc":
		add(TargetFC, 0, F)
		add(TargetGate, 0, F)
		add(TargetUp, F, 2*F)
	case "mlp.proj":
		add(TargetDown, 0, h)
	}
	return a, len(a.parts) > 0
}

// adaptedLayers are the block's linear layers in table order, with their
// input widths.
func (c Config) adaptedLayers() []struct {
	name string
	in   int
} {
	return []struct {
		name string
		in   int
	}{{"attn.qkv", c.Hidden}, {"attn.proj", c.Hidden}, {"mlp.fc", c.Hidden}, {"mlp.proj", c.FFNWidth()}}
}

// loraParams is one block's adapter parameters: r·(parts·in + Σ widths) a
// layer (PEFT's r·(in + out) a module).
func (c Config) loraParams() int64 {
	var n int64
	for _, la := range c.adaptedLayers() {
		if a, ok := c.adapterOf(la.name); ok {
			n += int64(c.LoRA.Rank) * (int64(len(a.parts)*la.in) + int64(a.rows()))
		}
	}
	return n
}

// DefaultLoRAAlpha is PEFT's LoraConfig default lora_alpha, 8.
const DefaultLoRAAlpha = 8

// fineTune reports whether c trains part of its weights only.
func (c Config) fineTune() bool { return c.Freeze.Any() || c.LoRA.On() }

// FrozenBy says what freezes c's frozen weights: "--freeze layers:4", or
// "LoRA r 16 (the base model)"; "" when nothing is frozen.
func (c Config) FrozenBy() string {
	var by string
	switch {
	case c.LoRA.On():
		by = fmt.Sprintf("LoRA r %d on %s: the base model", c.LoRA.Rank, strings.Join(c.LoRA.Targets.Names(c), ", "))
	case c.Freeze.Any():
		by = "--freeze " + c.Freeze.String()
	}
	if by != "" && c.Quantize != QuantNone {
		by += fmt.Sprintf(", its blocks' linear weights in %s", c.Quantize)
	}
	return by
}
