package cuda

// The SwiGLU family of the device contract: its kernels (the Kernels
// interface embeds them), their argument checks (Checks) and what a caller
// must know of them (cuda/host/swiglu.go and cuda/gpu/swiglu.go implement
// it).
//
// SwiGLU (Shazeer 2020, "GLU Variants Improve Transformer", as LLaMA's MLP
// uses it) gates one linear projection of a row by the SiLU of another:
// y = silu(g)·u, silu(g) = g·σ(g). Both projections come from one linear
// layer of 2F outputs, each row [g (F) | u (F)], so that a column-parallel
// split gives every rank its own channels of both.

// SwiGLUKernels are the SwiGLU family: the gated activation and its
// gradient.
type SwiGLUKernels interface {
	// SwiGLU: y[i, j] = silu(x[i, j])·x[i, F+j] for x (N, 2F), y (N, F),
	// in float64, rounded once.
	SwiGLU(y, x *Buffer, N, F int) error
	// SwiGLUBackward: for dy (N, F) and x (N, 2F), dx (N, 2F) with
	// dx[i, j] = dy·u·σ(g)·(1 + g·(1 - σ(g))) (the gate's) and
	// dx[i, F+j] = dy·silu(g) (the projection's), g = x[i, j],
	// u = x[i, F+j].
	SwiGLUBackward(dx, dy, x *Buffer, N, F int) error
}

func (Checks) SwiGLU(y, x *Buffer, N, F int) error {
	c := check("SwiGLU")
	c.positive("N", N, "F", F)
	c.floats("y", y, N*F, "N·F")
	c.floats("x", x, 2*N*F, "2·N·F")
	c.disjoint("y", y, "x", x)
	return c.err
}

func (Checks) SwiGLUBackward(dx, dy, x *Buffer, N, F int) error {
	c := check("SwiGLUBackward")
	c.positive("N", N, "F", F)
	c.floats("dx", dx, 2*N*F, "2·N·F")
	c.floats("dy", dy, N*F, "N·F")
	c.floats("x", x, 2*N*F, "2·N·F")
	c.disjoint("dx", dx, "dy", dy)
	c.disjoint("dx", dx, "x", x)
	return c.err
}
