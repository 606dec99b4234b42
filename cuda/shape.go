package cuda

import (
	"fmt"
	"time"
)

// Shape is the shape-only device: the caching allocator runs on a virtual
// address space with nothing behind it, kernels check their arguments and
// compute nothing. A training schedule run on Shape makes exactly the
// allocations, in the same order and sizes, as on a computing device, so
// its statistics are the real ones at any model size, in well under a
// second. With a capacity it runs out of memory exactly where a card of
// that size would (as far as the allocator is concerned: a real card also
// holds the CUDA context and library workspaces outside it).
type Shape struct {
	allocDevice
	space *virtualSpace
}

var _ Device = (*Shape)(nil)

// NewShape returns a shape-only device of capacity bytes; 0 means
// unlimited: MaxVirtualSpace, the most any capacity can be.
func NewShape(capacity int64) *Shape {
	vs := newVirtualSpace(capacity)
	s := &Shape{space: vs}
	s.alloc = NewAllocator(s.Name(), vs)
	return s
}

// Name says "shape" and the capacity.
func (s *Shape) Name() string {
	if s.space.capacity == 0 {
		return "shape (unlimited)"
	}
	return fmt.Sprintf("shape (%s)", FormatBytes(s.space.capacity))
}

// Computes is false: Shape keeps books only.
func (s *Shape) Computes() bool { return false }

// MemInfo returns capacity minus reserved bytes and the capacity
// (MaxVirtualSpace when unlimited).
func (s *Shape) MemInfo() (free, total int64, err error) { return s.space.MemInfo() }

// Upload checks its arguments and stores nothing.
func (s *Shape) Upload(dst *Buffer, src any) error { return checkHostValues("Upload", "src", src, dst) }

// Download checks its arguments and leaves dst unchanged.
func (s *Shape) Download(dst any, src *Buffer) error {
	return checkHostValues("Download", "dst", dst, src)
}

type shapeMark struct{}

// Mark returns a mark that carries no time.
func (s *Shape) Mark() (Mark, error) { return shapeMark{}, nil }

// Elapsed is always zero on Shape.
func (s *Shape) Elapsed(from, to Mark) (time.Duration, error) {
	if _, ok := from.(shapeMark); !ok {
		return 0, fmt.Errorf("cuda: Elapsed: from is %T, not a mark of this device", from)
	}
	if _, ok := to.(shapeMark); !ok {
		return 0, fmt.Errorf("cuda: Elapsed: to is %T, not a mark of this device", to)
	}
	return 0, nil
}

// Synchronize has nothing to wait for.
func (s *Shape) Synchronize() error { return nil }

// Close releases every segment; the device takes no further allocations.
func (s *Shape) Close() error {
	return s.alloc.Close()
}

// Kernels: validation only.

// Fill checks its arguments.
func (s *Shape) Fill(dst *Buffer, v float32) error { return checkFill(dst, v) }

// Cast checks its arguments.
func (s *Shape) Cast(dst, src *Buffer) error { return checkCast(dst, src) }

// Add checks its arguments.
func (s *Shape) Add(y, a, b *Buffer) error { return checkAdd(y, a, b) }

// Embedding checks its arguments (token ids cannot be checked without data).
func (s *Shape) Embedding(out, tokens, wte, wpe *Buffer, B, T, C int) error {
	return checkEmbedding(out, tokens, wte, wpe, B, T, C)
}

// EmbeddingBackwardTokens checks its arguments.
func (s *Shape) EmbeddingBackwardTokens(dwte, dout, tokens *Buffer, B, T, C int) error {
	return checkEmbeddingBackwardTokens(dwte, dout, tokens, B, T, C)
}

// EmbeddingBackwardPositions checks its arguments.
func (s *Shape) EmbeddingBackwardPositions(dwpe, dout *Buffer, B, T, C int) error {
	return checkEmbeddingBackwardPositions(dwpe, dout, B, T, C)
}

// LayerNormStats checks its arguments.
func (s *Shape) LayerNormStats(stats, x *Buffer, N, C int, eps float32) error {
	return checkLayerNormStats(stats, x, N, C, eps)
}

// LayerNorm checks its arguments.
func (s *Shape) LayerNorm(y, x, stats, w, b *Buffer, N, C int) error {
	return checkLayerNorm(y, x, stats, w, b, N, C)
}

// LayerNormBackwardX checks its arguments.
func (s *Shape) LayerNormBackwardX(dx, dy, x, stats, w *Buffer, N, C int) error {
	return checkLayerNormBackwardX(dx, dy, x, stats, w, N, C)
}

// LayerNormBackwardW checks its arguments.
func (s *Shape) LayerNormBackwardW(dw, dy, x, stats *Buffer, N, C int) error {
	return checkLayerNormBackwardW(dw, dy, x, stats, N, C)
}

// SumRows checks its arguments.
func (s *Shape) SumRows(dst, src *Buffer, N, C int) error { return checkSumRows(dst, src, N, C) }

// AddBias checks its arguments.
func (s *Shape) AddBias(y, b *Buffer, N, C int) error { return checkAddBias(y, b, N, C) }

// MatMul checks its arguments.
func (s *Shape) MatMul(m MatMul) error {
	_, err := checkMatMul(m)
	return err
}

// GELU checks its arguments.
func (s *Shape) GELU(y, x *Buffer) error { return checkGELU(y, x) }

// GELUBackward checks its arguments.
func (s *Shape) GELUBackward(dx, dy, x *Buffer) error { return checkGELUBackward(dx, dy, x) }

// AttentionProbs checks its arguments.
func (s *Shape) AttentionProbs(p, qkv *Buffer, B, T, C, NH int) error {
	return checkAttentionProbs(p, qkv, B, T, C, NH)
}

// AttentionOut checks its arguments.
func (s *Shape) AttentionOut(y, qkv, p *Buffer, B, T, C, NH int) error {
	return checkAttentionOut(y, qkv, p, B, T, C, NH)
}

// AttentionBackward checks its arguments.
func (s *Shape) AttentionBackward(dqkv, dy, qkv, p, scratch *Buffer, B, T, C, NH int) error {
	return checkAttentionBackward(dqkv, dy, qkv, p, scratch, B, T, C, NH)
}

// CrossEntropy checks its arguments (targets cannot be checked without data).
func (s *Shape) CrossEntropy(loss, logits, targets, scratch *Buffer, N, V int) error {
	return checkCrossEntropy(loss, logits, targets, scratch, N, V)
}

// CrossEntropyBackward checks its arguments.
func (s *Shape) CrossEntropyBackward(dlogits, dloss, logits, targets *Buffer, N, V int) error {
	return checkCrossEntropyBackward(dlogits, dloss, logits, targets, N, V)
}

// Adam checks its arguments.
func (s *Shape) Adam(param, grad, master, m, v *Buffer, a AdamArgs) error {
	return checkAdam(param, grad, master, m, v, a)
}

// SGD checks its arguments.
func (s *Shape) SGD(param, grad, master, mom *Buffer, a SGDArgs) error {
	return checkSGD(param, grad, master, mom, a)
}

// NonFinite checks its argument and reports false: there are no values.
func (s *Shape) NonFinite(x *Buffer) (bool, error) { return false, checkNonFinite(x) }
