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

	// The vocabulary-parallel cross entropy (Megatron-LM's, for a
	// tensor-parallel rank's part of the logits, model/tensor.go), in
	// three steps between which the ranks reduce the row statistics:
	// stats is F32 (or F64) of 3N elements, the rows' maxima, their sums of
	// exponentials and their targets' logits, each N long. logits is the
	// rank's (N, V) part, the ids [part.Lo, part.Lo + V) of a vocabulary of
	// part.V; targets are I32 in [0, part.V).
	//
	// CrossEntropyPartMax: stats[i] = max_j logits[i, j] (the ranks then
	// take the largest).
	CrossEntropyPartMax(stats, logits *Buffer, N, V int) error
	// CrossEntropyPartSums: stats[N+i] = Σ_j exp(logits[i, j] - stats[i])
	// (in fp64), stats[2N+i] = logits[i, targets[i] - part.Lo] when the
	// part holds the target, else 0 (the ranks then sum both).
	CrossEntropyPartSums(stats, logits, targets *Buffer, N, V int, part VocabPart) error
	// CrossEntropyPartLoss: loss (1 element) = mean over rows of
	// log stats[N+i] + stats[i] - stats[2N+i], in fp64.
	CrossEntropyPartLoss(loss, stats *Buffer, N int) error
	// CrossEntropyPartBackward: dlogits = (exp(logits - stats[i]) /
	// stats[N+i] - onehot(targets - part.Lo))·dloss[0]/N.
	CrossEntropyPartBackward(dlogits, dloss, logits, targets, stats *Buffer, N, V int, part VocabPart) error
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
	c.logitsGrad(dlogits, dloss, logits, targets, N, V)
	return c.err
}

// logitsGrad checks a cross entropy's backward arguments.
func (c *checker) logitsGrad(dlogits, dloss, logits, targets *Buffer, N, V int) {
	c.positive("N", N, "V", V)
	c.floats("dlogits", dlogits, N*V, "N·V")
	c.f32or64("dloss", dloss)
	c.length("dloss", dloss, 1, "1")
	c.floats("logits", logits, N*V, "N·V")
	c.ids("targets", targets, N, "N")
}

// CrossEntropyStatsLen is the elements of the vocabulary-parallel cross
// entropy's row statistics: a maximum, a sum and a target logit a row.
func CrossEntropyStatsLen(N int) int { return 3 * N }

// partStats checks the vocabulary-parallel cross entropy's statistics.
func (c *checker) partStats(stats *Buffer, N int) {
	c.f32or64("stats", stats)
	c.length("stats", stats, CrossEntropyStatsLen(N), "3N")
}

func (Checks) CrossEntropyPartMax(stats, logits *Buffer, N, V int) error {
	c := check("CrossEntropyPartMax")
	c.positive("N", N, "V", V)
	c.partStats(stats, N)
	c.floats("logits", logits, N*V, "N·V")
	c.disjoint("stats", stats, "logits", logits)
	return c.err
}

func (Checks) CrossEntropyPartSums(stats, logits, targets *Buffer, N, V int, part VocabPart) error {
	c := check("CrossEntropyPartSums")
	c.positive("N", N, "V", V)
	c.partStats(stats, N)
	c.floats("logits", logits, N*V, "N·V")
	c.ids("targets", targets, N, "N")
	c.disjoint("stats", stats, "logits", logits)
	if c.err == nil {
		c.vocabPart(part, V)
	}
	return c.err
}

func (Checks) CrossEntropyPartLoss(loss, stats *Buffer, N int) error {
	c := check("CrossEntropyPartLoss")
	c.positive("N", N)
	c.f32or64("loss", loss)
	c.length("loss", loss, 1, "1")
	c.partStats(stats, N)
	return c.err
}

func (Checks) CrossEntropyPartBackward(dlogits, dloss, logits, targets, stats *Buffer, N, V int, part VocabPart) error {
	c := check("CrossEntropyPartBackward")
	c.logitsGrad(dlogits, dloss, logits, targets, N, V)
	c.partStats(stats, N)
	c.disjoint("dlogits", dlogits, "stats", stats)
	if c.err == nil {
		c.vocabPart(part, V)
	}
	return c.err
}
