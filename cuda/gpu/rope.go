//go:build trainmem_cuda

package gpu

import "trainmem/cuda"

// The CUDA device's kernels: the rotary family.

// The family's kernels (kernels/rope.cuh) and their parameter kinds.
func init() {
	kernelFamily(map[string]string{
		"rope":          "pipiiiiif",
		"rope_backward": "pipiiiiif",
	})
}

// RoPE: q's and k's channel pairs rotated by t·theta^(-2i/hs), in fp64.
func (d *Device) RoPE(y, x *cuda.Buffer, B, T, C, NH int, theta float32) error {
	return d.launch("RoPE", cuda.Check.RoPE(y, x, B, T, C, NH, theta), func() *kcall { return ropeCall("rope", y, x, B, T, C, NH, theta) }, y, x)
}

// RoPEBackward: the rotation by the opposite angles.
func (d *Device) RoPEBackward(dx, dy *cuda.Buffer, B, T, C, NH int, theta float32) error {
	return d.launch("RoPEBackward", cuda.Check.RoPEBackward(dx, dy, B, T, C, NH, theta), func() *kcall { return ropeCall("rope_backward", dx, dy, B, T, C, NH, theta) }, dx, dy)
}

func ropeCall(kernel string, y, x *cuda.Buffer, B, T, C, NH int, theta float32) *kcall {
	N := int64(B) * int64(T)
	return newCall(kernel, cuda.AllF64(y, x), gridStride(N*int64(C), elemBlock)).
		buf(y).buf(x).int(N).int(int64(T)).int(int64(C)).int(int64(NH)).f64(float64(theta))
}
