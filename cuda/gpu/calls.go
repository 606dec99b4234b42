package gpu

// Kernel calls of the CUDA device, built in pure Go so that they can be
// checked without a GPU: each builder returns the kernel's entry point
// (NAME_f32 or NAME_f64 by the host's rule: fp64 when every float operand
// is fp64), its launch geometry and its arguments, every one an 8-byte
// slot (kernels.cu's conventions). calls_test.go parses the PTX and
// checks every builder's argument list, slot by slot, against the kernel's
// parameters.

import (
	"fmt"
	"math"
	"trainmem/cuda"
)

// kcall is one kernel launch.
type kcall struct {
	name  string
	l     launch
	args  []uint64
	kinds []byte // per argument: 'p' pointer, 'i' integer (also dtype codes), 'f' double
}

func newCall(base string, f64 bool, l launch) *kcall {
	name := base
	if f64 {
		name += "_f64"
	} else {
		name += "_f32"
	}
	return &kcall{name: name, l: l}
}

// plain is a call of a kernel with a single entry point.
func plain(name string, l launch) *kcall { return &kcall{name: name, l: l} }

func (c *kcall) ptr(a uintptr) *kcall {
	c.args = append(c.args, uint64(a))
	c.kinds = append(c.kinds, 'p')
	return c
}

// buf passes a buffer as its address and its dtype code.
func (c *kcall) buf(b *cuda.Buffer) *kcall { return c.ptr(b.Addr()).int(int64(b.DType)) }

// ids passes an int32 buffer as its address alone.
func (c *kcall) ids(b *cuda.Buffer) *kcall { return c.ptr(b.Addr()) }

func (c *kcall) int(v int64) *kcall {
	c.args = append(c.args, uint64(v))
	c.kinds = append(c.kinds, 'i')
	return c
}

func (c *kcall) flag(v bool) *kcall {
	if v {
		return c.int(1)
	}
	return c.int(0)
}

func (c *kcall) f64(v float64) *kcall {
	c.args = append(c.args, math.Float64bits(v))
	c.kinds = append(c.kinds, 'f')
	return c
}

// kernelSignatures are the kernels' parameter kinds, in kernels.cu's
// order; the launcher refuses a call whose kinds differ, and the test
// checks this table against the PTX.
var kernelSignatures = map[string]string{
	"fill":                         "piif",
	"cast":                         "pipii",
	"non_finite":                   "piip",
	"add":                          "pipipii",
	"add_bias":                     "pipiii",
	"gelu":                         "pipii",
	"gelu_backward":                "pipipii",
	"embedding":                    "pippipiiiiip",
	"embedding_backward_tokens":    "pipipiiip",
	"embedding_backward_positions": "pipiiii",
	"layer_norm_stats":             "pipiiif",
	"layer_norm":                   "pipipipipiii",
	"layer_norm_backward_x":        "pipipipipiii",
	"layer_norm_backward_w":        "pipipipiii",
	"sum_rows":                     "pipiii",
	"attention_probs":              "pipiiiii",
	"attention_backward_softmax":   "pipiiif",
	"gemm_generic":                 "iiiiifpiiipiiifpiiii",
	"cross_entropy_rows":           "pipipiip",
	"cross_entropy_mean":           "pipii",
	"cross_entropy_backward":       "pipipipiip",
	"adam":                         "pipipipipiiffffffffii",
	"sgd":                          "pipipipiiffffii",
}

// singleEntry are the kernels with one entry point (no compute type).
var singleEntry = map[string]bool{"fill": true, "cast": true, "non_finite": true}

// signature returns the parameter kinds of an entry point (NAME, NAME_f32
// or NAME_f64).
func signature(entry string) (string, bool) {
	if s, ok := kernelSignatures[entry]; ok {
		return s, true
	}
	for _, suf := range []string{"_f32", "_f64"} {
		if len(entry) > len(suf) && entry[len(entry)-len(suf):] == suf {
			s, ok := kernelSignatures[entry[:len(entry)-len(suf)]]
			return s, ok
		}
	}
	return "", false
}

// verify checks a call's arguments against its kernel's signature.
func (c *kcall) verify() error {
	want, ok := signature(c.name)
	if !ok {
		return fmt.Errorf("cuda: internal: no kernel %q", c.name)
	}
	if string(c.kinds) != want {
		return fmt.Errorf("cuda: internal: kernel %s takes (%s), the call passes (%s)", c.name, want, c.kinds)
	}
	return nil
}

// The builders, one per kernel; arguments are checked already (cuda.Check).

