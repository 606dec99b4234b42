package train

import (
	"testing"

	"trainmem/cuda/host/avx2"
	"trainmem/model"
)

// The host's AVX2 twins change nothing but speed: tiny trained with them
// and without them gives the same losses bit for bit, in fp32 and in
// bf16 (whose update runs on the fp32 master weights).
func TestAVX2SameRun(t *testing.T) {
	if !avx2.Available {
		t.Skip("the twins do not run here (no AVX2, or GOAMD64=v3 fuses the Go loops' multiply-adds): the Go loops run alone")
	}
	t.Cleanup(func() { avx2.Available = true })
	for _, prec := range []model.Precision{model.FP32, model.BF16} {
		with := trainTiny(t, 6, prec)
		avx2.Available = false
		without := trainTiny(t, 6, prec)
		avx2.Available = true
		for i := range with {
			if with[i] != without[i] {
				t.Fatalf("%v, step %d: loss %v with the AVX2 twins, %v without", prec, i+1, with[i], without[i])
			}
		}
		t.Logf("%v: %d losses the same bit for bit, the last %v", prec, len(with), with[len(with)-1])
	}
}
