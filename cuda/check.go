package cuda

// Argument validation shared by every device: a kernel's checks run before
// anything else on Host, Shape and CUDA alike, so that a wrong shape or type
// fails the same way in a dry run as on a card. Checks that need the data
// (token ids within the vocabulary) can only run on devices that hold it;
// they are here too (CheckIDs), called by those devices.
//
// Messages name the kernel and the argument and give the expected value
// with its formula: "cuda: LayerNorm: x has 100 elements, want N·C = 128".

import (
	"fmt"
	"math"
	"strconv"
)

// Checks is the argument validation of every kernel, shared by every
// device: Host and CUDA call it before they compute, and Shape, which
// computes nothing, is Checks and its allocator. Check is the value to call
// it through: cuda.Check.LayerNorm(y, x, stats, w, b, N, C).
type Checks struct{}

var _ Kernels = Checks{}

// Check is the one Checks value.
var Check Checks

type checker struct {
	kernel string
	err    error
}

func check(kernel string) *checker { return &checker{kernel: kernel} }

func (c *checker) fail(format string, args ...any) {
	if c.err == nil {
		c.err = fmt.Errorf("cuda: %s: %s", c.kernel, fmt.Sprintf(format, args...))
	}
}

// positive checks named dimensions: dims("B", B, "T", T).
func (c *checker) positive(namesAndValues ...any) {
	for i := 0; i+1 < len(namesAndValues); i += 2 {
		if v := namesAndValues[i+1].(int); v <= 0 {
			c.fail("%s is %d, want > 0", namesAndValues[i], v)
		}
	}
}

// buf checks that b is a usable buffer; later checks on b are skipped when
// it is not.
func (c *checker) buf(name string, b *Buffer) bool {
	switch {
	case c.err != nil:
		return false
	case b == nil:
		c.fail("%s is nil", name)
	case b.freed:
		c.fail("%s (%s) was freed", name, b)
	default:
		return true
	}
	return false
}

// float checks a buffer of any float type.
func (c *checker) float(name string, b *Buffer) bool {
	if !c.buf(name, b) {
		return false
	}
	if !b.DType.Float() || b.DType > F64 {
		c.fail("%s is %s, want a float type", name, b.DType)
		return false
	}
	return true
}

// f32or64 checks a buffer that must be fp32 or fp64 (statistics, losses,
// optimizer state, scratch).
func (c *checker) f32or64(name string, b *Buffer) bool {
	if !c.buf(name, b) {
		return false
	}
	if b.DType != F32 && b.DType != F64 {
		c.fail("%s is %s, want fp32 or fp64", name, b.DType)
		return false
	}
	return true
}

// ids checks an int32 buffer.
func (c *checker) ids(name string, b *Buffer) bool {
	if !c.buf(name, b) {
		return false
	}
	if b.DType != I32 {
		c.fail("%s is %s, want int32", name, b.DType)
		return false
	}
	return true
}

// length checks b.Len == want, want given with its formula.
func (c *checker) length(name string, b *Buffer, want int, formula string) {
	if c.err == nil && b != nil && b.Len != want {
		if formula == strconv.Itoa(want) {
			c.fail("%s has %d elements, want %d", name, b.Len, want)
		} else {
			c.fail("%s has %d elements, want %s = %d", name, b.Len, formula, want)
		}
	}
}

// atLeast checks b.Len ≥ want.
func (c *checker) atLeast(name string, b *Buffer, want int, formula string) {
	if c.err == nil && b != nil && b.Len < want {
		c.fail("%s has %d elements, want at least %s = %d", name, b.Len, formula, want)
	}
}

// rows checks that b holds whole rows of C and at least min of them.
func (c *checker) rows(name string, b *Buffer, C, min int, minFormula string) {
	if c.err != nil || b == nil {
		return
	}
	if b.Len%C != 0 {
		c.fail("%s has %d elements, not a whole number of rows of C = %d", name, b.Len, C)
	} else if b.Len/C < min {
		c.fail("%s has %d rows of C = %d, want at least %s = %d", name, b.Len/C, C, minFormula, min)
	}
}

