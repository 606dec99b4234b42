package model

// How large a setup may be, and the checked arithmetic every size is
// computed with. Byte counts are exact int64 integers; a setup whose sizes
// would not fit is refused with a *SizeError that names the values, never
// computed with a wrapped-around count.

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"strings"
)

// Limits on a shape and a setup: far beyond any real model (GPT-3 has 96
// layers of hidden 12288), and small enough that the counts built from
// them stay well inside int64. The command line's flags, the checkpoint
// reader and Setup.Validate all check these. MaxLayers also keeps the
// training graph's chance of a gorgonia hash merge small (see Build).
const (
	MaxLayers  = 1 << 14
	MaxHidden  = 1 << 20
	MaxVocab   = 1 << 24
	MaxContext = 1 << 24
	MaxBatch   = 1 << 24
	MaxRanks   = 1 << 30
	// MaxMicroBatches bounds a step's micro-batches: every pipeline
	// schedule lists a stage's 2·M actions (16,777,216 of them ran the
	// process out of memory), and 65,536 is far past any bubble worth
	// studying.
	MaxMicroBatches = 1 << 16
)

// MaxTensorElements bounds every tensor of the training graph: 2^59
// elements are 2^62 bytes at 8 bytes an element (the float64 reference
// mode), the whole address space of the shape-only device.
const MaxTensorElements = 1 << 59

// MaxRows bounds batch·seq, the rows every activation has: the kernels
// index positions with 32-bit integers.
const MaxRows = 1<<31 - 1

// ErrOverflow is what every *SizeError is (errors.Is): a setup whose sizes
// do not fit.
var ErrOverflow = errors.New("model: sizes too large")

// Factor is one named value a size is computed from, named as the Setup's
// and Config's fields are (and the command line's flags): layers, hidden,
// heads, vocab, context, batch, seq, params, ranks.
type Factor struct {
	Name  string
	Value int64
}

// SizeError is a setup too large to count: What (a tensor, or the
// estimate), the expression of its size, the values it is computed from,
// and the limit it passes.
type SizeError struct {
	What    string   // "the attention scores"
	Expr    string   // "heads·batch·seq²"; empty for the estimate
	Factors []Factor // the values the size is computed from
	Size    *big.Int // the size, exactly; nil when not computed
	Unit    string   // "elements", "rows", "bytes"
	Limit   int64
}

func (e *SizeError) Error() string {
	var fs []string
	for _, f := range e.Factors {
		fs = append(fs, fmt.Sprintf("%s %d", f.Name, f.Value))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "model: shape too large: %s (", e.What)
	if e.Expr != "" {
		fmt.Fprintf(&b, "%s, ", e.Expr)
	}
	fmt.Fprintf(&b, "with %s)", strings.Join(fs, ", "))
	if e.Size != nil {
		f, _ := new(big.Float).SetInt(e.Size).Float64()
		fmt.Fprintf(&b, " would hold %.4g %s; the limit is %s", f, e.Unit, limitString(e.Limit))
	} else {
		fmt.Fprintf(&b, " passes %s %s", limitString(e.Limit), e.Unit)
	}
	return b.String()
}

// Is makes every SizeError an ErrOverflow.
func (e *SizeError) Is(target error) bool { return target == ErrOverflow }

func limitString(n int64) string {
	switch n {
	case math.MaxInt64:
		return "2^63-1"
	case MaxRows:
		return "2^31-1"
	case MaxTensorElements:
		return "2^59"
	}
	return Comma(n)
}

