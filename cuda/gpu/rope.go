//go:build trainmem_cuda

package gpu

import "trainmem/cuda"

// The CUDA device's kernels: the rotary family.

// The family's kernels (kernels/rope.cuh) and their parameter kinds.
func init() {
	kernelFamily(map[string]string{
		"rope":          "pipiiiiiif",
		"rope_backward": "pipiiiiiif",
	})
}

// RoPE: q's and k's channel pairs rotated by t·theta^(-2i/hs), in fp64.
func (d *Device) RoPE(y, x *cuda.Buffer, B, T, C, NH, KV int, theta float32) error {
	return d.launch("RoPE", cuda.Check.RoPE(y, x, B, T, C, NH, KV, theta), func() *kcall { return ropeCall("rope", y, x, B, T, C, NH, KV, theta) }, y, x)
}

// RoPEBackward: the rotation by the opposite angles.
func (d *Device) RoPEBackward(dx, dy *cuda.Buffer, B, T, C, NH, KV int, theta float32) error {
	return d.launch("RoPEBackward", cuda.Check.RoPEBackward(dx, dy, B, T, C, NH, KV, theta), func() *kcall { return ropeCall("rope_backward", dx, dy, B, T, C, NH, KV, theta) }, dx, dy)
}

func ropeCall(kernel string, y, x *cuda.Buffer, B, T, C, NH, KV int, theta float32) *kcall {
	N := int64(B) * int64(T)
	pairs := int64(NH+KV) * int64(C/NH/2) // a row's rotated pairs of q and k
	return newCall(kernel, cuda.AllF64(y, x), gridStride(N*pairs, elemBlock)).
		buf(y).buf(x).int(N).int(int64(T)).int(int64(C)).int(int64(NH)).int(int64(KV)).f64(float64(theta))
}