func (c *checker) sameLen(name string, b *Buffer, refName string, ref *Buffer) {
	if c.err == nil && b != nil && ref != nil && b.Len != ref.Len {
		c.fail("%s has %d elements, want %s's %d", name, b.Len, refName, ref.Len)
	}
}

// disjoint checks that an output does not overlap an input in memory.
func (c *checker) disjoint(outName string, out *Buffer, inName string, in *Buffer) {
	if c.err == nil && out != nil && in != nil && overlap(out, in) {
		c.fail("%s (%s) overlaps %s (%s)", outName, out, inName, in)
	}
}

func overlap(a, b *Buffer) bool {
	if a.Len == 0 || b.Len == 0 {
		return false
	}
	a0, a1 := a.addr, a.addr+uintptr(a.Bytes())
	b0, b1 := b.addr, b.addr+uintptr(b.Bytes())
	return a0 < b1 && b0 < a1
}

func (c *checker) finite(name string, v float32) {
	if c.err == nil && (math.IsNaN(float64(v)) || math.IsInf(float64(v), 0)) {
		c.fail("%s is %g, want a finite value", name, v)
	}
}

func (Checks) Fill(dst *Buffer, v float32) error {
	c := check("Fill")
	c.float("dst", dst)
	return c.err
}

// Cast: dst may be src itself (same type: nothing to do), never a
// view that overlaps it otherwise (a copy or a cast over overlapping
// memory reads what it has written).
func (Checks) Cast(dst, src *Buffer) error {
	c := check("Cast")
	c.float("dst", dst)
	c.float("src", src)
	c.sameLen("src", src, "dst", dst)
	if c.err == nil && !(dst.addr == src.addr && dst.DType == src.DType) {
		c.disjoint("dst", dst, "src", src)
	}
	return c.err
}

func (Checks) Add(y, a, b *Buffer) error {
	c := check("Add")
	c.float("y", y)
	c.float("a", a)
	c.float("b", b)
	c.sameLen("a", a, "y", y)
	c.sameLen("b", b, "y", y)
	return c.err
}

func (Checks) Embedding(out, tokens, wte, wpe *Buffer, B, T, C int) error {
	c := check("Embedding")
	c.positive("B", B, "T", T, "C", C)
	c.float("out", out)
	c.length("out", out, B*T*C, "B·T·C")
	c.ids("tokens", tokens)
	c.length("tokens", tokens, B*T, "B·T")
	c.float("wte", wte)
	c.rows("wte", wte, C, 1, "V")
	c.float("wpe", wpe)
	c.rows("wpe", wpe, C, T, "T")
	return c.err
}

func (Checks) EmbeddingBackwardTokens(dwte, dout, tokens *Buffer, B, T, C int) error {
	c := check("EmbeddingBackwardTokens")
	c.positive("B", B, "T", T, "C", C)
	c.float("dwte", dwte)
	c.rows("dwte", dwte, C, 1, "V")
	c.float("dout", dout)
	c.length("dout", dout, B*T*C, "B·T·C")
	c.ids("tokens", tokens)
	c.length("tokens", tokens, B*T, "B·T")
	c.disjoint("dwte", dwte, "dout", dout)
	return c.err
}

func (Checks) EmbeddingBackwardPositions(dwpe, dout *Buffer, B, T, C int) error {
	c := check("EmbeddingBackwardPositions")
	c.positive("B", B, "T", T, "C", C)
	c.float("dwpe", dwpe)
	c.rows("dwpe", dwpe, C, T, "T")
	c.float("dout", dout)
	c.length("dout", dout, B*T*C, "B·T·C")
	c.disjoint("dwpe", dwpe, "dout", dout)
	return c.err
}

