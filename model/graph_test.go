package model

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

func mustPreset(t testing.TB, name string) Config {
	t.Helper()
	c, err := Preset(name)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// isBackwardOp reports whether o is one of trainmem's backward ops: an op
// of trainmem's that is not differentiable (every forward op is a G.SDOp,
// the statistics through noGradient). TestIsBackwardOp holds it to
// opCases, where each backward op is written with no DiffWRT.
func isBackwardOp(o G.Op) bool {
	_, ours := o.(op)
	_, forward := o.(G.SDOp)
	return ours && !forward
}

// TestBackwardGraphOps walks every node that is neither an input nor a
// forward node and fails on any op that is not one of trainmem's backward
// ops or gorgonia's accumulation "+" (recognised by %T and String, the only
// handles gorgonia gives).
func TestBackwardGraphOps(t *testing.T) {
	for _, untied := range []bool{false, true} {
		cfg := mustPreset(t, "tiny")
		cfg.Untied = untied
		gr, err := Build(cfg, 2, 8, tensor.Float32)
		if err != nil {
			t.Fatal(err)
		}
		var nBackward, nPlus int
		for _, n := range gr.G.AllNodes() {
			if n.Op() == nil {
				continue
			}
			if _, fwd := gr.LayerOf(n); fwd {
				continue
			}
			nBackward++
			if !strings.HasPrefix(n.Name(), "d(") {
				t.Errorf("untied=%t: backward node %q is not named after the value it is the gradient of", untied, n.Name())
			}
			op := n.Op()
			if fmt.Sprintf("%T", op) == "gorgonia.elemBinOp" && op.String() == "+ false" {
				nPlus++
				continue
			}
			if !isBackwardOp(op) {
				t.Errorf("untied=%t: backward node %q has op %v (%T): not trainmem's backward op nor gorgonia's \"+\"", untied, n.Name(), op, op)
			}
		}
		// "+" accumulates the residual stream's two gradients at each of
		// the 2L residual adds' first input (x feeds the layer norm and
		// the add), and wte's two uses when tied.
		wantPlus := 2 * cfg.Layers
		if !untied {
			wantPlus++
		}
		if nPlus != wantPlus {
			t.Errorf("untied=%t: %d gradient \"+\" nodes, want %d", untied, nPlus, wantPlus)
		}
		if nBackward == 0 {
			t.Errorf("untied=%t: no backward nodes", untied)
		}
		if err := CheckOps(gr.G); err != nil {
			t.Errorf("untied=%t: CheckOps: %v", untied, err)
		}
	}
}

func TestCheckOpsRejectsForeignOps(t *testing.T) {
	gr, err := Build(mustPreset(t, "tiny"), 1, 4, tensor.Float64)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := G.Tanh(gr.Params[len(gr.Params)-1]); err != nil {
		t.Fatal(err)
	}
	err = CheckOps(gr.G)
	if err == nil || !strings.Contains(err.Error(), "tanh") {
		t.Fatalf("CheckOps with a tanh node: %v, want an error naming tanh", err)
	}
}

func TestBuildStructure(t *testing.T) {
	for _, tc := range []struct {
		preset string
		untied bool
		B, T   int
		dt     tensor.Dtype
	}{
		{"tiny", false, 2, 8, tensor.Float32},
		{"tiny", true, 1, 64, tensor.Float64},
		{"gpt2", false, 4, 64, tensor.Float32},
	} {
		cfg := mustPreset(t, tc.preset)
		cfg.Untied = tc.untied
		name := fmt.Sprintf("%s/untied=%t/B=%d/T=%d/%v", tc.preset, tc.untied, tc.B, tc.T, tc.dt)
		t.Run(name, func(t *testing.T) {
			gr, err := Build(cfg, tc.B, tc.T, tc.dt)
			if err != nil {
				t.Fatal(err)
			}
			N := tc.B * tc.T
			for _, in := range []*G.Node{gr.Tokens, gr.Targets} {
				if in.Dtype() != tensor.Int32 || !in.Shape().Eq(tensor.Shape{N}) {
					t.Errorf("%s: %v %v, want int32 (%d)", in.Name(), in.Dtype(), in.Shape(), N)
				}
			}
			if !gr.DLoss.IsScalar() || gr.DLoss.Dtype() != tc.dt {
				t.Errorf("dloss: %v, want a %v scalar", gr.DLoss.Type(), tc.dt)
			}
			if !gr.Loss.IsScalar() || gr.Loss.Dtype() != tc.dt {
				t.Errorf("loss: %v, want a %v scalar", gr.Loss.Type(), tc.dt)
			}
			table := cfg.Params()
			if len(gr.Params) != len(table) || len(gr.Grads) != len(table) {
				t.Fatalf("%d params and %d grads, want %d", len(gr.Params), len(gr.Grads), len(table))
			}
			for i, p := range table {
				n, d := gr.Params[i], gr.Grads[i]
				if n.Name() != p.Name || !n.Shape().Eq(tensor.Shape(p.Shape)) || n.Dtype() != tc.dt || n.Op() != nil {
					t.Errorf("param %d: %s %v %v, want input %s %v %v", i, n.Name(), n.Shape(), n.Dtype(), p.Name, p.Shape, tc.dt)
				}
				if n.Value() != nil {
					t.Errorf("param %s has a value bound; Build must bind none", p.Name)
				}
				if !d.Shape().Eq(n.Shape()) || d.Op() == nil {
					t.Errorf("grad of %s: %v (op %v), want a computed %v", p.Name, d.Shape(), d.Op(), n.Shape())
				}
				if d.Name() != "d("+p.Name+")" {
					t.Errorf("grad of %s is named %q, want d(%s)", p.Name, d.Name(), p.Name)
				}
				if _, fwd := gr.LayerOf(d); fwd {
					t.Errorf("grad of %s is a forward node", p.Name)
				}
			}
			// Forward nodes per layer: embedding 1; a block 13 (2 stats,
			// 2 layer norms, 4 linears, probs, attention out, GELU, 2
			// adds); the head 4 (stats, lnf, logits, loss).
			count := map[int]int{}
			for _, n := range gr.G.AllNodes() {
				l, fwd := gr.LayerOf(n)
				if !fwd {
					continue
				}
				count[l]++
				if !IsTrainmemOp(n.Op()) || isBackwardOp(n.Op()) {
					t.Errorf("forward node %s has op %T", n.Name(), n.Op())
				}
			}
			want := map[int]int{EmbeddingLayer: 1, cfg.HeadLayer(): 4}
			for l := range cfg.Layers {
				want[l] = 13
			}
			if fmt.Sprint(count) != fmt.Sprint(want) {
				t.Errorf("forward nodes per layer %v, want %v", count, want)
			}
			if l, ok := gr.LayerOf(gr.Loss); !ok || l != cfg.Layers {
				t.Errorf("loss in layer %d (%t), want %d", l, ok, cfg.Layers)
			}
			if _, ok := gr.LayerOf(gr.Params[0]); ok {
				t.Errorf("an input is in the forward layer map")
			}
		})
	}
}

// TestBuildXLFast: gpt2-xl at b=32, s=1000 builds without allocating a
// tensor, in well under a second (about 15 ms on the 2-core machine this
// was written on; the bound leaves room for a loaded machine and -race).
func TestBuildXLFast(t *testing.T) {
	cfg := mustPreset(t, "gpt2-xl")
	start := time.Now()
	gr, err := Build(cfg, 32, 1000, tensor.Float32)
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("gpt2-xl b=32 s=1000: %d nodes in %v", len(gr.G.AllNodes()), took)
	if took > 500*time.Millisecond {
		t.Errorf("building gpt2-xl took %v, want well under a second (< 500ms)", took)
	}
	var elems int64
	for _, n := range gr.G.AllNodes() {
		elems += int64(n.Shape().TotalSize())
	}
	if elems < 1e10 {
		t.Errorf("graph describes %d elements; expected the activations of b=32 s=1000 (> 1e10)", elems)
	}
}

// testParams are initial parameters with every tensor perturbed (gains
// away from 1, biases away from 0) so that no gradient term is trivially
// zero, in float64.
func testParams(cfg Config, seed uint64) []float64 {
	p32 := InitParams(cfg, seed)
	rng := rand.New(rand.NewPCG(seed, 99))
	p := make([]float64, len(p32))
	for i, v := range p32 {
		p[i] = float64(v) + 0.05*rng.NormFloat64()
	}
	return p
}

func testBatch(cfg Config, B, T int, seed uint64) (tokens, targets []int32) {
	rng := rand.New(rand.NewPCG(seed, 7))
	tokens = make([]int32, B*T)
	targets = make([]int32, B*T)
	for i := range tokens {
		tokens[i] = int32(rng.IntN(cfg.Vocab))
		targets[i] = int32(rng.IntN(cfg.Vocab))
	}
	return tokens, targets
}