// checkSizes refuses a shaped setup with a tensor beyond MaxTensorElements
// or more rows than MaxRows. Sizes are computed exactly (math/big), so the
// check itself cannot wrap around.
func (s Setup) checkSizes() error {
	m := s.Model
	L, h, a, V, ctx := big.NewInt(int64(m.Layers)), big.NewInt(int64(m.Hidden)), big.NewInt(int64(m.Heads)), big.NewInt(int64(m.Vocab)), big.NewInt(int64(m.Context))
	b, T := big.NewInt(int64(s.Batch)), big.NewInt(int64(s.Seq))
	mul := func(xs ...*big.Int) *big.Int {
		p := big.NewInt(1)
		for _, x := range xs {
			p.Mul(p, x)
		}
		return p
	}
	k := func(n int64) *big.Int { return big.NewInt(n) }
	f := func(name string, v int) Factor { return Factor{name, int64(v)} }
	// Φ = V·h + ctx·h + L·(12h² + 13h) + 2h (+ V·h untied), Config.NumParams.
	phi := new(big.Int).Add(mul(V, h), mul(ctx, h))
	phi.Add(phi, mul(L, new(big.Int).Add(mul(k(12), h, h), mul(k(13), h))))
	phi.Add(phi, mul(k(2), h))
	if m.Untied {
		phi.Add(phi, mul(V, h))
	}
	for _, t := range []struct {
		what, expr string
		factors    []Factor
		size       *big.Int
		unit       string
		limit      int64
	}{
		{"the rows of a batch", "batch·seq", []Factor{f("batch", s.Batch), f("seq", s.Seq)}, mul(b, T), "rows", MaxRows},
		{"the parameters", "Φ = vocab·hidden + context·hidden + layers·(12·hidden² + 13·hidden) + 2·hidden", []Factor{f("layers", m.Layers), f("hidden", m.Hidden), f("vocab", m.Vocab), f("context", m.Context)}, phi, "elements", MaxTensorElements},
		{"the token embedding", "vocab·hidden", []Factor{f("vocab", m.Vocab), f("hidden", m.Hidden)}, mul(V, h), "elements", MaxTensorElements},
		{"the position embedding", "context·hidden", []Factor{f("context", m.Context), f("hidden", m.Hidden)}, mul(ctx, h), "elements", MaxTensorElements},
		{"an MLP weight", "4·hidden²", []Factor{f("hidden", m.Hidden)}, mul(k(4), h, h), "elements", MaxTensorElements},
		{"the attention scores", "heads·batch·seq²", []Factor{f("heads", m.Heads), f("batch", s.Batch), f("seq", s.Seq)}, mul(a, b, T, T), "elements", MaxTensorElements},
		{"the logits", "batch·seq·vocab", []Factor{f("batch", s.Batch), f("seq", s.Seq), f("vocab", m.Vocab)}, mul(b, T, V), "elements", MaxTensorElements},
		{"an MLP activation", "4·batch·seq·hidden", []Factor{f("batch", s.Batch), f("seq", s.Seq), f("hidden", m.Hidden)}, mul(k(4), b, T, h), "elements", MaxTensorElements},
	} {
		if t.size.Cmp(big.NewInt(t.limit)) > 0 {
			return &SizeError{What: t.what, Expr: t.expr, Factors: t.factors, Size: t.size, Unit: t.unit, Limit: t.limit}
		}
	}
	return nil
}

// overflowError is the error of an estimate whose byte counts pass int64:
// it names every value of the setup the counts are computed from.
func (s Setup) overflowError() error {
	var fs []Factor
	if s.ParamsOnly() {
		fs = append(fs, Factor{"params", s.Params})
	} else {
		m := s.Model
		fs = append(fs, Factor{"layers", int64(m.Layers)}, Factor{"hidden", int64(m.Hidden)}, Factor{"heads", int64(m.Heads)},
			Factor{"vocab", int64(m.Vocab)}, Factor{"context", int64(m.Context)}, Factor{"batch", int64(s.Batch)}, Factor{"seq", int64(s.Seq)})
	}
	fs = append(fs, Factor{"ranks", int64(s.Ranks)})
	return &SizeError{What: "the estimate", Factors: fs, Unit: "bytes", Limit: math.MaxInt64}
}

// ceilDiv is ceil(a/b) for a ≥ 0, b ≥ 1, without overflow near 2^63.
func ceilDiv(a, b int64) int64 {
	if a == 0 {
		return 0
	}
	return (a-1)/b + 1
}

// calc multiplies and adds non-negative int64s and remembers an overflow,
// so that a formula reads as the formula and still never wraps around.
type calc struct{ overflow bool }

func (c *calc) mul(xs ...int64) int64 {
	p := int64(1)
	for _, x := range xs {
		if x != 0 && p > math.MaxInt64/x {
			c.overflow = true
			return 0
		}
		p *= x
	}
	return p
}

func (c *calc) add(xs ...int64) int64 {
	var s int64
	for _, x := range xs {
		if s > math.MaxInt64-x {
			c.overflow = true
			return 0
		}
		s += x
	}
	return s
}

func (c *calc) err() error {
	if c.overflow {
		return ErrOverflow
	}
	return nil
}
