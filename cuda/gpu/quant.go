//go:build trainmem_cuda

package gpu

import "trainmem/cuda"

// The CUDA device's kernels: the quantization family (NF4 and blockwise
// 8-bit, each way).

// The family's kernels (kernels/quant.cuh) and their parameter kinds.
func init() {
	kernelFamily(map[string]string{
		"quantize_nf4":         "pipipii",
		"dequantize_nf4":       "pipipii",
		"blockwise_mean":       "pipii",
		"quantize_blockwise":   "pipipiipiii",
		"dequantize_blockwise": "pipipipiiii",
	}, "blockwise_mean", "quantize_blockwise", "dequantize_blockwise")
}

// QuantizeNF4 quantizes x blockwise to NF4 (cuda/host/quant.go's kernel).
func (d *Device) QuantizeNF4(codes, absmax, x *cuda.Buffer) error {
	if err := d.begin("QuantizeNF4", cuda.Check.QuantizeNF4(codes, absmax, x), codes, absmax, x); err != nil {
		return err
	}
	defer d.leave()
	if x.Len == 0 {
		return nil
	}
	return d.run(quantizeNF4Call(codes, absmax, x))
}

// DequantizeNF4 is y = NF4Values[code]·absmax.
func (d *Device) DequantizeNF4(y, codes, absmax *cuda.Buffer) error {
	if err := d.begin("DequantizeNF4", cuda.Check.DequantizeNF4(y, codes, absmax), y, codes, absmax); err != nil {
		return err
	}
	defer d.leave()
	if y.Len == 0 {
		return nil
	}
	return d.run(dequantizeNF4Call(y, codes, absmax))
}

// QuantizeBlockwise quantizes x (less its mean, with offset) blockwise to
// the 8-bit codes of m: the mean first, by a kernel of its own.
func (d *Device) QuantizeBlockwise(codes, absmax, offset, x *cuda.Buffer, m cuda.CodeMap) error {
	if err := d.begin("QuantizeBlockwise", cuda.Check.QuantizeBlockwise(codes, absmax, offset, x, m), codes, absmax, offset, x); err != nil {
		return err
	}
	defer d.leave()
	if offset != nil {
		if err := d.run(blockwiseMeanCall(offset, x)); err != nil {
			return err
		}
	}
	if x.Len == 0 {
		return nil
	}
	return d.run(quantizeBlockwiseCall(codes, absmax, offset, x, m))
}

// DequantizeBlockwise is y = m[code]·absmax (+ offset).
func (d *Device) DequantizeBlockwise(y, codes, absmax, offset *cuda.Buffer, m cuda.CodeMap) error {
	if err := d.begin("DequantizeBlockwise", cuda.Check.DequantizeBlockwise(y, codes, absmax, offset, m), y, codes, absmax, offset); err != nil {
		return err
	}
	defer d.leave()
	if y.Len == 0 {
		return nil
	}
	return d.run(dequantizeBlockwiseCall(y, codes, absmax, offset, m))
}

// quantBlock is the threads a block of the quantization kernels, each
// thread quantizing one block of values.
const quantBlock = 128

func quantizeNF4Call(codes, absmax, x *cuda.Buffer) *kcall {
	return newCall("quantize_nf4", x.DType == cuda.F64, gridStride(int64(cuda.Blocks(x.Len, cuda.NF4Block)), quantBlock)).
		buf(codes).buf(absmax).buf(x).int(int64(x.Len))
}

func dequantizeNF4Call(y, codes, absmax *cuda.Buffer) *kcall {
	return newCall("dequantize_nf4", y.DType == cuda.F64, gridStride(int64(y.Len), elemBlock)).
		buf(y).buf(codes).buf(absmax).int(int64(y.Len))
}

// blockwiseMeanCall is one block of 1024 threads (block_sum's limit).
func blockwiseMeanCall(offset, x *cuda.Buffer) *kcall {
	return plain("blockwise_mean", launch{grid: [3]int{1, 1, 1}, block: [3]int{1024, 1, 1}}).buf(offset).buf(x).int(int64(x.Len))
}

func quantizeBlockwiseCall(codes, absmax, offset, x *cuda.Buffer, m cuda.CodeMap) *kcall {
	c := plain("quantize_blockwise", gridStride(int64(cuda.Blocks(x.Len, cuda.Block8)), quantBlock)).buf(codes).buf(absmax)
	return c.buf(offset).flag(offset != nil).buf(x).int(int64(x.Len)).int(int64(m))
}

func dequantizeBlockwiseCall(y, codes, absmax, offset *cuda.Buffer, m cuda.CodeMap) *kcall {
	return plain("dequantize_blockwise", gridStride(int64(y.Len), elemBlock)).buf(y).buf(codes).buf(absmax).
		buf(offset).flag(offset != nil).int(int64(y.Len)).int(int64(m))
}
