package host

import (
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"

	"trainmem/cuda"
	"trainmem/cuda/host/avx2"
)

// sameFloat32 reports whether a and b are the same float32 bit for bit, or
// both NaN (a NaN's payload depends on which operand an instruction names
// first, which the compiler chooses).
func sameFloat32(a, b float32) bool {
	return math.Float32bits(a) == math.Float32bits(b) || (a != a && b != b)
}

// twinValues are n fp32 values: mostly normal ones at several scales, with
// zeros of both signs, subnormals, the largest finite values, infinities and
// NaNs among them.
func twinValues(rng *rand.Rand, n int, scale float64) []float32 {
	special := []float32{0, float32(math.Copysign(0, -1)), math.SmallestNonzeroFloat32, -1e-40, math.MaxFloat32, -math.MaxFloat32,
		float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), 1e-30, 1e30}
	v := make([]float32, n)
	for i := range v {
		switch {
		case i%97 == 13:
			v[i] = special[rng.IntN(len(special))]
		default:
			v[i] = float32(rng.NormFloat64() * scale * math.Pow(10, float64(rng.IntN(7)-3)))
		}
	}
	return v
}

// TestAVX2Twins: every AVX2 twin (package avx2) gives what its Go loop
// gives, bit for bit, on lengths that are and are not multiples of its
// width, for each variant of its constants.
func TestAVX2Twins(t *testing.T) {
	if !avx2.Available {
		t.Skip("the twins do not run here (no AVX2, or GOAMD64=v3 fuses the Go loops' multiply-adds): the Go loops run alone")
	}
	rng := rand.New(rand.NewPCG(7, 8))
	// On arguments inside the fast range every twin does every whole
	// group of its width: none of the checks below passes by leaving the
	// work to the Go loop.
	{
		const n = 1027
		e, x, y, z := make([]float64, n), make([]float32, n), make([]float32, n), make([]float32, n)
		for i := range x {
			x[i] = float32(rng.NormFloat64())
			e[i] = float64(x[i])
		}
		var sums [4]float64
		k := adamScalarsOf[float32](cuda.AdamArgs{LR: 1e-3, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, Step: 1, GradScale: 1}).twin()
		for _, c := range []struct {
			name       string
			done, want int
		}{
			{"ExpShiftedSum", avx2.ExpShiftedSum(make([]float64, n), x, 0.5, &sums, &expTwin), n &^ 3},
			{"GELU", avx2.GELU(y, x, &geluTwin, &expTwin), n &^ 3},
			{"GELUBackward", avx2.GELUBackward(y, x, x, &geluTwin, &expTwin), n &^ 3},
			{"Add", avx2.Add(y, x, x), n &^ 7},
			{"LayerNormRow", avx2.LayerNormRow(y, x, x, x, 0.1, 2), n &^ 7},
			{"Accumulate", avx2.Accumulate(make([]float64, n), x), n &^ 3},
			{"Round", avx2.Round(y, e), n &^ 3},
			{"Scale", avx2.Scale(y, 0.5), n &^ 3},
			{"Adam", avx2.Adam(y, x, z, append([]float32(nil), z...), &k), n &^ 7},
			{"LayerNormGain", avx2.LayerNormGain(make([]float64, n), x, x, 0.1, 2), n &^ 3},
			{"SumLanes", avx2.SumLanes(x, &sums), n &^ 3},
			{"SquaredDevLanes", avx2.SquaredDevLanes(x, 0.1, &sums), n &^ 3},
			{"LayerNormBackwardSums", avx2.LayerNormBackwardSums(x, x, x, 0.1, 2, &sums, &sums), n &^ 3},
			{"LayerNormBackwardRow", avx2.LayerNormBackwardRow(y, x, x, x, 0.1, 2, 0.3, 0.4), n &^ 7},
			{"RowMax", avx2.RowMax(x, new([8]float32)), n &^ 7},
		} {
			if c.done != c.want {
				t.Errorf("%s did %d of %d elements in range, want %d", c.name, c.done, n, c.want)
			}
		}
	}
	// The exponential (the EXP macro, through ExpShiftedSum with no
	// shift): arguments across the range, with ones outside the fast
	// range (the ends, infinities, NaN) at every lane position.
	for _, n := range []int{4, 7, 512, 1001} {
		xs := make([]float32, n)
		for i := range xs {
			xs[i] = float32((rng.Float64() - 0.7) * 100)
			if i%37 == 5 {
				xs[i] = []float32{-708, 709, -708.0001, 708.9999, -745, 800, float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), 0}[rng.IntN(10)]
			}
		}
		want, got := make([]float64, n), make([]float64, n)
		for i, x := range xs {
			want[i] = float64(x)
		}
		expLoop(want)
		var sums [4]float64
		expShiftedSum(got, xs, 0, &sums)
		for i := range want {
			if math.Float64bits(got[i]) != math.Float64bits(want[i]) && !(got[i] != got[i] && want[i] != want[i]) {
				t.Fatalf("Exp n=%d: exp(%v) = %v (%#016x), the Go loop gives %v (%#016x)", n, xs[i], got[i], math.Float64bits(got[i]), want[i], math.Float64bits(want[i]))
			}
		}
	}
	// GELU and its backward: values at every scale, with arguments past
	// the fast range (|x| > 21.5) and specials among them.
	for _, n := range []int{4, 6, 512, 1003} {
		xs, ds := twinValues(rng, n, 3), twinValues(rng, n, 1)
		for i := range xs {
			if i%41 == 7 {
				xs[i] = []float32{-30, 25, 21.5, -21.5, 1e6, -1e6}[rng.IntN(6)]
			}
		}
		want, got := make([]float32, n), make([]float32, n)
		geluLoop(want, xs)
		geluRun(got, xs)
		checkTwin32(t, "GELU", n, got, want, xs)
		geluBackwardLoop(want, ds, xs)
		geluBackwardRun(got, ds, xs)
		checkTwin32(t, "GELUBackward", n, got, want, xs)
	}
	// In place, as the kernels call them: GELUBackward with dx = dy, Add
	// as AddBias calls it (row += b).
	{
		const n = 515
		xs, ds := twinValues(rng, n, 3), twinValues(rng, n, 1)
		want, got := append([]float32(nil), ds...), append([]float32(nil), ds...)
		geluBackwardLoop(want, want, xs)
		geluBackwardRun(got, got, xs)
		checkTwin32(t, "GELUBackward in place", n, got, want, xs)
		copy(want, ds)
		copy(got, ds)
		for i := range want {
			want[i] += xs[i]
		}
		i := avx2.Add(got, got, xs)
		for ; i < n; i++ {
			got[i] += xs[i]
		}
		checkTwin32(t, "Add in place", n, got, want, xs)
	}
	// The shifted exponentials and their four running sums, over a row cut
	// into chunks as cross entropy cuts it: moderate values (every lane's
	// sum finite, so that a twin that skipped a sum would be seen) and
	// values at every scale with specials.
	for k, n := range []int{3, 8, 1000, 1029, 1029} {
		row := twinValues(rng, n, 4)
		if k == 3 {
			for j := range row {
				row[j] = float32(rng.NormFloat64() * 3)
			}
		}
		shift := 2.5
		var wantSums, gotSums [4]float64
		want := make([]float64, n)
		for j, v := range row {
			want[j] = float64(v) - shift
		}
		expLoop(want)
		for j, x := range want {
			wantSums[j%4] += x
		}
		got := make([]float64, n)
		var e [expChunk]float64
		for c0 := 0; c0 < n; c0 += expChunk {
			copy(got[c0:], expShiftedSum(e[:], row[c0:min(c0+expChunk, n)], shift, &gotSums))
		}
		for j := range want {
			if math.Float64bits(got[j]) != math.Float64bits(want[j]) && !(got[j] != got[j] && want[j] != want[j]) {
				t.Fatalf("ExpShiftedSum n=%d: exp(%v - %v) = %v, the Go loop gives %v", n, row[j], shift, got[j], want[j])
			}
		}
		for l := range wantSums {
			if math.Float64bits(gotSums[l]) != math.Float64bits(wantSums[l]) && !(gotSums[l] != gotSums[l] && wantSums[l] != wantSums[l]) {
				t.Fatalf("ExpShiftedSum n=%d: lane %d sums to %v, the Go loop to %v", n, l, gotSums[l], wantSums[l])
			}
		}
	}
	// The elementwise twins, against the Go expressions of their loops,
	// on lengths off their widths.
	for _, n := range []int{1, 8, 13, 768, 1027} {
		a, b, w := twinValues(rng, n, 1), twinValues(rng, n, 1), twinValues(rng, n, 1)
		want, got := make([]float32, n), make([]float32, n)
		for i := range want {
			want[i] = a[i] + b[i]
		}
		i := avx2.Add(got, a, b)
		for ; i < n; i++ {
			got[i] = a[i] + b[i]
		}
		checkTwin32(t, "Add", n, got, want, a)
		mean, rstd := float32(0.3), float32(1.7)
		for c := range want {
			want[c] = (a[c]-mean)*rstd*w[c] + b[c]
		}
		c := avx2.LayerNormRow(got, a, w, b, mean, rstd)
		for ; c < n; c++ {
			got[c] = (a[c]-mean)*rstd*w[c] + b[c]
		}
		checkTwin32(t, "LayerNormRow", n, got, want, a)
		e := make([]float64, n)
		for i := range e {
			e[i] = float64(a[i]) * (1 + 1e-9*float64(i)) // not exactly a float32
		}
		for i := range want {
			want[i] = float32(e[i])
		}
		roundInto(got, e)
		checkTwin32(t, "Round", n, got, want, a)
		copy(got, a)
		for i := range want {
			want[i] = float32(float64(a[i]) * 0.3)
		}
		scaleBy(got, 0.3)
		checkTwin32(t, "Scale", n, got, want, a)
		acc, accWant := make([]float64, n), make([]float64, n)
		for r := range 3 {
			row := twinValues(rng, n, float64(r+1))
			for c := range accWant {
				accWant[c] += float64(row[c])
			}
			c := avx2.Accumulate(acc, row)
			for ; c < n; c++ {
				acc[c] += float64(row[c])
			}
		}
		for c := range acc {
			if math.Float64bits(acc[c]) != math.Float64bits(accWant[c]) && !(acc[c] != acc[c] && accWant[c] != accWant[c]) {
				t.Fatalf("Accumulate n=%d: column %d sums to %v, the Go loop to %v", n, c, acc[c], accWant[c])
			}
		}
	}
	// The layer norm's sums and rows, the column-sum term of its gain,
	// the row maximum and the non-finite scan.
	for _, n := range []int{5, 16, 768, 1031} {
		ds, ws, xs := twinValues(rng, n, 1), twinValues(rng, n, 1), twinValues(rng, n, 1)
		mean, rstd, mg, mgx := float32(0.25), float32(1.5), float32(-0.125), float32(0.0625)
		checkSums := func(what string, got, want *[4]float64) {
			t.Helper()
			for l := range want {
				if math.Float64bits(got[l]) != math.Float64bits(want[l]) && !(got[l] != got[l] && want[l] != want[l]) {
					t.Fatalf("%s n=%d: lane %d sums to %v, the Go loop to %v", what, n, l, got[l], want[l])
				}
			}
		}
		moderate, mds, mws := make([]float32, n), make([]float32, n), make([]float32, n)
		for j := range moderate {
			moderate[j], mds[j], mws[j] = float32(rng.NormFloat64()), float32(rng.NormFloat64()), float32(rng.NormFloat64())
		}
		for pass, in := range [][]float32{xs, moderate} {
			ds, ws := ds, ws
			if pass == 1 { // every lane's sums finite, so that a lost sum is seen
				ds, ws = mds, mws
			}
			var got, want [4]float64
			sumLanes(in, &got)
			for j, v := range in {
				want[j%4] += float64(v)
			}
			checkSums("SumLanes", &got, &want)
			got, want = [4]float64{}, [4]float64{}
			squaredDevLanes(in, 0.3, &got)
			for j, v := range in {
				d := float64(v) - 0.3
				want[j%4] += d * d
			}
			checkSums("SquaredDevLanes", &got, &want)
			var gotG, wantG [4]float64
			got, want = [4]float64{}, [4]float64{}
			normBackwardSums(ds, ws, in, mean, rstd, &got, &gotG)
			for c := range ds {
				g := ds[c] * ws[c]
				want[c%4] += float64(g)
				wantG[c%4] += float64(g * (in[c] - mean) * rstd)
			}
			checkSums("LayerNormBackwardSums sg", &got, &want)
			checkSums("LayerNormBackwardSums sgx", &gotG, &wantG)
		}
		want, got := make([]float32, n), make([]float32, n)
		for c := range want {
			xhat := (xs[c] - mean) * rstd
			want[c] = rstd * (ds[c]*ws[c] - mg - xhat*mgx)
		}
		c := avx2.LayerNormBackwardRow(got, ds, ws, xs, mean, rstd, mg, mgx)
		for ; c < n; c++ {
			xhat := (xs[c] - mean) * rstd
			got[c] = rstd * (ds[c]*ws[c] - mg - xhat*mgx)
		}
		checkTwin32(t, "LayerNormBackwardRow", n, got, want, xs)
		acc, accWant := make([]float64, n), make([]float64, n)
		for c := range accWant {
			accWant[c] += float64(ds[c] * ((xs[c] - mean) * rstd))
		}
		c = avx2.LayerNormGain(acc, ds, xs, mean, rstd)
		for ; c < n; c++ {
			acc[c] += float64(ds[c] * ((xs[c] - mean) * rstd))
		}
		for c := range acc {
			if math.Float64bits(acc[c]) != math.Float64bits(accWant[c]) && !(acc[c] != acc[c] && accWant[c] != accWant[c]) {
				t.Fatalf("LayerNormGain n=%d: column %d is %v, the Go loop gives %v", n, c, acc[c], accWant[c])
			}
		}
		// rowMax: the Go loop's eight maxima against the twin's, on rows
		// with NaNs, infinities and zeros of both signs (twinValues), and
		// on rows of zeros of mixed signs, where only the order picks the
		// sign.
		zeros := make([]float32, n)
		for j := range zeros {
			if j == 0 || rng.IntN(2) == 0 {
				zeros[j] = float32(math.Copysign(0, -1)) // -0 first: a later +0 must not replace it
			}
		}
		for _, row := range [][]float32{xs, moderate, zeros} {
			var m [8]float32
			for k := range m {
				m[k] = row[0]
			}
			for j, v := range row {
				if v > m[j%8] {
					m[j%8] = v
				}
			}
			want := max(m[0], m[1], m[2], m[3], m[4], m[5], m[6], m[7])
			if got := rowMax(row); math.Float32bits(got) != math.Float32bits(want) && !(got != got && want != want) {
				t.Fatalf("RowMax n=%d: %v (%#08x), the Go loop %v (%#08x)", n, got, math.Float32bits(got), want, math.Float32bits(want))
			}
		}
		// The non-finite scan: an Inf or a NaN at every position of a
		// sixteen-word group and of the tail, and none.
		words := make([]uint32, n)
		for j := range words {
			words[j] = math.Float32bits(moderate[j])
		}
		if done, found := avx2.NonFinite32(words); found || done != n&^15 {
			t.Fatalf("NonFinite32 n=%d on finite values: found %t after %d words", n, found, done)
		}
		for at := range n {
			if at >= 40 && at < n-40 {
				continue // the first and the last forty positions: groups and the tail
			}
			for _, bad := range []float32{float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN())} {
				vals := append([]float32(nil), moderate...)
				vals[at] = bad
				buf := cuda.NewBuffer(cuda.F32, n, cuda.Temporaries, 0, unsafe.Slice((*byte)(unsafe.Pointer(&vals[0])), 4*n), nil)
				if !nonFiniteRange(buf, 0, n) {
					t.Fatalf("nonFiniteRange n=%d: %v at %d not found", n, bad, at)
				}
			}
		}
	}
	for _, n := range []int{8, 9, 64, 1000, 4099} {
		for _, dec := range []bool{false, true} {
			for _, step := range []int{1, 10} {
				p, g := twinValues(rng, n, 1), twinValues(rng, n, 1e-2)
				m, v := twinValues(rng, n, 1e-3), twinValues(rng, n, 1e-6)
				for i := range v {
					if i%5 != 0 {
						v[i] = float32(math.Abs(float64(v[i]))) // mostly valid second moments; some negative ones make NaNs
					}
				}
				want := [][]float32{append([]float32(nil), p...), append([]float32(nil), m...), append([]float32(nil), v...)}
				got := [][]float32{append([]float32(nil), p...), append([]float32(nil), m...), append([]float32(nil), v...)}
				s := adamScalarsOf[float32](cuda.AdamArgs{LR: 3e-4, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1, Decoupled: dec, Step: step, GradScale: 0.5})
				k := s.twin()
				s.loop(want[0], g, want[1], want[2])
				done := avx2.Adam(got[0], g, got[1], got[2], &k)
				if done != n&^7 {
					t.Fatalf("n=%d: avx2.Adam did %d elements, want %d", n, done, n&^7)
				}
				s.loop(got[0][done:], g[done:], got[1][done:], got[2][done:])
				for s, name := range []string{"p", "m", "v"} {
					for i := range want[s] {
						if !sameFloat32(got[s][i], want[s][i]) {
							t.Fatalf("Adam n=%d decoupled=%t step=%d: %s[%d] = %v (%#08x), the Go loop gives %v (%#08x); inputs p %v g %v m %v v %v",
								n, dec, step, name, i, got[s][i], math.Float32bits(got[s][i]), want[s][i], math.Float32bits(want[s][i]), p[i], g[i], m[i], v[i])
						}
					}
				}
			}
		}
	}
}

