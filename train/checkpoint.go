package train

import (
	"gorgonia.org/gorgonia"

	"trainmem/model"
)

// CheckpointPolicy decides which forward values the executor keeps for the
// backward pass and which it drops and recomputes. Only transformer blocks
// are checkpointed; the embeddings and the head always keep their values.
type CheckpointPolicy struct {
	// Every is the segment length in blocks: 0 keeps everything, 1 is full
	// checkpointing (each block's input is kept, everything inside a block
	// is recomputed), K keeps the input of every K-th block.
	Every int
	// Selective drops only the attention probabilities (B·NH·T·T values a
	// block) and recomputes them from qkv, as Korthikanti et al. 2022.
	Selective bool
}

// segment returns the recomputation segment of a forward node, or -1 when
// the policy keeps the node's value.
func (p CheckpointPolicy) segment(gr *model.Graph, n *gorgonia.Node) int {
	switch {
	case p.Selective:
		if isAttentionProbs(n.Op()) {
			return int(n.ID())
		}
		return -1
	case p.Every > 0:
		l := layerOf(gr, n)
		if l < 0 || l >= gr.Config.Layers {
			return -1
		}
		return l / p.Every
	}
	return -1
}
