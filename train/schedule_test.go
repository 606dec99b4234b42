package train

import (
	"testing"

	"gorgonia.org/tensor"

	"trainmem/model"
)

func compileFor(t *testing.T, cfg model.Config, B, T int, pol model.Checkpoint) *Schedule {
	t.Helper()
	gr, err := model.Build(cfg, B, T, tensor.Float32)
	if err != nil {
		t.Fatal(err)
	}
	s, err := compile(gr, storageOf(model.FP32, false), pol)
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