func fillCall(dst *cuda.Buffer, v float32) *kcall {
	return plain("fill", gridStride(int64(dst.Len), elemBlock)).buf(dst).int(int64(dst.Len)).f64(float64(v))
}

func castCall(dst, src *cuda.Buffer) *kcall {
	return plain("cast", gridStride(int64(dst.Len), elemBlock)).buf(dst).buf(src).int(int64(dst.Len))
}

func nonFiniteCall(x *cuda.Buffer, flag uintptr) *kcall {
	return plain("non_finite", gridStride(int64(x.Len), elemBlock)).buf(x).int(int64(x.Len)).ptr(flag)
}

func addCall(y, a, b *cuda.Buffer) *kcall {
	return newCall("add", cuda.AllF64(y, a, b), gridStride(int64(y.Len), elemBlock)).buf(y).buf(a).buf(b).int(int64(y.Len))
}

func addBiasCall(y, b *cuda.Buffer, N, C int) *kcall {
	return newCall("add_bias", cuda.AllF64(y, b), gridStride(int64(N)*int64(C), elemBlock)).buf(y).buf(b).int(int64(N)).int(int64(C))
}

func geluCall(y, x *cuda.Buffer) *kcall {
	return newCall("gelu", cuda.AllF64(y, x), gridStride(int64(y.Len), elemBlock)).buf(y).buf(x).int(int64(y.Len))
}

func geluBackwardCall(dx, dy, x *cuda.Buffer) *kcall {
	return newCall("gelu_backward", cuda.AllF64(dx, dy, x), gridStride(int64(dx.Len), elemBlock)).buf(dx).buf(dy).buf(x).int(int64(dx.Len))
}

func embeddingCall(out, tokens, wte, wpe *cuda.Buffer, B, T, C int, status uintptr) *kcall {
	N := int64(B) * int64(T)
	return newCall("embedding", cuda.AllF64(out, wte, wpe), gridStride(N*int64(C), elemBlock)).
		buf(out).ids(tokens).buf(wte).buf(wpe).int(N).int(int64(T)).int(int64(C)).int(int64(wte.Len / C)).ptr(status)
}

func embeddingBackwardTokensCall(dwte, dout, tokens *cuda.Buffer, B, T, C int, status uintptr) *kcall {
	N := int64(B) * int64(T)
	return newCall("embedding_backward_tokens", cuda.AllF64(dwte, dout), perWarp(N)).
		buf(dwte).buf(dout).ids(tokens).int(N).int(int64(C)).int(int64(dwte.Len / C)).ptr(status)
}

func embeddingBackwardPositionsCall(dwpe, dout *cuda.Buffer, B, T, C int) *kcall {
	return newCall("embedding_backward_positions", cuda.AllF64(dwpe, dout), gridStride(int64(T)*int64(C), elemBlock)).
		buf(dwpe).buf(dout).int(int64(B)).int(int64(T)).int(int64(C))
}

func layerNormStatsCall(stats, x *cuda.Buffer, N, C int, eps float32) *kcall {
	return newCall("layer_norm_stats", cuda.AllF64(stats, x), perRow(int64(N), rowBlock)).
		buf(stats).buf(x).int(int64(N)).int(int64(C)).f64(float64(eps))
}

func layerNormCall(y, x, stats, w, b *cuda.Buffer, N, C int) *kcall {
	return newCall("layer_norm", cuda.AllF64(y, x, stats, w, b), gridStride(int64(N)*int64(C), elemBlock)).
		buf(y).buf(x).buf(stats).buf(w).buf(b).int(int64(N)).int(int64(C))
}

func layerNormBackwardXCall(dx, dy, x, stats, w *cuda.Buffer, N, C int) *kcall {
	return newCall("layer_norm_backward_x", cuda.AllF64(dx, dy, x, stats, w), perRow(int64(N), rowBlock)).
		buf(dx).buf(dy).buf(x).buf(stats).buf(w).int(int64(N)).int(int64(C))
}

func layerNormBackwardWCall(dw, dy, x, stats *cuda.Buffer, N, C int) *kcall {
	return newCall("layer_norm_backward_w", cuda.AllF64(dw, dy, x, stats), columnSumsLaunch(C)).
		buf(dw).buf(dy).buf(x).buf(stats).int(int64(N)).int(int64(C))
}

func sumRowsCall(dst, src *cuda.Buffer, N, C int) *kcall {
	return newCall("sum_rows", cuda.AllF64(dst, src), columnSumsLaunch(C)).buf(dst).buf(src).int(int64(N)).int(int64(C))
}

