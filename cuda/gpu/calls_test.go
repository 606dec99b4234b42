//go:build trainmem_cuda

package gpu

import (
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"trainmem/cuda"
)

// ptxEntries parses the entry points of a PTX file: name → parameter
// types (".u64", ".f64", ...).
func ptxEntries(t *testing.T, path string) map[string][]string {
	t.Helper()
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		t.Skipf("%s: not here (a test binary run away from the source tree)", path)
	}
	if err != nil {
		t.Fatal(err)
	}
	entry := regexp.MustCompile(`(?s)\.visible \.entry (\w+)\((.*?)\)`)
	param := regexp.MustCompile(`\.param (\.\w+) `)
	out := map[string][]string{}
	for _, m := range entry.FindAllStringSubmatch(string(data), -1) {
		var types []string
		for _, p := range param.FindAllStringSubmatch(m[2], -1) {
			types = append(types, p[1])
		}
		out[m[1]] = types
	}
	return out
}

// TestKernelSignatures checks the Go table of kernel parameters against
// the PTX the device loads: every kernel exists for every target, takes as
// many parameters as the table says, each 8 bytes, doubles where the table
// has 'f'.
func TestKernelSignatures(t *testing.T) {
	for _, target := range PTXTargets {
		path := "kernels/kernels_sm" + itoa(target) + ".ptx"
		entries := ptxEntries(t, path)
		if len(entries) == 0 {
			t.Fatalf("%s: no entry points", path)
		}
		for entry := range entries {
			if _, ok := signature(entry); !ok {
				t.Errorf("%s: entry %s has no signature in kernelSignatures", path, entry)
			}
		}
		for base, kinds := range kernelSignatures {
			names := []string{base + "_f32", base + "_f64"}
			if singleEntry[base] {
				names = []string{base}
			}
			for _, name := range names {
				types, ok := entries[name]
				if !ok {
					t.Errorf("%s: no entry point %s", path, name)
					continue
				}
				if len(types) != len(kinds) {
					t.Errorf("%s: %s has %d parameters, the table %d (%s)", path, name, len(types), len(kinds), kinds)
					continue
				}
				for i, ty := range types {
					want := ".u64"
					if kinds[i] == 'f' {
						want = ".f64"
					}
					if ty != want {
						t.Errorf("%s: %s parameter %d is %s, the table says %c (%s)", path, name, i, ty, kinds[i], want)
					}
				}
			}
		}
	}
}

func itoa(v int) string {
	if v == 0 {
		return "0"
	}
	var b []byte
	for ; v > 0; v /= 10 {
		b = append([]byte{byte('0' + v%10)}, b...)
	}
	return string(b)
}

// fakeBuf is a buffer with an address and no memory: enough to build calls.
func fakeBuf(dt cuda.DType, n int, addr uintptr) *cuda.Buffer {
	return cuda.NewBuffer(dt, n, 0, addr, nil, nil)
}

