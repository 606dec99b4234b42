package host

// The host as a card of the step's time model: the model that times a
// GPU's step (cuda.Roofline.Kernel) times the host's too, its limits
// measured on the host's own kernels rather than read from a datasheet.

import (
	"fmt"
	"math"
	"time"

	"trainmem/cuda"
)

// The shapes the card is timed on: a product of a small GPT-2's linear
// layer (1,024 tokens of 768 channels by a 768×768 weight), an addition
// of 8 Mi elements (96 MiB read and written: far past the caches), and an
// addition of 64 (a kernel's cost when it has nothing to do).
const (
	cardM, cardN, cardK = 1024, 768, 768
	cardAddLen          = 8 << 20
	cardTinyLen         = 64
)

// Card is the host as a cuda.Roofline: its fp32 peak (PeakGFLOPS; the
// product's own rate where the peak is unknown) for every storage type
// (the host computes 16-bit values in fp32), the fraction of it its
// product kernel reaches, its memory bandwidth as its Add kernel reaches
// it, and the time a kernel takes with nothing to do, each the best of a
// few timings now (about a quarter of a second; a busy machine makes
// them slower). There are no SMs: a product's time is its FLOPs at the
// measured rate. What the model then misses on a CPU: its exp and tanh
// (the cross-entropy's, GELU's) are bound by arithmetic, not memory, and
// its attention kernels are not BLAS's products.
func (h *Device) Card() (cuda.Roofline, error) {
	best := func(reps int, f func() error) (time.Duration, error) {
		d := time.Duration(math.MaxInt64)
		for range reps {
			t := time.Now()
			if err := f(); err != nil {
				return 0, err
			}
			d = min(d, time.Since(t))
		}
		return max(d, time.Nanosecond), nil
	}
	alloc := func(n int) (*cuda.Buffer, error) {
		b, err := h.Alloc(cuda.Temporaries, cuda.F32, n)
		if err == nil {
			err = h.Fill(b, 0.5)
		}
		return b, err
	}
	var bufs []*cuda.Buffer
	defer func() {
		for _, b := range bufs {
			h.Free(b)
		}
	}()
	get := func(n int) *cuda.Buffer {
		b, err := alloc(n)
		if err != nil {
			return nil
		}
		bufs = append(bufs, b)
		return b
	}
	a, b, c := get(cardM*cardK), get(cardK*cardN), get(cardM*cardN)
	x, y := get(cardAddLen), get(cardAddLen)
	u, v := get(cardTinyLen), get(cardTinyLen)
	for _, p := range []*cuda.Buffer{a, b, c, x, y, u, v} {
		if p == nil {
			return cuda.Roofline{}, fmt.Errorf("cuda: the host card's buffers: out of memory")
		}
	}
	mm, err := best(5, func() error {
		return h.MatMul(cuda.MatMul{M: cardM, N: cardN, K: cardK, A: a, B: b, C: c, Alpha: 1})
	})
	if err != nil {
		return cuda.Roofline{}, err
	}
	add, err := best(5, func() error { return h.Add(y, x, y) })
	if err != nil {
		return cuda.Roofline{}, err
	}
	tiny, err := best(200, func() error { return h.Add(v, u, v) })
	if err != nil {
		return cuda.Roofline{}, err
	}
	rate := 2 * float64(cardM) * cardN * cardK / mm.Seconds()
	peak, how := PeakGFLOPS()
	peak *= 1e9
	if peak < rate {
		peak, how = rate, "its product's rate (the peak is unknown)"
	}
	bw := 3 * 4 * float64(cardAddLen) / (add - tiny).Seconds()
	r := cuda.Roofline{
		Name: h.Name(), HalfFLOPS: peak, FP32FLOPS: peak, Bandwidth: bw,
		Source: fmt.Sprintf("timed on this host: peak %s; a %d×%d×%d product at %.1f GFLOP/s, an addition of %d Mi floats at %.1f GB/s, %v a kernel with nothing to do",
			how, cardM, cardK, cardN, rate/1e9, cardAddLen>>20, bw/1e9, tiny.Round(time.Microsecond/10)),
		Eff: cuda.Efficiency{Matmul: rate / peak, Memory: 1, Launch: tiny, Source: "measured"},
	}
	if err := r.Check(); err != nil {
		return cuda.Roofline{}, err
	}
	return r, nil
}
