package model

// Tensor parallelism as Megatron-LM splits a GPT-2 (Shoeybi et al. 2019,
// Section 3): within a block, the QKV projection and the first MLP matrix
// are column-parallel (each rank computes its heads' q, k, v, with
// grouped-query attention its query heads and its share of the key and
// value heads, so the KV heads must divide too, and its part of
// the MLP's channels from the whole input), the attention output projection
// and the second MLP matrix row-parallel (each rank multiplies its part of
// the input by its rows of the weight's input dimension and the ranks' sums
// are all-reduced before the bias is added); the token embedding and the
// head are split over the vocabulary (each rank a run of its rows), the
// embedding's lookups summed over the ranks and the cross entropy's row
// statistics reduced so that no rank holds the whole logits (Megatron-LM's
// vocabulary-parallel embedding and cross entropy). The input of a column-parallel
// layer is the same on every rank, so its gradient is the ranks' sum (an
// all-reduce in backward, Megatron's f); the output of a row-parallel layer
// is that sum (an all-reduce in forward, Megatron's g), whose gradient every
// rank already has whole. Layer norms, the residual stream and the
// position embedding are whole on every rank, so their gradients are the
// same on every rank and every rank updates its copy alike.
//
// A rank's part of the model is a Config with Tensor set (Config.TensorRank):
// its parameter table holds the rank's parts of the split rows, each saying
// with Split where it sits in the whole tensor, and Build makes the rank's
// graph, whose parallel linear ops reduce over the Exec's TensorGroup.

import (
	"errors"
	"fmt"

	"trainmem/cuda"
	"trainmem/cuda/enum"
)

// TensorRank is one rank of a tensor-parallel split: Size ranks, this one
// Rank. The zero value is the whole model (no split). Sequence adds
// sequence parallelism (Korthikanti et al. 2022, Section 4.2.2): the
// layer norms, the residual stream and the regions between them hold
// 1/Size of the rows (b·s/t), gathered before each column-parallel layer
// and reduce-scattered after each row-parallel one.
type TensorRank struct {
	Size, Rank int
	Sequence   bool
}

// seq is the ranks the rows of the sequence-parallel regions are split
// over: Size with sequence parallelism, else 1.
func (t TensorRank) seq() int {
	if t.Sequence && t.Size > 1 {
		return t.Size
	}
	return 1
}

// size is the ranks the model is split over, 1 for the whole model.
func (t TensorRank) size() int { return max(t.Size, 1) }

// check refuses a split that does not divide the heads or leaves a rank
// no row of the vocabulary.
func (t TensorRank) check(heads, kv, vocab int) error {
	switch {
	case t == TensorRank{}:
		return nil
	case t.Size < 2 && t.Sequence:
		return errors.New("model: sequence parallelism splits a tensor-parallel rank's rows: it needs at least 2 tensor-parallel ranks")
	case t.Size < 2 || t.Size > heads:
		return fmt.Errorf("model: a tensor-parallel split over %d ranks (valid: 2 to the heads, %d; the whole model is the zero TensorRank)", t.Size, heads)
	case heads%t.Size != 0:
		return fmt.Errorf("model: %d tensor-parallel ranks do not divide the %d heads (valid: a divisor of the heads)", t.Size, heads)
	case kv%t.Size != 0:
		return fmt.Errorf("model: %d tensor-parallel ranks do not divide the %d key and value heads (valid: a divisor of them, %s)", t.Size, kv, divisors(kv))
	case t.Size > vocab:
		return fmt.Errorf("model: %d tensor-parallel ranks split a vocabulary of %d (valid: at most one rank a row)", t.Size, vocab)
	case t.Rank < 0 || t.Rank >= t.Size:
		return fmt.Errorf("model: tensor-parallel rank %d of %d (valid: 0 to %d)", t.Rank, t.Size, t.Size-1)
	}
	return nil
}