// sampleCalls builds every call the CUDA device makes, for operands of dt
// (fp32 statistics, or fp64 for fp64 operands).
func sampleCalls(t *testing.T, dt cuda.DType) []*kcall {
	st := cuda.F32
	if dt == cuda.F64 {
		st = cuda.F64
	}
	B, T, C, NH, V := 2, 64, 96, 4, 300
	N := B * T
	a := uintptr(1 << 20)
	next := func() uintptr { a += 1 << 20; return a }
	x, y, w, b := fakeBuf(dt, N*C, next()), fakeBuf(dt, N*C, next()), fakeBuf(dt, C, next()), fakeBuf(dt, C, next())
	stats, tokens := fakeBuf(st, 2*N, next()), fakeBuf(cuda.I32, N, next())
	rms := fakeBuf(st, N, next())
	wte, wpe := fakeBuf(dt, V*C, next()), fakeBuf(dt, T*C, next())
	qkv, p := fakeBuf(dt, N*3*C, next()), fakeBuf(dt, B*NH*T*T, next())
	logits, loss, scratch := fakeBuf(dt, N*V, next()), fakeBuf(st, 1, next()), fakeBuf(st, N, next())
	ceStats := fakeBuf(st, cuda.CrossEntropyStatsLen(N), next())
	m, v := fakeBuf(st, 100, next()), fakeBuf(st, 100, next())
	param, grad, master := fakeBuf(dt, 100, next()), fakeBuf(dt, 100, next()), fakeBuf(st, 100, next())
	codes, absmax := fakeBuf(cuda.U8, N*C/2, next()), fakeBuf(cuda.F32, N*C/cuda.NF4Block, next())
	x8, codes8, absmax8, offset := fakeBuf(cuda.F32, 1000, next()), fakeBuf(cuda.U8, 1000, next()), fakeBuf(cuda.F32, 4, next()), fakeBuf(cuda.F32, 1, next())
	mm, err := cuda.MatMul{TransB: true, M: N, N: V, K: C, A: x, B: wte, C: logits, Alpha: 1}.Checked()
	if err != nil {
		t.Fatal(err)
	}
	return []*kcall{
		fillCall(x, 1), castCall(y, x), nonFiniteCall(x, 64), addCall(y, x, y), addBiasCall(y, b, N, C),
		geluCall(y, x), geluBackwardCall(y, x, x),
		swigluCall(y, qkv, N, C), swigluBackwardCall(qkv, y, qkv, N, C),
		ropeCall("rope", qkv, qkv, B, T, C, NH, NH/2, 1e4), ropeCall("rope_backward", qkv, qkv, B, T, C, NH, NH/2, 1e4),
		embeddingCall(y, tokens, wte, wpe, B, T, C, cuda.VocabPart{Lo: 1, V: V + 1, NoPositions: true}, 64), embeddingBackwardTokensCall(wte, y, tokens, B, T, C, cuda.VocabPart{}, true, 64),
		embeddingCall(y, tokens, wte, nil, B, T, C, cuda.VocabPart{NoPositions: true}, 64), // rotary positions: no wpe
		embeddingBackwardPositionsCall(wpe, y, B, T, C),
		normStatsCall(cuda.NormLayer, stats, x, N, C, 1e-5), normCall(cuda.NormLayer, y, x, stats, w, b, N, C),
		normBackwardXCall(cuda.NormLayer, y, x, x, stats, w, N, C), normBackwardWCall(cuda.NormLayer, w, y, x, stats, N, C), sumRowsCall(b, y, N, C),
		normStatsCall(cuda.NormRMS, rms, x, N, C, 1e-5), normCall(cuda.NormRMS, y, x, rms, w, nil, N, C),
		normBackwardXCall(cuda.NormRMS, y, x, x, rms, w, N, C), normBackwardWCall(cuda.NormRMS, w, y, x, rms, N, C),
		attentionProbsCall(p, qkv, B, T, C, NH, NH/2), attentionSoftmaxBackwardCall(fakeBuf(st, NH*T*T, next()), p, NH, T, C/NH),
		attentionKVStoreCall(qkv, fakeBuf(st, T*C/2, next()), T, C/2, 2*C, C),
		flashStatsCall(fakeBuf(st, B*NH*T, next()), qkv, B, T, C, NH, NH/2), flashOutCall(y, qkv, fakeBuf(st, B*NH*T, next()), B, T, C, NH, NH/2),
		flashBackwardDCall(fakeBuf(st, B*NH*T, next()), y, y, B, T, C, NH),
		flashBackwardCall("flash_backward_dq", int64(B*NH*T), qkv, y, qkv, fakeBuf(st, B*NH*T, next()), fakeBuf(st, B*NH*T, next()), B, T, C, NH, NH/2),
		flashBackwardCall("flash_backward_dkv", int64(B*NH/2*T), qkv, y, qkv, fakeBuf(st, B*NH*T, next()), fakeBuf(st, B*NH*T, next()), B, T, C, NH, NH/2),
		gemmGenericCall(mm, skipNone), gemmGenericCall(mm, skipLower),
		crossEntropyRowsCall(scratch, logits, tokens, N, V, dt == cuda.F64, 64), crossEntropyMeanCall(loss, scratch, N, dt == cuda.F64),
		crossEntropyBackwardCall(logits, loss, logits, tokens, N, V, 64),
		crossEntropyPartMaxCall(ceStats, logits, N, V), crossEntropyPartSumsCall(ceStats, logits, tokens, N, V, cuda.VocabPart{Lo: V, V: 3 * V}, 64),
		crossEntropyPartLossCall(loss, ceStats, N), crossEntropyPartBackwardCall(logits, loss, logits, tokens, ceStats, N, V, cuda.VocabPart{Lo: V, V: 3 * V}, 64),
		adamCall(param, grad, master, m, v, cuda.AdamArgs{LR: 1e-3, Beta1: 0.9, Beta2: 0.95, Step: 2, GradScale: 1}),
		adam8bitCall(param, grad, master, fakeBuf(cuda.U8, 100, next()), fakeBuf(cuda.U8, 100, next()), fakeBuf(cuda.F32, 1, next()), fakeBuf(cuda.F32, 1, next()),
			cuda.AdamArgs{LR: 1e-3, Beta1: 0.9, Beta2: 0.95, Step: 2, GradScale: 1, Decoupled: true}),
		sgdCall(param, grad, master, m, cuda.SGDArgs{LR: 0.1, Momentum: 0.9, GradScale: 1}),
		sgdCall(param, grad, nil, nil, cuda.SGDArgs{LR: 0.1, GradScale: 1}),
		quantizeNF4Call(codes, absmax, x), dequantizeNF4Call(y, codes, absmax),
		blockwiseMeanCall(offset, x8), quantizeBlockwiseCall(codes8, absmax8, offset, x8, cuda.DynamicSigned),
		dequantizeBlockwiseCall(x8, codes8, absmax8, nil, cuda.DynamicUnsigned),
	}
}

