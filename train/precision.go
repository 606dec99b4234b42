package train

import (
	"fmt"

	"trainmem/cuda"
)

// Precision is the storage policy of a run. FP16 and BF16 are mixed
// precision: 16-bit weights, gradients and activations, fp32 master weights
// and optimizer moments, fp32 arithmetic inside every kernel. FP64 stores
// everything in float64; it exists for the finite-difference checks.
type Precision uint8

const (
	FP32 Precision = iota
	FP16
	BF16
	FP64
)

// ParsePrecision reads fp32, fp16 or bf16.
func ParsePrecision(s string) (Precision, error) {
	switch s {
	case "fp32":
		return FP32, nil
	case "fp16":
		return FP16, nil
	case "bf16":
		return BF16, nil
	}
	return 0, fmt.Errorf("train: unknown precision %q (valid: fp32, fp16, bf16)", s)
}

func (p Precision) String() string { return [...]string{"fp32", "fp16", "bf16", "fp64"}[p] }

// Mixed reports whether the run keeps fp32 master weights.
func (p Precision) Mixed() bool { return p == FP16 || p == BF16 }

// ParamDType stores the working weights and the gradients.
func (p Precision) ParamDType() cuda.DType {
	return [...]cuda.DType{cuda.F32, cuda.F16, cuda.BF16, cuda.F64}[p]
}

// ActDType stores activations and their gradients.
func (p Precision) ActDType() cuda.DType { return p.ParamDType() }

// StateDType stores master weights and optimizer moments.
func (p Precision) StateDType() cuda.DType {
	if p == FP64 {
		return cuda.F64
	}
	return cuda.F32
}

// StatDType stores layer-norm statistics, the loss and its seed.
func (p Precision) StatDType() cuda.DType { return p.StateDType() }
