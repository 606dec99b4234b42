package train

import (
	"strings"
	"testing"

	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"trainmem/cuda"
	"trainmem/model"
)

func compileFor(t *testing.T, cfg model.Config, B, T int, pol model.Checkpoint) *Schedule {
	t.Helper()
	gr, err := model.Build(cfg, B, T, tensor.Float32)
	if err != nil {
		t.Fatal(err)
	}
	s, err := compile(gr, storageOf(model.FP32, model.GradsLikeWeights, false), pol)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

var policies = map[string]model.Checkpoint{
	"none":      {Kind: model.CheckpointNone},
	"full":      {Kind: model.CheckpointFull},
	"every:2":   {Kind: model.CheckpointEvery, Every: 2},
	"sqrt":      {Kind: model.CheckpointSqrt},
	"selective": {Kind: model.CheckpointSelective},
}

// TestScheduleLiveness replays each schedule and checks that every argument
// is live when read, every value is freed exactly once, nothing but the
// persistent slots outlives the step, and each dropped value is recomputed
// exactly once before the backward pass reads it.
func TestScheduleLiveness(t *testing.T) {
	cfg := model.Config{Name: "t4", Layers: 4, Hidden: 32, Heads: 4, Vocab: 64, Context: 16}
	for name, pol := range policies {
		t.Run(name, func(t *testing.T) {
			s := compileFor(t, cfg, 2, 8, pol)
			live := make([]bool, len(s.Slots))
			freed := make([]bool, len(s.Slots))
			for i, sl := range s.Slots {
				live[i] = sl.Persistent
			}
			computed := map[string]int{}
			phaseOf := map[int]Phase{}
			for i, in := range s.Instrs {
				phaseOf[in.Out] = in.Phase
				for _, a := range in.Args {
					if p, ok := phaseOf[a]; ok && p == Forward && s.Slots[a].Cat.String() == "temporaries" && in.Phase != Forward {
						t.Fatalf("instr %d (%s %s) reads the forward temporary %s", i, in.Phase, in.Node.Name(), s.Slots[a].Node.Name())
					}
					if !live[a] && !s.Slots[a].Input {
						t.Fatalf("instr %d (%s %s) reads slot %d (%s), not live", i, in.Phase, in.Node.Name(), a, s.Slots[a].Node.Name())
					}
					if freed[a] {
						t.Fatalf("instr %d reads freed slot %d", i, a)
					}
					live[a] = true
				}
				if live[in.Out] && !s.Slots[in.Out].Persistent {
					t.Fatalf("instr %d writes slot %d twice", i, in.Out)
				}
				live[in.Out] = true
				computed[in.Node.Name()]++
				for _, f := range in.Free {
					if freed[f] || s.Slots[f].Persistent {
						t.Fatalf("instr %d frees slot %d twice or frees a persistent slot", i, f)
					}
					freed[f], live[f] = true, false
				}
			}
			for i, sl := range s.Slots {
				if live[i] && !sl.Persistent {
					t.Errorf("slot %d (%s) outlives the step", i, sl.Node.Name())
				}
			}
			for _, d := range s.Dropped {
				if computed[d.Name()] != 2 {
					t.Errorf("dropped %s computed %d times, want 2", d.Name(), computed[d.Name()])
				}
			}
			wantDropped := name != "none"
			if (len(s.Dropped) > 0) != wantDropped {
				t.Errorf("%d values dropped", len(s.Dropped))
			}
			t.Log(s.Summary())
		})
	}
}

// Selective checkpointing drops exactly the attention probabilities, one
// tensor a block.
func TestSelectiveDropsAttentionProbs(t *testing.T) {
	cfg := model.Config{Name: "t3", Layers: 3, Hidden: 32, Heads: 4, Vocab: 64, Context: 16}
	s := compileFor(t, cfg, 2, 8, model.Checkpoint{Kind: model.CheckpointSelective})
	if len(s.Dropped) != cfg.Layers {
		t.Fatalf("%d dropped, want %d", len(s.Dropped), cfg.Layers)
	}
	for _, d := range s.Dropped {
		if !model.IsDroppedBySelective(d.Op()) {
			t.Errorf("dropped %s (%v)", d.Name(), d.Op())
		}
	}
}

// Full checkpointing keeps, of each block's values, only what crosses into
// the next block: the residual stream.
func TestFullCheckpointKeepsBlockInputs(t *testing.T) {
	cfg := model.Config{Name: "t3", Layers: 3, Hidden: 32, Heads: 4, Vocab: 64, Context: 16}
	s := compileFor(t, cfg, 2, 8, model.Checkpoint{Kind: model.CheckpointFull})
	kept := map[int]int{}
	for _, in := range s.Instrs {
		if in.Phase == Forward && s.Slots[in.Out].Cat.String() == "activations" && in.Layer >= 0 && in.Layer < cfg.Layers {
			kept[in.Layer]++
		}
	}
	for l := 0; l < cfg.Layers; l++ {
		if kept[l] != 1 {
			t.Errorf("block %d keeps %d values after the forward pass, want 1 (its output)", l, kept[l])
		}
	}
}

// newCompiler runs compile's passes up to and including last.
func newCompiler(t *testing.T, cfg model.Config, pol model.Checkpoint, last string) *compiler {
	t.Helper()
	gr, err := model.Build(cfg, 2, 8, tensor.Float32)
	if err != nil {
		t.Fatal(err)
	}
	c := &compiler{gr: gr, st: storageOf(model.FP32, model.GradsLikeWeights, false), pol: pol, s: &Schedule{Graph: gr}}
	for _, p := range c.passes() {
		if err := p.run(); err != nil {
			t.Fatalf("pass %s: %v", p.name, err)
		}
		if p.name == last {
			return c
		}
	}
	t.Fatalf("no pass %q", last)
	return nil
}

// The passes one by one, each against a reference computed another way.
func TestCompilerPasses(t *testing.T) {
	cfg := model.Config{Name: "t3", Layers: 3, Hidden: 32, Heads: 4, Vocab: 64, Context: 16}

	t.Run("order", func(t *testing.T) {
		c := newCompiler(t, cfg, model.Checkpoint{}, "order")
		pos := map[*gorgonia.Node]int{}
		for i, n := range c.nodes {
			pos[n] = i
		}
		for i, n := range c.nodes {
			for _, a := range c.gr.Args(n) {
				if p, ok := pos[a]; !ok || p >= i {
					t.Fatalf("%s (at %d) reads %s (at %d, listed %t): not a topological order", n.Name(), i, a.Name(), p, ok)
				}
			}
		}
		for _, r := range append(gorgonia.Nodes{c.gr.Loss}, c.gr.Grads...) {
			if _, ok := pos[r]; !ok {
				t.Errorf("root %s is not in the order", r.Name())
			}
		}
		if c.gradOf.len() != len(c.gr.Grads) {
			t.Errorf("%d gradient rows, want %d", c.gradOf.len(), len(c.gr.Grads))
		}
	})

	t.Run("phases", func(t *testing.T) {
		c := newCompiler(t, cfg, model.Checkpoint{}, "phases")
		// Reference: walk the graph's edges backwards from the loss seed.
		want := map[*gorgonia.Node]bool{}
		var reach func(n *gorgonia.Node)
		reach = func(n *gorgonia.Node) {
			if want[n] {
				return
			}
			want[n] = true
			for _, m := range c.nodes {
				for _, a := range c.gr.Args(m) {
					if a == n {
						reach(m)
					}
				}
			}
		}
		reach(c.gr.DLoss)
		for _, n := range c.nodes {
			if c.isBackward.at(n) != want[n] {
				t.Errorf("%s: backward %t, want %t", n.Name(), c.isBackward.at(n), want[n])
			}
		}
		if c.isBackward.at(c.gr.Loss) || !c.isBackward.at(c.gr.Grads[0]) {
			t.Error("the loss is backward or a gradient is not")
		}
	})

	t.Run("segments", func(t *testing.T) {
		if c := newCompiler(t, cfg, model.Checkpoint{}, "segments"); c.dropped.len() != 0 {
			t.Errorf("no checkpointing drops %d values", c.dropped.len())
		}
		c := newCompiler(t, cfg, model.Checkpoint{Kind: model.CheckpointFull}, "segments")
		if c.dropped.len() == 0 {
			t.Fatal("full checkpointing drops nothing")
		}
		for _, n := range c.s.Dropped {
			l := layerOf(c.gr, n)
			if l < 0 || l >= cfg.Layers || c.seg.at(n) != l {
				t.Errorf("dropped %s of layer %d in segment %d", n.Name(), l, c.seg.at(n))
			}
			for _, u := range c.consumers.at(n) {
				if !c.isBackward.at(u) && layerOf(c.gr, u) != l {
					t.Errorf("dropped %s is read by %s of layer %d: it is a checkpoint", n.Name(), u.Name(), layerOf(c.gr, u))
				}
			}
		}
	})

	t.Run("forward", func(t *testing.T) {
		c := newCompiler(t, cfg, model.Checkpoint{Kind: model.CheckpointFull}, "forward")
		ops := 0
		for _, n := range c.nodes {
			if n.Op() != nil && !c.isBackward.at(n) {
				ops++
				if _, live := c.live.get(n); live == (c.dropped.at(n) || !c.usedByBackward(n)) {
					t.Errorf("%s live after the forward pass: %t", n.Name(), live)
				}
			}
		}
		if len(c.s.Instrs) != ops {
			t.Errorf("%d forward instructions, want one per forward op, %d", len(c.s.Instrs), ops)
		}
		for _, in := range c.s.Instrs {
			if in.Phase != Forward {
				t.Fatalf("%s in phase %s", in.Node.Name(), in.Phase)
			}
		}
	})

	t.Run("backward", func(t *testing.T) {
		c := newCompiler(t, cfg, model.Checkpoint{Kind: model.CheckpointFull}, "backward")
		recomputed := map[*gorgonia.Node]int{}
		backward := 0
		for _, in := range c.s.Instrs {
			switch in.Phase {
			case Recompute:
				recomputed[in.Node]++
				if c.isBackward.at(in.Node) {
					t.Errorf("backward node %s recomputed", in.Node.Name())
				}
			case Backward:
				backward++
			}
		}
		for _, n := range c.s.Dropped {
			if recomputed[n] != 1 {
				t.Errorf("dropped %s recomputed %d times, want once", n.Name(), recomputed[n])
			}
		}
		// Every backward op runs once but the "+" that would sum the
		// tied wte's two gradient terms: they are summed in place.
		want := 0
		for _, n := range c.nodes {
			if c.isBackward.at(n) && n.Op() != nil && !(n == c.gr.Grads[0] && model.IsGradAccumulation(n.Op())) {
				want++
			}
		}
		if backward != want {
			t.Errorf("%d backward instructions, want %d", backward, want)
		}
	})

	// A weight used twice (GPT-2's tied wte: the head's product, the
	// embedding's lookup) has its gradient terms summed in place in its
	// gradient buffer, the first written, the second added, and no
	// instruction writes a temporary of its size; an untied model has no
	// such terms.
	t.Run("terms", func(t *testing.T) {
		for _, untied := range []bool{false, true} {
			m := cfg
			m.Untied = untied
			c := newCompiler(t, m, model.Checkpoint{}, "backward")
			var writes []Instr
			for _, in := range c.s.Instrs {
				sl := c.s.Slots[in.Out]
				if sl.Persistent && sl.Cat == cuda.Grads && sl.Param == 0 {
					writes = append(writes, in)
				}
				if !sl.Persistent && strings.HasPrefix(sl.Node.Name(), "d(wte)") {
					t.Errorf("untied %t: %s writes wte's gradient term %s in a temporary", untied, in.Node.Name(), sl.Node.Name())
				}
				if (in.Accumulate || in.Partial) && !(sl.Persistent && sl.Cat == cuda.Grads && sl.Param == 0) {
					t.Errorf("untied %t: %s, which writes no term of wte's gradient, accumulates %t, partial %t", untied, in.Node.Name(), in.Accumulate, in.Partial)
				}
			}
			switch {
			case untied && len(writes) != 1:
				t.Errorf("untied: wte's gradient written by %d instructions, want 1", len(writes))
			case !untied && len(writes) != 2:
				t.Errorf("tied: wte's gradient written by %d instructions, want 2 (the head's term, then the embedding's)", len(writes))
			case !untied && (!writes[0].Partial || writes[1].Partial || writes[0].Accumulate || !writes[1].Accumulate):
				t.Errorf("tied: the terms are partial %t, %t and accumulate %t, %t; want true, false and false, true",
					writes[0].Partial, writes[1].Partial, writes[0].Accumulate, writes[1].Accumulate)
			}
		}
	})
}