// checkTwin32 fails the test at the first element where a twin's fp32
// result is not the Go loop's, bit for bit.
func checkTwin32(t *testing.T, what string, n int, got, want, in []float32) {
	t.Helper()
	for i := range want {
		if !sameFloat32(got[i], want[i]) {
			t.Fatalf("%s n=%d: at x = %v the twin gives %v (%#08x), the Go loop %v (%#08x)", what, n, in[i], got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
		}
	}
}

// TestBF16Twins: the bfloat16 conversions' twins against cuda's, bit for
// bit: every bfloat16 to float32, and to bfloat16 every float32 whose high
// half is any of the 65,536 and whose low half is one that decides the
// rounding (0, 1, just below, at and above the tie 0x8000, 0xffff) or a
// random one, NaNs with and without mantissa bits above the low half
// included.
func TestBF16Twins(t *testing.T) {
	if !avx2.Available {
		t.Skip("the twins do not run here (no AVX2, or GOAMD64=v3): the Go loops run alone")
	}
	hs := make([]uint16, 1<<16+5) // 5 more: a tail for the Go loop
	for i := range hs {
		hs[i] = uint16(i)
	}
	fs := make([]float32, len(hs))
	done := avx2.BF16ToF32(fs, hs)
	if done != len(hs)&^7 {
		t.Fatalf("BF16ToF32 did %d of %d", done, len(hs))
	}
	for i, h := range hs[:done] {
		if math.Float32bits(fs[i]) != math.Float32bits(cuda.BF16ToF32(h)) {
			t.Fatalf("BF16ToF32(%#04x) = %#08x, cuda gives %#08x", h, math.Float32bits(fs[i]), math.Float32bits(cuda.BF16ToF32(h)))
		}
	}
	rng := rand.New(rand.NewPCG(3, 4))
	lows := []uint32{0, 1, 0x7fff, 0x8000, 0x8001, 0xffff, 0x4000}
	src := make([]float32, 0, len(lows)*(1<<16)+3)
	for hi := range uint32(1 << 16) {
		for _, lo := range lows {
			src = append(src, math.Float32frombits(hi<<16|lo))
		}
		src = append(src, math.Float32frombits(hi<<16|uint32(rng.IntN(1<<16))))
	}
	src = append(src, 1, 2, 3)
	dst := make([]uint16, len(src))
	done = avx2.F32ToBF16(dst, src)
	if done != len(src)&^7 {
		t.Fatalf("F32ToBF16 did %d of %d", done, len(src))
	}
	for i, f := range src[:done] {
		if want := cuda.F32ToBF16(f); dst[i] != want {
			t.Fatalf("F32ToBF16(%#08x) = %#04x, cuda gives %#04x", math.Float32bits(f), dst[i], want)
		}
	}
}
