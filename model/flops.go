package model

// The arithmetic of the ops that multiply matrices, for profiles: each
// op's floating-point operations, a multiply-add counting 2, as its kernels
// compute them (attention over the whole T×T score matrix, the causal mask
// applied to it). The other ops are memory-bound: a profile gives their
// bytes moved instead.

// FLOPer is an op that knows its floating-point operations.
type FLOPer interface {
	FLOPs() float64
}

// FLOPs of y = x·Wᵀ: 2·N·In·Out.
func (op *LinearOp) FLOPs() float64 { return 2 * float64(op.N) * float64(op.In) * float64(op.Out) }

// FLOPs of dx = dy·W: 2·N·In·Out.
func (op *LinearBackwardXOp) FLOPs() float64 {
	return 2 * float64(op.N) * float64(op.In) * float64(op.Out)
}

// FLOPs of dW = dyᵀ·x: 2·N·In·Out.
func (op *LinearBackwardWOp) FLOPs() float64 {
	return 2 * float64(op.N) * float64(op.In) * float64(op.Out)
}

// FLOPs of the scores q·kᵀ of every head: 2·B·T·T·C (C = NH·head size).
func (op *AttentionProbsOp) FLOPs() float64 {
	return 2 * float64(op.B) * float64(op.T) * float64(op.T) * float64(op.C)
}

// FLOPs of P·v of every head: 2·B·T·T·C.
func (op *AttentionOutOp) FLOPs() float64 {
	return 2 * float64(op.B) * float64(op.T) * float64(op.T) * float64(op.C)
}

// FLOPs of the attention's backward: dP = dy·vᵀ, dv = Pᵀ·dy, dq = dS·k
// and dk = dSᵀ·q, four products of 2·B·T·T·C.
func (op *AttentionBackwardOp) FLOPs() float64 {
	return 8 * float64(op.B) * float64(op.T) * float64(op.T) * float64(op.C)
}