// VocabRows is the rank's rows [lo, lo+n) of a vocabulary of V: V/t each,
// the first V mod t ranks one more (the vocabulary is not padded to a
// multiple of the ranks, as Megatron-LM pads it: trainmem's counts are the
// model's own). The whole model's are all V.
func (t TensorRank) VocabRows(V int) (lo, n int) {
	s := t.size()
	q, r := V/s, V%s
	lo, n = t.Rank*q+min(t.Rank, r), q
	if t.Rank < r {
		n++
	}
	return lo, n
}

// vocab is the rank's split of a table of the vocabulary.
func (t TensorRank) vocab(V int) TensorSplit {
	if t.size() == 1 {
		return TensorSplit{}
	}
	lo, n := t.VocabRows(V)
	return TensorSplit{Axis: 0, Ranges: [][2]int{{lo, lo + n}}}
}

// TensorRank is rank r's part of c split over size tensor-parallel ranks;
// one rank is the whole model.
func (c Config) TensorRank(size, r int) (Config, error) {
	if c.Tensor != (TensorRank{}) {
		return Config{}, fmt.Errorf("model: %s is already tensor-parallel rank %d of %d", c.Name, c.Tensor.Rank, c.Tensor.Size)
	}
	if size < 1 {
		return Config{}, fmt.Errorf("model: a tensor-parallel split over %d ranks (valid: 1 to the heads, %d)", size, c.Heads)
	}
	if size == 1 && r == 0 {
		return c, nil
	}
	c.Tensor = TensorRank{Size: size, Rank: r}
	if err := c.Tensor.check(c.Heads, c.KV(), c.Vocab); err != nil {
		return Config{}, err
	}
	return c, nil
}

// Whole is the whole model c is a tensor-parallel part or a pipeline
// stage of (c itself when it is whole).
func (c Config) Whole() Config {
	c.Tensor = TensorRank{}
	if c.Stage.Size > 1 {
		c.Layers = c.Stage.Blocks
	}
	c.Stage = PipelineStage{}
	return c
}

// TensorSplit is where a tensor-parallel rank's parameter sits in the whole
// model's tensor of the same name: the rank's tensor is the whole one's
// Ranges [start, end) of Axis (0 the rows, 1 the columns of a matrix)
// concatenated in order. No ranges is the whole tensor.
type TensorSplit struct {
	Axis   int
	Ranges [][2]int
}

// part is the rank's one contiguous share of n along axis.
func (t TensorRank) part(axis, n int) TensorSplit {
	if t.size() == 1 {
		return TensorSplit{}
	}
	k := n / t.Size
	return TensorSplit{Axis: axis, Ranges: [][2]int{{t.Rank * k, (t.Rank + 1) * k}}}
}

// parts is the rank's share of each of the parts of ns elements stacked
// along axis (q, k and v; SwiGLU's gate and up): its contiguous share of
// every part, in order.
func (t TensorRank) parts(axis int, ns ...int) TensorSplit {
	if t.size() == 1 {
		return TensorSplit{}
	}
	s := TensorSplit{Axis: axis}
	at := 0 // the part's first element in the stack
	for _, n := range ns {
		one := t.part(axis, n).Ranges[0]
		s.Ranges = append(s.Ranges, [2]int{at + one[0], at + one[1]})
		at += n
	}
	return s
}

// copyRow calls move(whole, part, n) for every contiguous run of n elements
// of the whole row w's tensor that the part p holds, the offsets in
// elements from each row's own start.
func copyRow(w, p Param, move func(whole, part, n int64)) {
	if len(p.Split.Ranges) == 0 {
		move(0, 0, p.Count)
		return
	}
	inner := int64(1) // elements a step of the split axis moves over
	for _, d := range w.Shape[p.Split.Axis+1:] {
		inner *= int64(d)
	}
	outer := w.Count / (inner * int64(w.Shape[p.Split.Axis]))
	axisLen := int64(w.Shape[p.Split.Axis])
	var at int64
	for o := range outer {
		for _, r := range p.Split.Ranges {
			n := int64(r[1]-r[0]) * inner
			move(o*axisLen*inner+int64(r[0])*inner, at, n)
			at += n
		}
	}
}