// TestKernelCalls builds every call the CUDA device makes, in fp32 and fp64
// modes, and checks each against its kernel's signature and the launch
// limits of an H100.
func TestKernelCalls(t *testing.T) {
	for _, dt := range []cuda.DType{cuda.F32, cuda.F16, cuda.BF16, cuda.F64} {
		for _, c := range sampleCalls(t, dt) {
			if err := c.verify(); err != nil {
				t.Errorf("%s: %v", dt, err)
			}
			if strings.HasSuffix(c.name, "_f64") != (dt == cuda.F64) && !strings.HasPrefix(c.name, "fill") &&
				!strings.HasPrefix(c.name, "cast") && !strings.HasPrefix(c.name, "non_finite") && !strings.Contains(c.name, "blockwise") {
				t.Errorf("%s: %s: compute type does not follow the operands", dt, c.name)
			}
			if err := c.l.check(c.name, h100); err != nil {
				t.Errorf("%s: %v", dt, err)
			}
		}
	}
	bad := plain("fill", gridStride(1, 1)).int(1)
	if err := bad.verify(); err == nil || !strings.Contains(err.Error(), "takes (piif)") {
		t.Errorf("a wrong argument list passed: %v", err)
	}
}

func TestInCompute(t *testing.T) {
	// As cuda/host/optim.go: F(c), rounded to fp32 for fp32 runs.
	c1, _ := cuda.AdamArgs{Beta1: 0.9, Beta2: 0.95, Step: 3}.Corrections()
	if got, want := inCompute(c1, false), float64(float32(c1)); got != want || got == c1 {
		t.Errorf("fp32 inCompute(%v) = %v, want %v", c1, got, want)
	}
	if got := inCompute(c1, true); got != c1 {
		t.Errorf("fp64 inCompute(%v) = %v", c1, got)
	}
}

// TestRegisterBudget: no kernel uses more registers a thread than the block
// size the CUDA device launches it with allows (65,536 registers an SM,
// allocated to warps in units of 256), as ptxas -v reports for sm_80 and
// sm_90; otherwise the launch fails with CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES.
// make ptx-check runs it with the kit's ptxas (PTXAS); elsewhere it skips.
func TestRegisterBudget(t *testing.T) {
	ptxas := os.Getenv("PTXAS")
	if ptxas == "" {
		t.Skip("needs ptxas: make ptx-check runs this test with PTXAS set")
	}
	threads := map[string]int{}
	for _, dt := range []cuda.DType{cuda.F32, cuda.F64} {
		for _, c := range sampleCalls(t, dt) {
			threads[c.name] = max(threads[c.name], c.l.block[0]*c.l.block[1]*c.l.block[2])
		}
	}
	entry := regexp.MustCompile(`Compiling entry function '(\w+)' for 'sm_(\d+)'`)
	used := regexp.MustCompile(`Used (\d+) registers`)
	for _, target := range PTXTargets {
		out, err := exec.Command(ptxas, "-v", "-arch=sm_"+itoa(target), "-o", os.DevNull, "kernels/kernels_sm"+itoa(target)+".ptx").CombinedOutput()
		if err != nil {
			t.Fatalf("ptxas: %v\n%s", err, out)
		}
		var current string
		seen := 0
		for _, line := range strings.Split(string(out), "\n") {
			if m := entry.FindStringSubmatch(line); m != nil {
				current = m[1]
				continue
			}
			m := used.FindStringSubmatch(line)
			if m == nil || current == "" {
				continue
			}
			regs, _ := strconv.Atoi(m[1])
			n, ok := threads[current]
			if !ok {
				t.Errorf("sm_%d: %s has no launch in the device's calls", target, current)
				continue
			}
			warpRegs := (regs*32 + 255) / 256 * 256
			if need := warpRegs * (n / 32); need > 65536 {
				t.Errorf("sm_%d: %s uses %d registers a thread: %d threads a block need %d of the SM's 65,536", target, current, regs, n, need)
			}
			seen++
			current = ""
		}
		if seen < len(threads) {
			t.Errorf("sm_%d: ptxas reported registers for %d entries, the device launches %d", target, seen, len(threads))
		}
		t.Logf("sm_%d: %d kernels within their blocks' register budgets", target, seen)
	}
}
