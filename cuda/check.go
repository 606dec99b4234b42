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

// floats checks a float buffer of want elements, want given with its
// formula.
func (c *checker) floats(name string, b *Buffer, want int, formula string) {
	c.float(name, b)
	c.length(name, b, want, formula)
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

// stats checks layer-norm statistics: fp32 or fp64, a (mean, rstd) pair
// for each of N rows.
func (c *checker) stats(b *Buffer, N int) {
	c.f32or64("stats", b)
	c.length("stats", b, 2*N, "2·N")
}

// ids checks an int32 buffer of want elements.
func (c *checker) ids(name string, b *Buffer, want int, formula string) {
	if !c.buf(name, b) {
		return
	}
	if b.DType != I32 {
		c.fail("%s is %s, want int32", name, b.DType)
		return
	}
	c.length(name, b, want, formula)
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

// floatRows checks a float buffer that holds whole rows of C and at least
// min of them.
func (c *checker) floatRows(name string, b *Buffer, C, min int, minFormula string) {
	if !c.float(name, b) {
		return
	}
	if b.Len%C != 0 {
		c.fail("%s has %d elements, not a whole number of rows of C = %d", name, b.Len, C)
	} else if b.Len/C < min {
		c.fail("%s has %d rows of C = %d, want at least %s = %d", name, b.Len/C, C, minFormula, min)
	}
}

// elementwise checks the buffers of an elementwise kernel, given as name,
// buffer pairs, the output first: every one a float buffer, the inputs of
// the output's length.
func (c *checker) elementwise(namesAndBuffers ...any) {
	for i := 0; i+1 < len(namesAndBuffers); i += 2 {
		c.float(namesAndBuffers[i].(string), namesAndBuffers[i+1].(*Buffer))
	}
	outName, out := namesAndBuffers[0].(string), namesAndBuffers[1].(*Buffer)
	for i := 2; i+1 < len(namesAndBuffers); i += 2 {
		c.sameLen(namesAndBuffers[i].(string), namesAndBuffers[i+1].(*Buffer), outName, out)
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
	c.elementwise("dst", dst, "src", src)
	if c.err == nil && !(dst.addr == src.addr && dst.DType == src.DType) {
		c.disjoint("dst", dst, "src", src)
	}
	return c.err
}

func (Checks) Add(y, a, b *Buffer) error {
	c := check("Add")
	c.elementwise("y", y, "a", a, "b", b)
	return c.err
}

func (Checks) Embedding(out, tokens, wte, wpe *Buffer, B, T, C int) error {
	c := check("Embedding")
	c.positive("B", B, "T", T, "C", C)
	c.floats("out", out, B*T*C, "B·T·C")
	c.ids("tokens", tokens, B*T, "B·T")
	c.floatRows("wte", wte, C, 1, "V")
	c.floatRows("wpe", wpe, C, T, "T")
	return c.err
}

func (Checks) EmbeddingBackwardTokens(dwte, dout, tokens *Buffer, B, T, C int) error {
	c := check("EmbeddingBackwardTokens")
	c.positive("B", B, "T", T, "C", C)
	c.floatRows("dwte", dwte, C, 1, "V")
	c.floats("dout", dout, B*T*C, "B·T·C")
	c.ids("tokens", tokens, B*T, "B·T")
	c.disjoint("dwte", dwte, "dout", dout)
	return c.err
}

func (Checks) EmbeddingBackwardPositions(dwpe, dout *Buffer, B, T, C int) error {
	c := check("EmbeddingBackwardPositions")
	c.positive("B", B, "T", T, "C", C)
	c.floatRows("dwpe", dwpe, C, T, "T")
	c.floats("dout", dout, B*T*C, "B·T·C")
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
	c.stats(stats, N)
	c.floats("x", x, N*C, "N·C")
	c.finite("eps", eps)
	if c.err == nil && eps < 0 {
		c.fail("eps is %g, want ≥ 0", eps)
	}
	return c.err
}

func (Checks) LayerNorm(y, x, stats, w, b *Buffer, N, C int) error {
	c := check("LayerNorm")
	c.positive("N", N, "C", C)
	c.floats("y", y, N*C, "N·C")
	c.floats("x", x, N*C, "N·C")
	c.stats(stats, N)
	c.floats("w", w, C, "C")
	c.floats("b", b, C, "C")
	return c.err
}

func (Checks) LayerNormBackwardX(dx, dy, x, stats, w *Buffer, N, C int) error {
	c := check("LayerNormBackwardX")
	c.positive("N", N, "C", C)
	c.floats("dx", dx, N*C, "N·C")
	c.floats("dy", dy, N*C, "N·C")
	c.floats("x", x, N*C, "N·C")
	c.stats(stats, N)
	c.floats("w", w, C, "C")
	return c.err
}

func (Checks) LayerNormBackwardW(dw, dy, x, stats *Buffer, N, C int) error {
	c := check("LayerNormBackwardW")
	c.positive("N", N, "C", C)
	c.floats("dw", dw, C, "C")
	c.floats("dy", dy, N*C, "N·C")
	c.floats("x", x, N*C, "N·C")
	c.stats(stats, N)
	return c.err
}

func (Checks) SumRows(dst, src *Buffer, N, C int) error {
	c := check("SumRows")
	c.positive("N", N, "C", C)
	c.floats("dst", dst, C, "C")
	c.floats("src", src, N*C, "N·C")
	c.disjoint("dst", dst, "src", src)
	return c.err
}

func (Checks) AddBias(y, b *Buffer, N, C int) error {
	c := check("AddBias")
	c.positive("N", N, "C", C)
	c.floats("y", y, N*C, "N·C")
	c.floats("b", b, C, "C")
	c.disjoint("y", y, "b", b)
	return c.err
}

func (Checks) GELU(y, x *Buffer) error {
	c := check("GELU")
	c.elementwise("y", y, "x", x)
	return c.err
}

func (Checks) GELUBackward(dx, dy, x *Buffer) error {
	c := check("GELUBackward")
	c.elementwise("dx", dx, "dy", dy, "x", x)
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
	c.floats("p", p, B*NH*T*T, "B·NH·T·T")
	c.floats("qkv", qkv, B*T*3*C, "B·T·3C")
	c.disjoint("p", p, "qkv", qkv)
	return c.err
}

func (Checks) AttentionOut(y, qkv, p *Buffer, B, T, C, NH int) error {
	c := check("AttentionOut")
	c.heads(B, T, C, NH)
	c.floats("y", y, B*T*C, "B·T·C")
	c.floats("qkv", qkv, B*T*3*C, "B·T·3C")
	c.floats("p", p, B*NH*T*T, "B·NH·T·T")
	c.disjoint("y", y, "qkv", qkv)
	c.disjoint("y", y, "p", p)
	return c.err
}

func (Checks) AttentionBackward(dqkv, dy, qkv, p, scratch *Buffer, B, T, C, NH int) error {
	c := check("AttentionBackward")
	c.heads(B, T, C, NH)
	c.floats("dqkv", dqkv, B*T*3*C, "B·T·3C")
	c.floats("dy", dy, B*T*C, "B·T·C")
	c.floats("qkv", qkv, B*T*3*C, "B·T·3C")
	c.floats("p", p, B*NH*T*T, "B·NH·T·T")
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
	c.floats("logits", logits, N*V, "N·V")
	c.ids("targets", targets, N, "N")
	c.f32or64("scratch", scratch)
	c.atLeast("scratch", scratch, CrossEntropyScratchLen(N), "N")
	c.disjoint("scratch", scratch, "logits", logits)
	return c.err
}

func (Checks) CrossEntropyBackward(dlogits, dloss, logits, targets *Buffer, N, V int) error {
	c := check("CrossEntropyBackward")
	c.positive("N", N, "V", V)
	c.floats("dlogits", dlogits, N*V, "N·V")
	c.f32or64("dloss", dloss)
	c.length("dloss", dloss, 1, "1")
	c.floats("logits", logits, N*V, "N·V")
	c.ids("targets", targets, N, "N")
	return c.err
}

// state checks a buffer of optimizer state or master weights: fp32 or
// fp64, of param's length.
func (c *checker) state(name string, b, param *Buffer) {
	c.f32or64(name, b)
	c.sameLen(name, b, "param", param)
}

// optimizerBuffers checks what Adam and SGD share: the parameter, its
// gradient and the optional master copy.
func (c *checker) optimizerBuffers(param, grad, master *Buffer, gradScale float32) {
	c.elementwise("param", param, "grad", grad)
	if master == nil {
		if c.err == nil && param.DType != F32 && param.DType != F64 {
			c.fail("param is %s and master is nil: without master weights param is updated in place and must be fp32 or fp64", param.DType)
		}
	} else {
		c.state("master", master, param)
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
	c.state("m", m, param)
	c.state("v", v, param)
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
		c.state("mom", mom, param)
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
	ar, ac, br, bc := m.Dims()
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
