package cuda

// The cross-entropy family of the device contract: its kernels (the Kernels
// interface embeds them), their argument checks (Checks) and what a caller
// must know of them (cuda/host/crossentropy.go and cuda/gpu/crossentropy.go implement it).

// CrossEntropyKernels are the cross-entropy family: the mean loss and the
// gradient of the logits.
type CrossEntropyKernels interface {
	// CrossEntropy: loss (F32 or F64, 1 element) = mean over N rows of
	// -log softmax(logits[i, :])[targets[i]]; targets I32 in [0, V).
	// scratch is F32 (or F64) with at least CrossEntropyScratchLen(N)
	// elements.
	CrossEntropy(loss, logits, targets, scratch *Buffer, N, V int) error
	// CrossEntropyBackward: dlogits = (softmax(logits) - onehot(targets))·dloss[0]/N,
	// dloss an F32 (or F64) buffer of one element.
	CrossEntropyBackward(dlogits, dloss, logits, targets *Buffer, N, V int) error
}

// CrossEntropyScratchLen is the F32 scratch, in elements, that CrossEntropy
// needs: one loss per row.
func CrossEntropyScratchLen(N int) int { return N }

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
