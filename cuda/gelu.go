package cuda

// The GELU family of the device contract: its kernels (the Kernels
// interface embeds them), their argument checks (Checks) and what a caller
// must know of them (cuda/host/gelu.go and cuda/gpu/gelu.go implement it).

// GELUKernels are the GELU family.
type GELUKernels interface {
	// GELU: y = 0.5·x·(1 + tanh(sqrt(2/π)·(x + 0.044715·x³))) elementwise.
	GELU(y, x *Buffer) error
	// GELUBackward: dx = dy·GELU'(x).
	GELUBackward(dx, dy, x *Buffer) error
}

func (Checks) GELU(y, x *Buffer) error { return checkElementwise("GELU", "y", y, "x", x) }

func (Checks) GELUBackward(dx, dy, x *Buffer) error {
	return checkElementwise("GELUBackward", "dx", dx, "dy", dy, "x", x)
}
