package train

import (
	"gorgonia.org/gorgonia"

	"trainmem/model"
)

// segment returns the recomputation segment of a forward node under a
// checkpoint policy, or -1 when the policy keeps the node's value. Only
// transformer blocks are checkpointed; the embeddings and the head always
// keep their values. Block-wise policies (full, every:K, sqrt) put K blocks
// in a segment: the values a later segment reads (the residual stream at the
// segment's end) are kept, the rest of the segment's values are dropped and
// recomputed together. Selective checkpointing drops only the attention
// probabilities (B·NH·T·T values a block) and recomputes them from qkv, as
// Korthikanti et al. 2022.
func segment(pol model.Checkpoint, gr *model.Graph, n *gorgonia.Node) int {
	if pol.Kind == model.CheckpointSelective {
		if model.IsDroppedBySelective(n.Op()) {
			return int(n.ID())
		}
		return -1
	}
	// The segments are of the blocks the backward pass reaches: dead
	// blocks (frozen, nothing trained below) are never recomputed.
	dead := gr.Config.DeadBlocks()
	k := pol.Segment(gr.Config.Layers - dead)
	l := layerOf(gr, n) - dead
	if k <= 0 || l < 0 || l >= gr.Config.Layers-dead {
		return -1
	}
	return l / k
}