// TensorGroup is what a tensor-parallel rank's ops need of the ranks it is
// split over: the sum and the largest of a buffer over them, in place, that
// every rank calls in the same order (package zero's Comm is one).
type TensorGroup interface {
	AllReduceSum(b *cuda.Buffer) error
	AllReduceMax(b *cuda.Buffer) error
	// AllGather sets recv to every rank's send in rank order (recv is
	// the ranks times send long).
	AllGather(send, recv *cuda.Buffer) error
	// ReduceScatterSum sets recv to this rank's block of the sum of every
	// rank's send (send is the ranks times recv long).
	ReduceScatterSum(send, recv *cuda.Buffer) error
}

// Parallel says how a linear layer is split over tensor-parallel ranks.
type Parallel uint8

const (
	// NotParallel is a whole layer.
	NotParallel Parallel = iota
	// ColumnParallel splits the output features: the input is whole on
	// every rank, so its gradient is all-reduced.
	ColumnParallel
	// RowParallel splits the input features: the partial products are
	// all-reduced, then the bias (whole on every rank) is added.
	RowParallel
)

var parallelNames = enum.New[Parallel]("model", "Parallel", "parallel split", "whole", "column", "row")

func (p Parallel) String() string { return parallelNames.String(p) }

// gathered runs f on the rows of every rank of the tensor group, gathered
// from this rank's part (in workspace the executor lends, of part's dtype).
func (x Exec) gathered(what fmt.Stringer, part *cuda.Buffer, ranks int, f func(all *cuda.Buffer) error) error {
	if err := x.hasTensor(what); err != nil {
		return err
	}
	return x.ScratchLike(part, ranks*part.Len, func(all *cuda.Buffer) error {
		if err := x.Tensor.AllGather(part, all); err != nil {
			return err
		}
		return f(all)
	})
}

// scattered has f write every rank's rows into workspace of out's dtype
// and sets out to this rank's block of their sum over the tensor group.
func (x Exec) scattered(what fmt.Stringer, out *cuda.Buffer, ranks int, f func(all *cuda.Buffer) error) error {
	if err := x.hasTensor(what); err != nil {
		return err
	}
	return x.ScratchLike(out, ranks*out.Len, func(all *cuda.Buffer) error {
		if err := f(all); err != nil {
			return err
		}
		return x.Tensor.ReduceScatterSum(all, out)
	})
}

// allReduce sums b over the Exec's tensor group; what, the op, is an
// error's subject (named only then: a step formats no op's name).
func (x Exec) allReduce(what fmt.Stringer, b *cuda.Buffer) error {
	if err := x.hasTensor(what); err != nil {
		return err
	}
	return x.Tensor.AllReduceSum(b)
}

// reduced is a kernel's result err, then, for an op whose output is a
// rank's part (reduce), out summed over the tensor group.
func (x Exec) reduced(reduce bool, what fmt.Stringer, out *cuda.Buffer, err error) error {
	if err != nil || !reduce {
		return err
	}
	return x.allReduce(what, out)
}

// reduceTag is an op's String's last field when its output is summed
// over the tensor group (Reduce): ",Reduce", else "".
func reduceTag(reduce bool) string {
	if reduce {
		return ",Reduce"
	}
	return ""
}

// hasTensor refuses a tensor-parallel op (what) on an executor without a
// tensor group.
func (x Exec) hasTensor(what fmt.Stringer) error {
	if x.Tensor == nil {
		return fmt.Errorf("model: %s is tensor-parallel and the executor has no tensor group (train.Options.TensorGroup)", what)
	}
	return nil
}