// CheckIDs checks token ids or targets against the vocabulary on devices
// that hold the data. what is "token id" or "target"; T > 0 names the
// position as (b, t).
func CheckIDs(kernel, what string, ids []int32, T, V int) error {
	for i, id := range ids {
		if id < 0 || int(id) >= V {
			where := fmt.Sprintf("row %d", i)
			if T > 0 {
				where = fmt.Sprintf("position %d (b=%d, t=%d)", i, i/T, i%T)
			}
			return fmt.Errorf("cuda: %s: %s %d at %s is outside [0, V) with V = %d", kernel, what, id, where, V)
		}
	}
	return nil
}

func (Checks) LayerNormStats(stats, x *Buffer, N, C int, eps float32) error {
	c := check("LayerNormStats")
	c.positive("N", N, "C", C)
	c.f32or64("stats", stats)
	c.length("stats", stats, 2*N, "2·N")
	c.float("x", x)
	c.length("x", x, N*C, "N·C")
	c.finite("eps", eps)
	if c.err == nil && eps < 0 {
		c.fail("eps is %g, want ≥ 0", eps)
	}
	return c.err
}

func (Checks) LayerNorm(y, x, stats, w, b *Buffer, N, C int) error {
	c := check("LayerNorm")
	c.positive("N", N, "C", C)
	c.float("y", y)
	c.length("y", y, N*C, "N·C")
	c.float("x", x)
	c.length("x", x, N*C, "N·C")
	c.f32or64("stats", stats)
	c.length("stats", stats, 2*N, "2·N")
	c.float("w", w)
	c.length("w", w, C, "C")
	c.float("b", b)
	c.length("b", b, C, "C")
	return c.err
}

func (Checks) LayerNormBackwardX(dx, dy, x, stats, w *Buffer, N, C int) error {
	c := check("LayerNormBackwardX")
	c.positive("N", N, "C", C)
	c.float("dx", dx)
	c.length("dx", dx, N*C, "N·C")
	c.float("dy", dy)
	c.length("dy", dy, N*C, "N·C")
	c.float("x", x)
	c.length("x", x, N*C, "N·C")
	c.f32or64("stats", stats)
	c.length("stats", stats, 2*N, "2·N")
	c.float("w", w)
	c.length("w", w, C, "C")
	return c.err
}

func (Checks) LayerNormBackwardW(dw, dy, x, stats *Buffer, N, C int) error {
	c := check("LayerNormBackwardW")
	c.positive("N", N, "C", C)
	c.float("dw", dw)
	c.length("dw", dw, C, "C")
	c.float("dy", dy)
	c.length("dy", dy, N*C, "N·C")
	c.float("x", x)
	c.length("x", x, N*C, "N·C")
	c.f32or64("stats", stats)
	c.length("stats", stats, 2*N, "2·N")
	return c.err
}

func (Checks) SumRows(dst, src *Buffer, N, C int) error {
	c := check("SumRows")
	c.positive("N", N, "C", C)
	c.float("dst", dst)
	c.length("dst", dst, C, "C")
	c.float("src", src)
	c.length("src", src, N*C, "N·C")
	c.disjoint("dst", dst, "src", src)
	return c.err
}

func (Checks) AddBias(y, b *Buffer, N, C int) error {
	c := check("AddBias")
	c.positive("N", N, "C", C)
	c.float("y", y)
	c.length("y", y, N*C, "N·C")
	c.float("b", b)
	c.length("b", b, C, "C")
	c.disjoint("y", y, "b", b)
	return c.err
}

func (Checks) GELU(y, x *Buffer) error {
	c := check("GELU")
	c.float("y", y)
	c.float("x", x)
	c.sameLen("x", x, "y", y)
	return c.err
}

func (Checks) GELUBackward(dx, dy, x *Buffer) error {
	c := check("GELUBackward")
	c.float("dx", dx)
	c.float("dy", dy)
	c.float("x", x)
	c.sameLen("dy", dy, "dx", dx)
	c.sameLen("x", x, "dx", dx)
	return c.err
}

