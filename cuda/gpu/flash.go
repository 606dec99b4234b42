//go:build trainmem_cuda

package gpu

import "trainmem/cuda"

// The CUDA device's kernels: the flash-attention family (kernels/flash.cuh),
// a warp to a row, as cuda/host/flash.go streams a row's keys.

// The family's kernels and their parameter kinds.
func init() {
	kernelFamily(map[string]string{
		"flash_stats":        "pipiiiiii",
		"flash_out":          "pipipiiiiii",
		"flash_backward_d":   "pipipiiiii",
		"flash_backward_dq":  "pipipipipiiiiii",
		"flash_backward_dkv": "pipipipipiiiiii",
	})
}

// FlashAttentionStats: the log-sum-exp of each query row's scores.
func (d *Device) FlashAttentionStats(lse, qkv *cuda.Buffer, B, T, C, NH, KV int) error {
	return d.launch("FlashAttentionStats", cuda.Check.FlashAttentionStats(lse, qkv, B, T, C, NH, KV),
		func() *kcall { return flashStatsCall(lse, qkv, B, T, C, NH, KV) }, lse, qkv)
}

// FlashAttentionOut: the output of the normalized probabilities, never stored.
func (d *Device) FlashAttentionOut(y, qkv, lse *cuda.Buffer, B, T, C, NH, KV int) error {
	return d.launch("FlashAttentionOut", cuda.Check.FlashAttentionOut(y, qkv, lse, B, T, C, NH, KV),
		func() *kcall { return flashOutCall(y, qkv, lse, B, T, C, NH, KV) }, y, qkv, lse)
}

// FlashAttentionBackward: D into scratch, then dQ by query rows, then dK and
// dV by key rows.
func (d *Device) FlashAttentionBackward(dqkv, dy, qkv, y, lse, scratch *cuda.Buffer, B, T, C, NH, KV int) error {
	err := cuda.Check.FlashAttentionBackward(dqkv, dy, qkv, y, lse, scratch, B, T, C, NH, KV)
	if err := d.begin("FlashAttentionBackward", err, dqkv, dy, qkv, y, lse, scratch); err != nil {
		return err
	}
	defer d.leave()
	D := scratch.View(0, cuda.FlashScratchLen(B, T, NH))
	for _, c := range []*kcall{
		flashBackwardDCall(D, dy, y, B, T, C, NH),
		flashBackwardCall("flash_backward_dq", int64(B)*int64(NH)*int64(T), dqkv, dy, qkv, lse, D, B, T, C, NH, KV),
		flashBackwardCall("flash_backward_dkv", int64(B)*int64(KV)*int64(T), dqkv, dy, qkv, lse, D, B, T, C, NH, KV),
	} {
		if err := d.run(c); err != nil {
			return err
		}
	}
	return nil
}

func flashStatsCall(lse, qkv *cuda.Buffer, B, T, C, NH, KV int) *kcall {
	return newCall("flash_stats", cuda.AllF64(lse, qkv), perWarp(int64(B)*int64(NH)*int64(T))).
		buf(lse).buf(qkv).int(int64(B)).int(int64(T)).int(int64(C)).int(int64(NH)).int(int64(KV))
}

func flashOutCall(y, qkv, lse *cuda.Buffer, B, T, C, NH, KV int) *kcall {
	return newCall("flash_out", cuda.AllF64(y, qkv, lse), perWarp(int64(B)*int64(NH)*int64(T))).
		buf(y).buf(qkv).buf(lse).int(int64(B)).int(int64(T)).int(int64(C)).int(int64(NH)).int(int64(KV))
}

func flashBackwardDCall(D, dy, y *cuda.Buffer, B, T, C, NH int) *kcall {
	rows := int64(B) * int64(NH) * int64(T)
	return newCall("flash_backward_d", cuda.AllF64(dy, y), perWarp(rows)).
		buf(D).buf(dy).buf(y).int(rows).int(int64(T)).int(int64(C)).int(int64(NH))
}

// flashBackwardCall is flash_backward_dq (a warp to each of the B·NH·T
// query rows) or flash_backward_dkv (to each of the B·KV·T key rows).
func flashBackwardCall(kernel string, rows int64, dqkv, dy, qkv, lse, D *cuda.Buffer, B, T, C, NH, KV int) *kcall {
	return newCall(kernel, cuda.AllF64(dqkv, dy, qkv, lse), perWarp(rows)).
		buf(dqkv).buf(dy).buf(qkv).buf(lse).buf(D).int(int64(B)).int(int64(T)).int(int64(C)).int(int64(NH)).int(int64(KV))
}
