package host

// The host as a card of the step's time model: the model that times a
// GPU's step (cuda.Roofline.Kernel) times the host's too, its limits
// measured on the host's own kernels rather than read from a datasheet.

import (
	"fmt"
	"math"
	"strings"
	"time"

	"trainmem/cuda"
)

// The shapes the card is timed on: square products of the ladder's
// sides (cuda.LadderSides, from 64 to 1,024), an addition of 8 Mi
// elements (96 MiB read and written: far past the caches), an addition of
// 64 (a kernel's cost when it has nothing to do), and the two activations
// over 64 rows of 1,024 (GELU's tanh and SwiGLU's sigmoid, an exponential
// an element, in the caches).
const (
	cardAddLen           = 8 << 20
	cardTinyLen          = 64
	cardActRows, cardAct = 64, 1024
)

// cardReps are the timings of each of the ladder's products (a product's
// rate on a shared machine varies by half from call to call; the small
// ones more), about 0.2 s in all.
var cardReps = [len(cuda.LadderSides)]int{400, 200, 60, 20, 10}

// cardRounds is how many turns the ladder's products take.
const cardRounds = 5

// Card is the host as a cuda.Roofline: its fp32 peak (PeakGFLOPS; the
// largest product's own rate where the peak is unknown) for every storage
// type (the host computes 16-bit values in fp32); the fraction of it its
// product kernel reaches on each square product of the ladder (a small
// product, or a thin one, is read at its shortest side), the largest the
// card's matmul fraction; its memory bandwidth as its Add kernel reaches
// it; the special functions a second (the mean of GELU's and SwiGLU's
// time an element, less a launch: an exponential with the arithmetic its
// kernels do around it); and the time a kernel takes with nothing to do,
// each the best of a few timings now (about a quarter of a second; a busy
// machine makes them slower). There are no SMs. What the model then
// misses on a CPU: its attention kernels are loops, not BLAS's products,
// and its scalar loops (RoPE's, the norms') are bound by instructions,
// not by memory.
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
	u, v := get(cardTinyLen), get(cardTinyLen)
	x, y := get(cardAddLen), get(cardAddLen)
	ax, ay := get(cardActRows*2*cardAct), get(cardActRows*cardAct)
	for _, p := range []*cuda.Buffer{x, y, u, v, ax, ay} {
		if p == nil {
			return cuda.Roofline{}, fmt.Errorf("cuda: the host card's buffers: out of memory")
		}
	}
	tiny, err := best(200, func() error { return h.Add(v, u, v) })
	if err != nil {
		return cuda.Roofline{}, err
	}
	add, err := best(5, func() error { return h.Add(y, x, y) })
	if err != nil {
		return cuda.Roofline{}, err
	}
	gelu, err := best(20, func() error { return h.GELU(ay, ay) })
	if err != nil {
		return cuda.Roofline{}, err
	}
	swiglu, err := best(20, func() error { return h.SwiGLU(ay, ax, cardActRows, cardAct) })
	if err != nil {
		return cuda.Roofline{}, err
	}
	// The ladder: its products in turn, cardRounds times over, each
	// rung the best of its timings (a busy spell of the machine then
	// slows one round of every rung, not one rung's every timing), a
	// rung no slower than the one below it (a larger product is no less
	// efficient: its packing costs amortize over more work).
	type rung struct{ a, b, c *cuda.Buffer }
	var rungs [len(cuda.LadderSides)]rung
	for i, n := range cuda.LadderSides {
		rungs[i] = rung{get(n * n), get(n * n), get(n * n)}
		if rungs[i].a == nil || rungs[i].b == nil || rungs[i].c == nil {
			return cuda.Roofline{}, fmt.Errorf("cuda: the host card's buffers: out of memory")
		}
	}
	var rates [len(cuda.LadderSides)]float64
	for range cardRounds {
		for i, n := range cuda.LadderSides {
			g := rungs[i]
			mm, err := best(cardReps[i]/cardRounds, func() error {
				return h.MatMul(cuda.MatMul{M: n, N: n, K: n, A: g.a, B: g.b, C: g.c, Alpha: 1})
			})
			if err != nil {
				return cuda.Roofline{}, err
			}
			rates[i] = max(rates[i], 2*float64(n)*float64(n)*float64(n)/mm.Seconds())
		}
	}
	for i := 1; i < len(rates); i++ {
		rates[i] = max(rates[i], rates[i-1])
	}
	peak, how := PeakGFLOPS()
	peak *= 1e9
	if top := rates[len(rates)-1]; peak < top {
		peak, how = top, "its largest product's rate (the peak is unknown)"
	}
	var ladder [len(rates)]float64
	var steps []string
	for i, rate := range rates {
		ladder[i] = min(1, rate/peak)
		steps = append(steps, fmt.Sprintf("%d: %.1f", cuda.LadderSides[i], rate/1e9))
	}
	bw := 3 * 4 * float64(cardAddLen) / max(add-tiny, time.Nanosecond).Seconds()
	act := (gelu + swiglu) / 2
	special := float64(cardActRows*cardAct) / max(act-tiny, time.Nanosecond).Seconds()
	r := cuda.Roofline{
		Name: h.Name(), HalfFLOPS: peak, FP32FLOPS: peak, Bandwidth: bw,
		Source: fmt.Sprintf("timed on this host: peak %s; square products of side %s GFLOP/s, an addition of %d Mi floats at %.1f GB/s, GELU and SwiGLU at %.2f and %.2f ns an element, %v a kernel with nothing to do",
			how, strings.Join(steps, ", "), cardAddLen>>20, bw/1e9,
			float64(gelu.Nanoseconds())/(cardActRows*cardAct), float64(swiglu.Nanoseconds())/(cardActRows*cardAct), tiny.Round(time.Microsecond/10)),
		Eff: cuda.Efficiency{Matmul: ladder[len(ladder)-1], Memory: 1, Launch: tiny, Special: special, Ladder: ladder, Source: "measured"},
	}
	if err := r.Check(); err != nil {
		return cuda.Roofline{}, err
	}
	return r, nil
}
