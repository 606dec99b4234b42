package model

// The LoRA family: a low-rank adapter's up projection added into a frozen
// linear layer's output, and its gradients (lora.go says which layers and
// columns). The down projection, u = x·Aᵀ, is a LinearOp without a bias.

import (
	"fmt"
	"strings"

	G "gorgonia.org/gorgonia"

	"trainmem/cuda"
)

// LoRAUpOp is z = y + s·[u_p·B_pᵀ into columns Parts[p]] for y (N, Out),
// the frozen layer's output, u (N, P·R) the down projections of the P
// adapted projections (x·A_pᵀ, R columns each, stacked) and B (ΣW, R) their
// up projections stacked by rows (B_p is W_p = hi - lo rows); z (N, Out).
// s is the LoRA's scale α/r. Lowered to one Kernels.Cast (z = y) and a
// Kernels.MatMul a projection (Beta 1, into z's columns, LDC Out).
//
// Kept for backward: u (N·P·R elements) for B's gradient and B (a
// parameter) for u's; y's gradient is z's. Differentiable in every input.
type LoRAUpOp struct {
	opBase
	LoRAShape
}

// LoRAShape is what the LoRA family's ops share: N rows, the layer's Out
// outputs, the rank R, the adapted column ranges Parts (one a projection)
// and the scale α/r.
type LoRAShape struct {
	N, Out, R int
	Parts     [][2]int
	Scale     float32
}

// eachPart calls fn for each adapted projection p: its columns [lo, lo+w)
// of the output and its first row in B (row, counted in B's rows), with
// u_p, the p-th R columns of u (N, P·R, a buffer), and the output's columns
// and B_p as views.
func (sh LoRAShape) eachPart(u, y, b *cuda.Buffer, fn func(up, yp, bp *cuda.Buffer, w int) error) error {
	row, P := 0, len(sh.Parts)
	for p, pt := range sh.Parts {
		w := pt[1] - pt[0]
		if err := fn(u.View(p*sh.R, (sh.N-1)*P*sh.R+sh.R), y.View(pt[0], (sh.N-1)*sh.Out+w), b.View(row*sh.R, w*sh.R), w); err != nil {
			return err
		}
		row += w
	}
	return nil
}

// lds are the row strides of u and of the output.
func (sh LoRAShape) lds() (ldu, ldy int) { return len(sh.Parts) * sh.R, sh.Out }

// FLOPs of each of the family's products: 2·N·R·ΣW.
func (sh LoRAShape) FLOPs() float64 {
	return 2 * float64(sh.N) * float64(sh.R) * float64(loraRows(sh.Parts))
}

// loraRows is ΣW, the stacked B's rows.
func loraRows(parts [][2]int) int {
	n := 0
	for _, p := range parts {
		n += p[1] - p[0]
	}
	return n
}

// signature: y (N, Out), u (N, P·R), B (ΣW, R) → (N, Out).
func (op *LoRAUpOp) signature() signature {
	return signature{
		check: func() error { return checkLoRAParts(op, op.Parts, op.Out) },
		args:  []param{arg("y", op.N, op.Out), arg("u", op.N, len(op.Parts)*op.R), arg("B", loraRows(op.Parts), op.R)},
		out:   result(op.N, op.Out),
	}
}

// checkLoRAParts refuses parts outside the output's columns, empty or out
// of order.
func checkLoRAParts(o G.Op, parts [][2]int, out int) error {
	lo := 0
	for _, p := range parts {
		if p[0] < lo || p[1] <= p[0] || p[1] > out {
			return fmt.Errorf("model: %v: adapted columns %v are not in order inside the %d outputs", o, parts, out)
		}
		lo = p[1]
	}
	if len(parts) == 0 {
		return fmt.Errorf("model: %v: no adapted columns", o)
	}
	return nil
}

// loraName is a LoRA op's String: its name and fields.
func loraName(name string, N, out, r int, parts [][2]int, s float32) string {
	ps := make([]string, len(parts))
	for i, p := range parts {
		ps[i] = fmt.Sprintf("%d:%d", p[0], p[1])
	}
	return fmt.Sprintf("%s{N=%d,Out=%d,R=%d,Parts=%s,Scale=%g}", name, N, out, r, strings.Join(ps, ","), s)
}

// String names the op and every field; WriteHash hashes it.
func (op *LoRAUpOp) String() string {
	return loraName("LoRAUp", op.N, op.Out, op.R, op.Parts, op.Scale)
}

// DiffWRT: every input.
func (op *LoRAUpOp) DiffWRT(n int) []bool { return []bool{true, true, true} }

// SymDiff returns dz for y, LoRAUpBackwardU(dz, B) for u and
// LoRAUpBackwardB(dz, u) for B.
func (op *LoRAUpOp) SymDiff(in G.Nodes, out, dz *G.Node) (G.Nodes, error) {
	return op.symDiffSome(in, out, dz, nil)
}

