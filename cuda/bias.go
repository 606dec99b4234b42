package cuda

// The bias family of the device contract: its kernels (the Kernels
// interface embeds them), their argument checks (Checks) and what a caller
// must know of them (cuda/host/bias.go and cuda/gpu/bias.go implement it).

// BiasKernels are the bias family: adding a bias to every row and its
// gradient, the column sums.
type BiasKernels interface {
	// SumRows: dst[c] = Σ_i src[i, c] (bias gradients), src N×C, dst C.
	SumRows(dst, src *Buffer, N, C int) error
	// AddBias: y[i, c] += b[c] in place, y N×C.
	AddBias(y, b *Buffer, N, C int) error
}

func (Checks) SumRows(dst, src *Buffer, N, C int) error {
	c := check("SumRows")
	c.positive("N", N, "C", C)
	c.channels(C, "dst", dst)
	c.rows(N, C, "src", src)
	c.disjoint("dst", dst, "src", src)
	return c.err
}

func (Checks) AddBias(y, b *Buffer, N, C int) error {
	c := check("AddBias")
	c.positive("N", N, "C", C)
	c.rows(N, C, "y", y)
	c.channels(C, "b", b)
	c.disjoint("y", y, "b", b)
	return c.err
}
