package train

import (
	"trainmem/cuda"
	"trainmem/model"
)

// storage is where a run's precision puts each kind of value. Mixed
// precision (fp16, bf16) stores weights, gradients and activations in 16
// bits and keeps fp32 master weights and optimizer moments; kernels compute
// in fp32 inside. The float64 reference mode stores everything in float64,
// for the finite-difference checks.
type storage struct {
	mixed bool
	param cuda.DType // working weights, gradients, activations and their gradients
	state cuda.DType // master weights, optimizer moments, layer-norm statistics, the loss
	// grad is the kept gradients' buffer: param's type, or fp32 with fp32
	// main gradients (model.GradsFP32), which the backward kernels' param-typed
	// gradients are added into.
	grad cuda.DType
}

// WorkingDType is the storage type of a precision's working weights and
// activations, the type its products are stored as.
func WorkingDType(p model.Precision) cuda.DType {
	return storageOf(p, model.GradsLikeWeights, false).param
}

func storageOf(p model.Precision, g model.MainGrads, float64Mode bool) storage {
	var st storage
	switch {
	case float64Mode:
		st = storage{param: cuda.F64, state: cuda.F64}
	case p == model.FP16:
		st = storage{mixed: true, param: cuda.F16, state: cuda.F32}
	case p == model.BF16:
		st = storage{mixed: true, param: cuda.BF16, state: cuda.F32}
	default:
		st = storage{param: cuda.F32, state: cuda.F32}
	}
	st.grad = st.param
	if g == model.GradsFP32 && st.mixed {
		st.grad = cuda.F32
	}
	return st
}

// separateGrads reports whether the kept gradients are of another type
// than the backward kernels write: each writes a temporary then, added
// into (or, on the step's first micro-batch, cast into) the kept buffer.
func (st storage) separateGrads() bool { return st.grad != st.param }
