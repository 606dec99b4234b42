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
}

// WorkingDType is the storage type of a precision's working weights and
// activations, the type its products are stored as.
func WorkingDType(p model.Precision) cuda.DType { return storageOf(p, false).param }

func storageOf(p model.Precision, float64Mode bool) storage {
	switch {
	case float64Mode:
		return storage{param: cuda.F64, state: cuda.F64}
	case p == model.FP16:
		return storage{mixed: true, param: cuda.F16, state: cuda.F32}
	case p == model.BF16:
		return storage{mixed: true, param: cuda.BF16, state: cuda.F32}
	}
	return storage{param: cuda.F32, state: cuda.F32}
}