func attentionProbsCall(p, qkv *cuda.Buffer, B, T, C, NH int) *kcall {
	return newCall("attention_probs", cuda.AllF64(p, qkv), attentionLaunch(B, T, NH)).
		buf(p).buf(qkv).int(int64(B)).int(int64(T)).int(int64(C)).int(int64(NH))
}

// attentionSoftmaxBackwardCall works in place on ds, the dP of one batch
// element (NH·T rows of T), with p that element's probabilities.
func attentionSoftmaxBackwardCall(ds, p *cuda.Buffer, NH, T, hd int) *kcall {
	rows := int64(NH) * int64(T)
	return newCall("attention_backward_softmax", cuda.AllF64(ds, p), perWarp(rows)).
		buf(ds).buf(p).int(rows).int(int64(T)).f64(1 / math.Sqrt(float64(hd)))
}

// Triangular operands of gemm_generic: products with A's known zeros are
// skipped (kernels.cu).
const (
	skipNone  = 0
	skipLower = 1 // A[m, k] = 0 for k > m
	skipUpper = 2 // A[m, k] = 0 for k < m
)

// gemmGenericCall runs a normalized MatMul (every LD and stride set) on
// gemm_generic.
func gemmGenericCall(n cuda.MatMul, skip int) *kcall {
	return newCall("gemm_generic", cuda.AllF64(n.A, n.B, n.C), gemmLaunch(n.M, n.N, n.Batch)).
		flag(n.TransA).flag(n.TransB).int(int64(n.M)).int(int64(n.N)).int(int64(n.K)).f64(float64(n.Alpha)).
		buf(n.A).int(int64(n.LDA)).int(int64(n.StrideA)).
		buf(n.B).int(int64(n.LDB)).int(int64(n.StrideB)).
		f64(float64(n.Beta)).buf(n.C).int(int64(n.LDC)).int(int64(n.StrideC)).int(int64(skip))
}

func crossEntropyRowsCall(losses, logits, targets *cuda.Buffer, N, V int, f64 bool, status uintptr) *kcall {
	return newCall("cross_entropy_rows", f64, perRow(int64(N), rowBlock)).
		buf(losses).buf(logits).ids(targets).int(int64(N)).int(int64(V)).ptr(status)
}

func crossEntropyMeanCall(loss, losses *cuda.Buffer, N int, f64 bool) *kcall {
	return newCall("cross_entropy_mean", f64, launch{grid: [3]int{1, 1, 1}, block: [3]int{256, 1, 1}}).
		buf(loss).buf(losses).int(int64(N))
}

func crossEntropyBackwardCall(dlogits, dloss, logits, targets *cuda.Buffer, N, V int, status uintptr) *kcall {
	return newCall("cross_entropy_backward", cuda.AllF64(dlogits, dloss, logits), perRow(int64(N), rowBlock)).
		buf(dlogits).buf(dloss).buf(logits).ids(targets).int(int64(N)).int(int64(V)).ptr(status)
}

// inCompute is v rounded to the compute type (fp64 when f64, else fp32),
// as the host rounds its constants.
func inCompute(v float64, f64 bool) float64 {
	if f64 {
		return v
	}
	return float64(float32(v))
}

func adamCall(param, grad, master, m, v *cuda.Buffer, a cuda.AdamArgs) *kcall {
	f64 := cuda.AllF64(param, grad, master, m, v)
	pb := param
	if master != nil {
		pb = master
	}
	c1, c2 := a.Corrections()
	return newCall("adam", f64, gridStride(int64(param.Len), elemBlock)).
		buf(param).buf(grad).buf(pb).buf(m).buf(v).int(int64(param.Len)).
		f64(float64(a.LR)).f64(float64(a.Beta1)).f64(float64(a.Beta2)).f64(float64(a.Eps)).
		f64(float64(a.WeightDecay)).f64(float64(a.GradScale)).
		f64(inCompute(c1, f64)).f64(inCompute(c2, f64)).
		flag(a.Decoupled).flag(master != nil)
}

func sgdCall(param, grad, master, mom *cuda.Buffer, a cuda.SGDArgs) *kcall {
	if a.Momentum == 0 {
		mom = nil
	}
	pb := param
	if master != nil {
		pb = master
	}
	c := newCall("sgd", cuda.AllF64(param, grad, master, mom), gridStride(int64(param.Len), elemBlock)).
		buf(param).buf(grad).buf(pb)
	if mom != nil {
		c.buf(mom)
	} else {
		c.ptr(0).int(int64(cuda.F32))
	}
	return c.int(int64(param.Len)).f64(float64(a.LR)).f64(float64(a.Momentum)).f64(float64(a.WeightDecay)).
		f64(float64(a.GradScale)).flag(mom != nil).flag(master != nil)
}
