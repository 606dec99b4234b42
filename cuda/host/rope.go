package host

// The host device's kernels: the rotary family.

import (
	"math"

	"trainmem/cuda"
)

// RoPE: q's and k's channel pairs (i, i + hs/2) of every query and key head rotated by
// t·theta^(-2i/hs), v copied; the angles, their cosines and sines in
// float64, once a call for the T positions (the same values for every
// sequence of the batch and every head).
func (h *Device) RoPE(y, x *cuda.Buffer, B, T, C, NH, KV int, theta float32) error {
	return h.launch("RoPE", cuda.Check.RoPE(y, x, B, T, C, NH, KV, theta), func() {
		instance(cuda.AllF64(y, x), ropeKernel[float64], ropeKernel[float32])(h, y, x, B, T, C, NH, KV, theta, 1)
	}, y, x)
}

// RoPEBackward: the rotation by the opposite angles, v's gradient copied.
func (h *Device) RoPEBackward(dx, dy *cuda.Buffer, B, T, C, NH, KV int, theta float32) error {
	return h.launch("RoPEBackward", cuda.Check.RoPEBackward(dx, dy, B, T, C, NH, KV, theta), func() {
		instance(cuda.AllF64(dx, dy), ropeKernel[float64], ropeKernel[float32])(h, dx, dy, B, T, C, NH, KV, theta, -1)
	}, dx, dy)
}

// ropeKernel rotates by sign·angle (1 forward, -1 for the gradient).
func ropeKernel[F float](h *Device, y, x *cuda.Buffer, B, T, C, NH, KV int, theta float32, sign float64) {
	vy, vx := mkvec[F](y), mkvec[F](x)
	hs := C / NH
	half := hs / 2
	W := cuda.QKVWidth(C, NH, KV)
	R := (NH + KV) * hs // q's and k's heads, one after the other; v is the rest
	// cs[t] holds position t's cosines and signed sines, pair by pair.
	cs := make([]float64, 2*half*T)
	h.parallel(T, rowGrain(8*half), func(lo, hi int) {
		for t := lo; t < hi; t++ {
			for i := range half {
				s, c := math.Sincos(float64(t) * math.Pow(float64(theta), -2*float64(i)/float64(hs)))
				cs[2*half*t+2*i], cs[2*half*t+2*i+1] = c, sign*s
			}
		}
	})
	h.parallel(B*T, rowGrain(W), func(lo, hi int) {
		tmp := getScratch[F](2 * W)
		defer putScratch(tmp)
		for r := lo; r < hi; r++ {
			cs := cs[2*half*(r%T) : 2*half*(r%T+1)]
			xs := vx.get(W*r, W*(r+1), tmp[:W])
			o := vy.out(W*r, W*(r+1), tmp[W:])
			for base := 0; base < R; base += hs {
				for i := range half {
					a, b := float64(xs[base+i]), float64(xs[base+i+half])
					c, s := cs[2*i], cs[2*i+1]
					o[base+i] = F(a*c - b*s)
					o[base+i+half] = F(b*c + a*s)
				}
			}
			copy(o[R:], xs[R:])
			vy.put(W*r, o)
		}
	})
}