func (c *checker) heads(B, T, C, NH int) {
	c.positive("B", B, "T", T, "C", C, "NH", NH)
	if c.err == nil && C%NH != 0 {
		c.fail("C = %d is not a multiple of NH = %d", C, NH)
	}
}

func (Checks) AttentionProbs(p, qkv *Buffer, B, T, C, NH int) error {
	c := check("AttentionProbs")
	c.heads(B, T, C, NH)
	c.float("p", p)
	c.length("p", p, B*NH*T*T, "B·NH·T·T")
	c.float("qkv", qkv)
	c.length("qkv", qkv, B*T*3*C, "B·T·3C")
	c.disjoint("p", p, "qkv", qkv)
	return c.err
}

func (Checks) AttentionOut(y, qkv, p *Buffer, B, T, C, NH int) error {
	c := check("AttentionOut")
	c.heads(B, T, C, NH)
	c.float("y", y)
	c.length("y", y, B*T*C, "B·T·C")
	c.float("qkv", qkv)
	c.length("qkv", qkv, B*T*3*C, "B·T·3C")
	c.float("p", p)
	c.length("p", p, B*NH*T*T, "B·NH·T·T")
	c.disjoint("y", y, "qkv", qkv)
	c.disjoint("y", y, "p", p)
	return c.err
}

func (Checks) AttentionBackward(dqkv, dy, qkv, p, scratch *Buffer, B, T, C, NH int) error {
	c := check("AttentionBackward")
	c.heads(B, T, C, NH)
	c.float("dqkv", dqkv)
	c.length("dqkv", dqkv, B*T*3*C, "B·T·3C")
	c.float("dy", dy)
	c.length("dy", dy, B*T*C, "B·T·C")
	c.float("qkv", qkv)
	c.length("qkv", qkv, B*T*3*C, "B·T·3C")
	c.float("p", p)
	c.length("p", p, B*NH*T*T, "B·NH·T·T")
	c.f32or64("scratch", scratch)
	c.atLeast("scratch", scratch, AttentionScratchLen(T, NH), "NH·T·T")
	for _, in := range []struct {
		name string
		b    *Buffer
	}{{"dy", dy}, {"qkv", qkv}, {"p", p}, {"scratch", scratch}} {
		c.disjoint("dqkv", dqkv, in.name, in.b)
	}
	c.disjoint("scratch", scratch, "dy", dy)
	c.disjoint("scratch", scratch, "qkv", qkv)
	c.disjoint("scratch", scratch, "p", p)
	return c.err
}

func (Checks) CrossEntropy(loss, logits, targets, scratch *Buffer, N, V int) error {
	c := check("CrossEntropy")
	c.positive("N", N, "V", V)
	c.f32or64("loss", loss)
	c.length("loss", loss, 1, "1")
	c.float("logits", logits)
	c.length("logits", logits, N*V, "N·V")
	c.ids("targets", targets)
	c.length("targets", targets, N, "N")
	c.f32or64("scratch", scratch)
	c.atLeast("scratch", scratch, CrossEntropyScratchLen(N), "N")
	c.disjoint("scratch", scratch, "logits", logits)
	return c.err
}

func (Checks) CrossEntropyBackward(dlogits, dloss, logits, targets *Buffer, N, V int) error {
	c := check("CrossEntropyBackward")
	c.positive("N", N, "V", V)
	c.float("dlogits", dlogits)
	c.length("dlogits", dlogits, N*V, "N·V")
	c.f32or64("dloss", dloss)
	c.length("dloss", dloss, 1, "1")
	c.float("logits", logits)
	c.length("logits", logits, N*V, "N·V")
	c.ids("targets", targets)
	c.length("targets", targets, N, "N")
	return c.err
}

