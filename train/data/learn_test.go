package data

import (
	"math"
	"testing"

	"gorgonia.org/tensor"

	"trainmem/model"
	"trainmem/model/reference"
)

// TestDefaultCorpusLearnable trains the tiny preset (2 layers, byte-level)
// on the default corpus for 200 steps with the reference model (gorgonia's
// TapeMachine) and plain Adam, lr 1e-3, batch 4×64, and requires the mean
// loss of the last 10 steps to be below half of ln(256) = 2.77: the property
// the corpus is made for. Measured: 2.34 (5.51 at step 1; below 2.77 from
// about step 100). At lr 3e-4 the same run ends near 2.77: tiny wants the
// larger rate. It takes about 7 s on 2 cores, so -short skips it.
func TestDefaultCorpusLearnable(t *testing.T) {
	if testing.Short() {
		t.Skip("trains for 200 steps (about 7 s)")
	}
	const B, T, steps, lr = 4, 64, 200, 1e-3
	cfg, err := model.Preset("tiny")
	if err != nil {
		t.Fatal(err)
	}
	ds, err := DefaultDataset(cfg.Vocab)
	if err != nil {
		t.Fatal(err)
	}
	loader, err := NewLoader(ds, B, T, 1)
	if err != nil {
		t.Fatal(err)
	}
	ref := reference.MustNew(t, cfg, B, T, tensor.Float32)
	p32 := model.InitParams(cfg, 1)
	p := make([]float64, len(p32))
	for i, v := range p32 {
		p[i] = float64(v)
	}
	m, v := make([]float64, len(p)), make([]float64, len(p))
	var first, tail float64
	for step := 1; step <= steps; step++ {
		in, tg, _ := loader.Batch()
		loss, g, err := ref.Step(p, in, tg)
		if err != nil {
			t.Fatal(err)
		}
		if step == 1 {
			first = loss
		}
		if step > steps-10 {
			tail += loss / 10
		}
		c1, c2 := 1-math.Pow(0.9, float64(step)), 1-math.Pow(0.999, float64(step))
		for i := range p {
			m[i] = 0.9*m[i] + 0.1*g[i]
			v[i] = 0.999*v[i] + 0.001*g[i]*g[i]
			p[i] -= lr * (m[i] / c1) / (math.Sqrt(v[i]/c2) + 1e-8)
		}
	}
	half := math.Log(256) / 2
	t.Logf("loss %.3f at step 1, %.3f over the last 10 steps (half of ln 256 is %.3f)", first, tail, half)
	if tail >= half {
		t.Errorf("mean loss of steps %d-%d is %.3f, want below half of ln(256) = %.3f", steps-9, steps, tail, half)
	}
}
