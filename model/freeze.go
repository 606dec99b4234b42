package model

import (
	"fmt"
	"strconv"
	"strings"
)

// Freeze is what a fine-tune leaves as it is (Config.Freeze; --freeze):
// its weights are read by the forward pass and never written, so they have
// no gradient, no master copy and no optimizer state, and are stored under
// their own category (cuda.Frozen). The zero value freezes nothing.
//
// The frozen parts are the ones partial fine-tunes freeze: the embeddings
// (wte and wpe; with a tied head wte is the head too), a prefix of the
// blocks (the blocks nearest the input, with the embeddings below them:
// nothing below a frozen block is trained, so the backward pass stops at
// the first trained block, as autograd stops where no input requires a
// gradient), and the head (the final norm and an untied lm_head).
type Freeze struct {
	Embeddings bool
	// Blocks is how many blocks from the bottom are frozen (blocks 0 to
	// Blocks-1 of the whole model); it needs Embeddings.
	Blocks int
	Head   bool
}

// Any reports whether f freezes anything.
func (f Freeze) Any() bool { return f.Embeddings || f.Blocks > 0 || f.Head }

// FreezeParts is what --freeze takes, comma-separated.
const FreezeParts = "embeddings, layers:N (the embeddings and blocks 0 to N-1), head (the final norm and an untied lm_head)"

// ParseFreeze reads a --freeze value: parts separated by commas, each
// embeddings, layers:N or head; "" and "none" freeze nothing.
func ParseFreeze(s string) (Freeze, error) {
	var f Freeze
	if s == "" || s == "none" {
		return f, nil
	}
	seen := map[string]bool{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		name, arg, hasArg := strings.Cut(part, ":")
		if seen[name] {
			return Freeze{}, fmt.Errorf("model: freeze %q names %s twice (valid: each of %s at most once)", s, name, FreezeParts)
		}
		seen[name] = true
		switch {
		case name == "embeddings" && !hasArg:
			f.Embeddings = true
		case name == "head" && !hasArg:
			f.Head = true
		case name == "layers" && hasArg:
			n, err := strconv.Atoi(arg)
			if err != nil || n < 1 {
				return Freeze{}, fmt.Errorf("model: freeze %q: layers:%s is not a positive count of blocks (valid: layers:N, N from 1 to the model's layers)", s, arg)
			}
			f.Blocks, f.Embeddings = n, true
		default:
			return Freeze{}, fmt.Errorf("model: freeze %q: unknown part %q (valid: %s, or none)", s, part, FreezeParts)
		}
	}
	return f, nil
}

// String is f as --freeze takes it: "embeddings", "layers:4,head", "none".
func (f Freeze) String() string {
	var parts []string
	switch {
	case f.Blocks > 0:
		parts = append(parts, fmt.Sprintf("layers:%d", f.Blocks))
	case f.Embeddings:
		parts = append(parts, "embeddings")
	}
	if f.Head {
		parts = append(parts, "head")
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ",")
}

// check refuses a freeze the model cannot take: more blocks than it has,
// blocks without the embeddings below them, or everything.
func (f Freeze) check(c Config) error {
	whole := c.Whole().Layers
	switch {
	case f.Blocks < 0 || f.Blocks > whole:
		return fmt.Errorf("model: freeze layers:%d of a model of %d blocks (valid: layers:1 to layers:%d)", f.Blocks, whole, whole)
	case f.Blocks > 0 && !f.Embeddings:
		return fmt.Errorf("model: freezing %d blocks and not the embeddings below them (valid: layers:N, which freezes both)", f.Blocks)
	case f.Blocks == whole && f.Head:
		return fmt.Errorf("model: freeze %s leaves nothing to train (valid: fewer than the %d blocks with head, or layers:%d alone)", f, whole, whole)
	}
	return nil
}

// frozen reports whether f freezes a parameter-table row: of block layer
// (the whole model's numbering), or, for layer -1, the embeddings (embed)
// or the head.
func (f Freeze) frozen(layer int, embed bool) bool {
	switch {
	case layer >= 0:
		return layer < f.Blocks
	case embed:
		return f.Embeddings
	}
	return f.Head
}

// NumTrained is the parameters a fine-tune trains: those of the table's
// rows that are not frozen (NumParams when nothing is).
func (c Config) NumTrained() int64 {
	if !c.fineTune() {
		return c.NumParams()
	}
	var n int64
	for _, p := range c.Params() {
		if !p.Frozen {
			n += p.Count
		}
	}
	return n
}

// NumFrozen is the parameters a fine-tune leaves as they are.
func (c Config) NumFrozen() int64 { return c.NumParams() - c.NumTrained() }

// DeadBlocks is how many of c's blocks the backward pass never reaches:
// the frozen blocks with nothing trained below them (all of them, since
// the embeddings below are frozen too). Their forward values are read by
// the forward pass only, so none is kept for backward, and checkpointing
// segments the blocks above them.
func (c Config) DeadBlocks() int {
	return min(max(c.Freeze.Blocks-c.Stage.Lo, 0), c.Layers)
}

// Trained splits a flat buffer of the whole table (Param.Offset order)
// into its trained rows' and its frozen rows' buffers (Param.Store order).
func Trained[T any](c Config, whole []T) (trained, frozen []T) {
	if !c.fineTune() {
		return whole, nil
	}
	ps := c.Params()
	var nf int64
	for _, p := range ps {
		if p.Frozen {
			nf += p.Count
		}
	}
	frozen = make([]T, nf)
	for _, p := range ps {
		src := whole[p.Offset : p.Offset+p.Count]
		if p.Frozen {
			copy(frozen[p.Store:p.Store+p.Count], src)
		} else {
			trained = append(trained, src...)
		}
	}
	return trained, frozen
}

// Whole joins the trained and frozen rows' buffers into one of the whole
// table (the inverse of Trained).
func Whole[T any](c Config, trained, frozen []T) []T {
	if !c.fineTune() {
		return trained
	}
	out := make([]T, c.NumParams())
	for _, p := range c.Params() {
		src := trained
		if p.Frozen {
			src = frozen
		}
		copy(out[p.Offset:p.Offset+p.Count], src[p.Store:p.Store+p.Count])
	}
	return out
}