// optimizerBuffers checks what Adam and SGD share: the parameter, its
// gradient and the optional master copy.
func (c *checker) optimizerBuffers(param, grad, master *Buffer, gradScale float32) {
	c.float("param", param)
	c.float("grad", grad)
	c.sameLen("grad", grad, "param", param)
	if master == nil {
		if c.err == nil && param.DType != F32 && param.DType != F64 {
			c.fail("param is %s and master is nil: without master weights param is updated in place and must be fp32 or fp64", param.DType)
		}
	} else {
		c.f32or64("master", master)
		c.sameLen("master", master, "param", param)
		c.disjoint("param", param, "master", master)
	}
	c.finite("GradScale", gradScale)
	if c.err == nil && gradScale <= 0 {
		c.fail("GradScale is %g, want > 0 (1 when the loss is not scaled)", gradScale)
	}
}

func (Checks) Adam(param, grad, master, m, v *Buffer, a AdamArgs) error {
	c := check("Adam")
	c.optimizerBuffers(param, grad, master, a.GradScale)
	c.f32or64("m", m)
	c.sameLen("m", m, "param", param)
	c.f32or64("v", v)
	c.sameLen("v", v, "param", param)
	c.finite("LR", a.LR)
	c.finite("WeightDecay", a.WeightDecay)
	c.finite("Eps", a.Eps)
	if c.err == nil {
		switch {
		case a.Step < 1:
			c.fail("Step is %d, want ≥ 1 (steps count from 1)", a.Step)
		case !(a.Beta1 >= 0 && a.Beta1 < 1):
			c.fail("Beta1 is %g, want in [0, 1)", a.Beta1)
		case !(a.Beta2 >= 0 && a.Beta2 < 1):
			c.fail("Beta2 is %g, want in [0, 1)", a.Beta2)
		case a.Eps < 0:
			c.fail("Eps is %g, want ≥ 0", a.Eps)
		}
	}
	return c.err
}

func (Checks) SGD(param, grad, master, mom *Buffer, a SGDArgs) error {
	c := check("SGD")
	c.optimizerBuffers(param, grad, master, a.GradScale)
	c.finite("LR", a.LR)
	c.finite("WeightDecay", a.WeightDecay)
	c.finite("Momentum", a.Momentum)
	if c.err == nil && a.Momentum < 0 {
		c.fail("Momentum is %g, want ≥ 0", a.Momentum)
	}
	if a.Momentum > 0 {
		c.f32or64("mom", mom)
		c.sameLen("mom", mom, "param", param)
	}
	return c.err
}

func (Checks) NonFinite(x *Buffer) (bool, error) {
	c := check("NonFinite")
	c.float("x", x)
	return false, c.err
}

// MatMulSpan is the number of elements a batched matrix spans: the last
// element of the last matrix is at (batch-1)·stride + (rows-1)·ld + cols-1.
func MatMulSpan(batch, stride, rows, ld, cols int) int {
	return (batch-1)*stride + (rows-1)*ld + cols
}

// normalize fills in MatMul's defaults: Batch 0 → 1, LD 0 → the stored row
// length, stride 0 → rows·LD.
func (m MatMul) normalize() MatMul {
	if m.Batch == 0 {
		m.Batch = 1
	}
	ar, ac := m.M, m.K
	if m.TransA {
		ar, ac = m.K, m.M
	}
	br, bc := m.K, m.N
	if m.TransB {
		br, bc = m.N, m.K
	}
	if m.LDA == 0 {
		m.LDA = ac
	}
	if m.LDB == 0 {
		m.LDB = bc
	}
	if m.LDC == 0 {
		m.LDC = m.N
	}
	if m.StrideA == 0 {
		m.StrideA = ar * m.LDA
	}
	if m.StrideB == 0 {
		m.StrideB = br * m.LDB
	}
	if m.StrideC == 0 {
		m.StrideC = m.M * m.LDC
	}
	return m
}