// symDiffSome is SymDiff of the inputs need says (nil: all).
func (op *LoRAUpOp) symDiffSome(in G.Nodes, out, dz *G.Node, need []bool) (G.Nodes, error) {
	if err := diffArgs(op, in); err != nil {
		return nil, err
	}
	d := G.Nodes{dz, nil, nil}
	var err error
	if needs(need, 1) {
		if d[1], err = applyOp(op.sub("u", &LoRAUpBackwardUOp{LoRAShape: op.LoRAShape}), dz, in[2]); err != nil {
			return nil, err
		}
	}
	if needs(need, 2) {
		if d[2], err = applyOp(op.sub("B", &LoRAUpBackwardBOp{LoRAShape: op.LoRAShape}), dz, in[1]); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// Run is z = y (Kernels.Cast), then z[:, lo:hi] += s·u_p·B_pᵀ a projection
// (Kernels.MatMul).
func (op *LoRAUpOp) Run(x Exec, out *cuda.Buffer, a []*cuda.Buffer) error {
	if err := x.K.Cast(out, a[0]); err != nil {
		return err
	}
	ldu, ldz := op.lds()
	return op.eachPart(a[1], out, a[2], func(u, z, b *cuda.Buffer, w int) error {
		return x.K.MatMul(cuda.MatMul{TransB: true, M: op.N, N: w, K: op.R, A: u, LDA: ldu, B: b, C: z, LDC: ldz, Alpha: op.Scale, Beta: 1})
	})
}

// LoRAUpBackwardUOp is u's gradient (N, P·R) of LoRAUpOp from dz (N, Out)
// and B (ΣW, R): du_p = s·dz[:, lo:hi]·B_p. Lowered to a Kernels.MatMul a
// projection.
type LoRAUpBackwardUOp struct {
	opBase
	LoRAShape
}

// signature: dz (N, Out), B (ΣW, R) → (N, P·R).
func (op *LoRAUpBackwardUOp) signature() signature {
	return signature{
		check: func() error { return checkLoRAParts(op, op.Parts, op.Out) },
		args:  []param{arg("dz", op.N, op.Out), arg("B", loraRows(op.Parts), op.R)},
		out:   result(op.N, len(op.Parts)*op.R),
	}
}

// String names the op and every field; WriteHash hashes it.
func (op *LoRAUpBackwardUOp) String() string {
	return loraName("LoRAUpBackwardU", op.N, op.Out, op.R, op.Parts, op.Scale)
}

// Run is du_p = s·dz[:, lo:hi]·B_p (Kernels.MatMul, into du's columns).
func (op *LoRAUpBackwardUOp) Run(x Exec, out *cuda.Buffer, a []*cuda.Buffer) error {
	ldu, ldz := op.lds()
	return op.eachPart(out, a[0], a[1], func(du, dz, b *cuda.Buffer, w int) error {
		return x.K.MatMul(cuda.MatMul{M: op.N, N: op.R, K: w, A: dz, LDA: ldz, B: b, C: du, LDC: ldu, Alpha: op.Scale})
	})
}

// LoRAUpBackwardBOp is B's gradient (ΣW, R) of LoRAUpOp from dz (N, Out)
// and u (N, P·R): dB_p = s·dz[:, lo:hi]ᵀ·u_p. Lowered to a Kernels.MatMul
// a projection (TransA).
type LoRAUpBackwardBOp struct {
	opBase
	LoRAShape
}

// signature: dz (N, Out), u (N, P·R) → (ΣW, R).
func (op *LoRAUpBackwardBOp) signature() signature {
	return signature{
		check: func() error { return checkLoRAParts(op, op.Parts, op.Out) },
		args:  []param{arg("dz", op.N, op.Out), arg("u", op.N, len(op.Parts)*op.R)},
		out:   result(loraRows(op.Parts), op.R),
	}
}

// String names the op and every field; WriteHash hashes it.
func (op *LoRAUpBackwardBOp) String() string {
	return loraName("LoRAUpBackwardB", op.N, op.Out, op.R, op.Parts, op.Scale)
}

// Run is dB_p = s·dz[:, lo:hi]ᵀ·u_p (Kernels.MatMul, TransA, into dB's
// rows); dB += with Exec.Accumulate.
func (op *LoRAUpBackwardBOp) Run(x Exec, out *cuda.Buffer, a []*cuda.Buffer) error {
	beta := float32(0)
	if x.Accumulate {
		beta = 1
	}
	ldu, ldz := op.lds()
	return op.eachPart(a[1], a[0], out, func(u, dz, db *cuda.Buffer, w int) error {
		return x.K.MatMul(cuda.MatMul{TransA: true, M: w, N: op.R, K: op.N, A: dz, LDA: ldz, B: u, LDB: ldu, C: db, Alpha: op.Scale, Beta: beta})
	})
}

// Accumulates: Run adds into out with Exec.Accumulate (Accumulator).
func (op *LoRAUpBackwardBOp) Accumulates() bool { return true }
