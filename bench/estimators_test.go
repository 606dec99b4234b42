package bench

import (
	"context"
	"strings"
	"testing"

	"trainmem/model"
	"trainmem/zero"
)

// validate over ranks sets DeepSpeed's figure for the setup (its own
// functions' arithmetic, model.TestDeepSpeedMatchesItsCode) beside rank 0's
// simulation and names its terms in bytes: at ZeRO-2 the fp32 gradient copy
// (4Φ/N) trainmem does not keep, at ZeRO-1 the whole gradients that
// estimate_zero2 counts as a shard, at ZeRO-3 the gathered largest layer
// and the 2Φ/N of its 18 bytes a shard. Megatron-LM's report is there with
// its fp32 main gradients (2 bytes a parameter of its count). With
// --main-grads fp32 the same lines say what is left: at ZeRO-2 DeepSpeed's
// 16-bit gradient partition (2Φ/N), at ZeRO-3 nothing of the 18 bytes a
// shard, and Megatron-LM's main gradients are trainmem's.
func TestValidateExplainsEstimators(t *testing.T) {
	for _, tc := range []struct {
		stage int
		grads model.MainGrads
	}{{1, 0}, {2, 0}, {3, 0}, {2, model.GradsFP32}, {3, model.GradsFP32}} {
		stage := tc.stage
		s := setup(t, "tiny", 2, 32, model.BF16, model.Adam, "none")
		s.Ranks, s.ZeRO, s.MainGrads = 4, stage, tc.grads
		fp32 := tc.grads == model.GradsFP32
		set := zero.Setting{Stage: stage}
		r, err := Validate(context.Background(), nil, runOf(checked(t, s), 1, nil, set))
		if err != nil {
			t.Fatal(err)
		}
		phi := s.Model.NumParams()
		var text strings.Builder
		if err := r.WriteText(&text); err != nil {
			t.Fatal(err)
		}
		out := strings.Join(strings.Fields(text.String()), " ")
		var wants []string
		switch stage {
		case 1, 2:
			_, gpu, err := model.DeepSpeedZeRO2(phi, 4, 1, false, 1.5)
			if err != nil {
				t.Fatal(err)
			}
			wants = []string{"deepspeed, estimate_zero2 (offload_optimizer=none) " + model.GiB(gpu),
				"the copy is " + model.Bytes(4*phi/4) + " (4Φ/N"}
			if fp32 {
				wants[1] = "DeepSpeed's 16-bit partition beside them is " + model.Bytes(2*phi/4) + " (2Φ/N)"
			}
			if stage == 1 {
				wants = append(wants, "at ZeRO-1 a rank keeps its gradients whole (grads "+model.Bytes(2*phi)+" simulated)")
			}
		case 3:
			name, largest := s.Model.LargestModule()
			_, gpu, err := model.DeepSpeedZeRO3(phi, largest, 4, 1, false, false, true, 1.5)
			if err != nil {
				t.Fatal(err)
			}
			wants = []string{"deepspeed, estimate_zero3 (offload_param=none, offload_optimizer=none, zero_init=1) " + model.GiB(gpu),
				"its largest layer (" + name + ", " + model.Comma(largest) + " parameters)", model.Bytes(2*phi/4) + " more (2Φ/N",
				"trainmem's ZeRO-3 shards the gradients and the weights too"}
			if fp32 {
				wants[2] = "a shard at 18 bytes a parameter, as trainmem's with fp32 main gradients"
			}
		}
		m, err := s.Megatron()
		if err != nil {
			t.Fatal(err)
		}
		grads := "2 bytes a parameter more than trainmem's 16-bit ones (" + model.Bytes(2*int64(m.Params))
		if fp32 {
			grads = "its main gradients are fp32, as trainmem's here"
		}
		wants = append(wants, "megatron, weights and optimizer "+model.GiB(m.WeightsAndOptimizer), grads)
		for _, want := range wants {
			if !strings.Contains(out, want) {
				t.Errorf("ZeRO-%d, %s gradients: the report lacks %q:\n%s", stage, tc.grads, want, text.String())
			}
		}
	}
}

// fit's Megatron-LM answer is the edge of its own figure: the distributed
// optimizer's total fits at the answer and not one rank below; 18 bytes a
// parameter, which ranks do not shrink, fits at one rank or none.
func TestFitEstimatorsMegatronEdge(t *testing.T) {
	s := setup(t, "gpt2-xl", 4, 1024, model.FP16, model.Adam, "full")
	const memory = 24 << 30 // its activations ignore the recomputation: about 11.7 GB
	fits, _, err := fitEstimators(s, memory, model.Cluster{})
	if err != nil {
		t.Fatal(err)
	}
	total := func(z, n int) int64 {
		u := s
		u.ZeRO, u.Ranks = z, n
		m, err := u.Megatron()
		if err != nil {
			t.Fatal(err)
		}
		return m.Total()
	}
	var seen int
	for _, f := range fits {
		if f.Estimator != "megatron" {
			continue
		}
		seen++
		z := 0
		if f.Stages != "0" {
			z = 1
		}
		switch n := f.MinRanks; {
		case z == 0 && n == 0 && total(0, 1) > memory:
		case z == 1 && n > 1 && total(1, n) <= memory && total(1, n-1) > memory && f.GPUBytes == total(1, n):
		default:
			t.Errorf("megatron %s: %d ranks (%d bytes); its total at 1 rank %d", f.Options, n, f.GPUBytes, total(z, 1))
		}
	}
	if seen != 2 {
		t.Errorf("%d Megatron-LM rows, want 2: %+v", seen, fits)
	}
}