// Dims returns the stored shapes (rows, cols) of A and B.
func (m MatMul) Dims() (ar, ac, br, bc int) {
	ar, ac = m.M, m.K
	if m.TransA {
		ar, ac = m.K, m.M
	}
	br, bc = m.K, m.N
	if m.TransB {
		br, bc = m.N, m.K
	}
	return
}

// MatMul checks m.
func (Checks) MatMul(m MatMul) error {
	_, err := m.Checked()
	return err
}

// Checked checks m as every device's MatMul does and returns it with its
// defaults filled in (Batch 0 → 1, LD 0 → the stored row length, stride 0
// → rows·LD), ready for a kernel.
func (m MatMul) Checked() (MatMul, error) {
	c := check("MatMul")
	c.positive("M", m.M, "N", m.N, "K", m.K)
	if c.err == nil && m.Batch < 0 {
		c.fail("Batch is %d, want ≥ 0 (0 means 1)", m.Batch)
	}
	for _, v := range []struct {
		name string
		v    int
	}{{"LDA", m.LDA}, {"LDB", m.LDB}, {"LDC", m.LDC}, {"StrideA", m.StrideA}, {"StrideB", m.StrideB}, {"StrideC", m.StrideC}} {
		if c.err == nil && v.v < 0 {
			c.fail("%s is %d, want ≥ 0 (0 means dense)", v.name, v.v)
		}
	}
	c.float("A", m.A)
	c.float("B", m.B)
	c.float("C", m.C)
	c.finite("Alpha", m.Alpha)
	c.finite("Beta", m.Beta)
	if c.err != nil {
		return m, c.err
	}
	n := m.normalize()
	ar, ac, br, bc := n.Dims()
	switch {
	case n.LDA < ac:
		c.fail("LDA is %d, want at least the %d columns of the stored A", n.LDA, ac)
	case n.LDB < bc:
		c.fail("LDB is %d, want at least the %d columns of the stored B", n.LDB, bc)
	case n.LDC < n.N:
		c.fail("LDC is %d, want at least N = %d", n.LDC, n.N)
	case n.Batch > 1 && n.StrideC < n.M*n.LDC:
		c.fail("StrideC is %d, less than M·LDC = %d: the batch's outputs would overlap", n.StrideC, n.M*n.LDC)
	}
	c.atLeast("A", n.A, MatMulSpan(n.Batch, n.StrideA, ar, n.LDA, ac), "(Batch-1)·StrideA + (rows-1)·LDA + cols")
	c.atLeast("B", n.B, MatMulSpan(n.Batch, n.StrideB, br, n.LDB, bc), "(Batch-1)·StrideB + (rows-1)·LDB + cols")
	c.atLeast("C", n.C, MatMulSpan(n.Batch, n.StrideC, n.M, n.LDC, n.N), "(Batch-1)·StrideC + (M-1)·LDC + N")
	c.disjoint("C", n.C, "A", n.A)
	c.disjoint("C", n.C, "B", n.B)
	return n, c.err
}

// CheckHostValues checks Upload's source or Download's destination: a
// []float32, []float64 or []int32 of length b.Len, int32 exactly for I32
// buffers.
func CheckHostValues(op, name string, vals any, b *Buffer) error {
	c := check(op)
	if b == nil {
		c.fail("buffer is nil")
		return c.err
	}
	if !c.buf("buffer", b) {
		return c.err
	}
	var n int
	var isInt bool
	switch v := vals.(type) {
	case []float32:
		n = len(v)
	case []float64:
		n = len(v)
	case []int32:
		n, isInt = len(v), true
	default:
		c.fail("%s is %T, want []float32, []float64 or []int32", name, vals)
		return c.err
	}
	switch {
	case isInt != (b.DType == I32):
		c.fail("%s is %T for a buffer of %s", name, vals, b.DType)
	case n != b.Len:
		c.fail("%s has %d elements, want the buffer's %d", name, n, b.Len)
	}
	return c.err
}
