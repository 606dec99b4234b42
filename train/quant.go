package train

import (
	"fmt"

	"trainmem/cuda"
	"trainmem/model"
)

// The quantized frozen weights (model.Config.Quantize): their NF4 codes in
// one buffer (cuda.Frozen) and their quantization state in three
// (cuda.QuantState: the 8-bit codes of the block scales, those scales'
// fp32 scales, one fp32 offset a weight), each row a weight of its own as
// bitsandbytes quantizes each linear layer. An instruction that reads a
// quantized row gets it dequantized into a temporary of the working type,
// freed after the instruction: every use dequantizes, the forward pass's,
// the recomputation's and the backward pass's, as bitsandbytes'
// MatMul4Bit does in its forward and backward.

// quantStore is the quantized rows' buffers and where each row lies in
// them.
type quantStore struct {
	codes, scales, scales2, offsets *cuda.Buffer
	rows                            map[int][]quantUnit // by parameter-table row
	// live are the slots the running instruction reads dequantized,
	// freed after it.
	live []int
}

// quantUnit is one weight matrix of a quantized row (model.QuantUnits),
// quantized on its own: its values (n, from the row's element at) and its
// place in each buffer.
type quantUnit struct {
	at, n, codes, scales, scales2, offset int
	sizes                                 model.QuantSizes
}

// newQuantStore allocates the quantized rows of table (of model c) on
// dev.
func newQuantStore(dev cuda.Device, c model.Config, table []model.Param) (*quantStore, error) {
	q := &quantStore{rows: map[int][]quantUnit{}}
	var next quantUnit
	for i, p := range table {
		if !p.Quantized {
			continue
		}
		at := 0
		for _, n := range c.QuantUnits(p) {
			sz := model.NF4Sizes(n)
			u := next
			u.at, u.n, u.sizes = at, int(n), sz
			q.rows[i] = append(q.rows[i], u)
			at += int(n)
			next.codes += int(sz.Codes)
			next.scales += int(sz.Scales)
			next.scales2 += int(sz.Scales2)
			next.offset++
		}
	}
	var a stateAlloc
	q.codes = a.alloc(dev, cuda.Frozen, cuda.U8, next.codes)
	q.scales = a.alloc(dev, cuda.QuantState, cuda.U8, next.scales)
	q.scales2 = a.alloc(dev, cuda.QuantState, cuda.F32, next.scales2)
	q.offsets = a.alloc(dev, cuda.QuantState, cuda.F32, next.offset)
	if a.err != nil {
		q.free(dev)
		return nil, a.err
	}
	return q, nil
}

// free gives the buffers back.
func (q *quantStore) free(dev cuda.Device) {
	for _, b := range []*cuda.Buffer{q.codes, q.scales, q.scales2, q.offsets} {
		if b != nil {
			dev.Free(b)
		}
	}
	q.codes, q.scales, q.scales2, q.offsets = nil, nil, nil, nil
}

// views are unit u's parts of the buffers.
func (q *quantStore) views(u quantUnit) (codes, scales, scales2, offset *cuda.Buffer) {
	return q.codes.View(u.codes, int(u.sizes.Codes)), q.scales.View(u.scales, int(u.sizes.Scales)),
		q.scales2.View(u.scales2, int(u.sizes.Scales2)), q.offsets.View(u.offset, 1)
}

// quantize stores row's weights, w (the row's values in the working
// type), quantized, a matrix at a time: bitsandbytes' quantize_4bit with
// compress_statistics, the block scales made into a temporary and
// quantized again less their mean.
func (t *Trainer) quantize(row int, w *cuda.Buffer) error {
	for _, u := range t.quant.rows[row] {
		codes, scales, scales2, offset := t.quant.views(u)
		absmax, err := t.dev.Alloc(cuda.Temporaries, cuda.F32, int(u.sizes.Scales))
		if err != nil {
			return err
		}
		err = t.dev.QuantizeNF4(codes, absmax, w.View(u.at, u.n))
		if err == nil {
			err = t.dev.QuantizeBlockwise(scales, scales2, offset, absmax, cuda.DynamicSigned)
		}
		t.dev.Free(absmax)
		if err != nil {
			return err
		}
	}
	return nil
}

// dequantize is row's weights dequantized into a new temporary of the
// working type, a matrix at a time as bitsandbytes' dequantize_4bit does
// one: the block scales first, into an fp32 temporary freed once the
// matrix is made.
func (t *Trainer) dequantize(row int) (*cuda.Buffer, error) {
	units := t.quant.rows[row]
	n := 0
	for _, u := range units {
		n += u.n
	}
	w, err := t.dev.Alloc(cuda.Temporaries, t.dtypes.param, n)
	if err != nil {
		return nil, err
	}
	for _, u := range units {
		codes, scales, scales2, offset := t.quant.views(u)
		absmax, err := t.dev.Alloc(cuda.Temporaries, cuda.F32, int(u.sizes.Scales))
		if err == nil {
			err = t.dev.DequantizeBlockwise(absmax, scales, scales2, offset, cuda.DynamicSigned)
			if err == nil {
				err = t.dev.DequantizeNF4(w.View(u.at, u.n), codes, absmax)
			}
			t.dev.Free(absmax)
		}
		if err != nil {
			t.dev.Free(w)
			return nil, err
		}
	}
	return w, nil
}

// bindQuantized dequantizes the quantized weights instruction in reads
// (slot a), for this instruction only (releaseQuantized).
func (t *Trainer) bindQuantized(a int) (bool, error) {
	sl := &t.sched.Slots[a]
	if t.quant == nil || !sl.Persistent || sl.Cat != cuda.Frozen {
		return false, nil
	}
	if _, ok := t.quant.rows[sl.Param]; !ok {
		return false, nil
	}
	w, err := t.dequantize(sl.Param)
	if err != nil {
		return true, fmt.Errorf("dequantizing %s: %w", t.table[sl.Param].Name, err)
	}
	t.slots[a] = w
	t.quant.live = append(t.quant.live, a)
	return true, nil
}

// releaseQuantized frees the weights the last instruction read
// dequantized.
func (t *Trainer) releaseQuantized() {
	if t.quant == nil {
		return
	}
	for _, a := range t.quant.live {
		t.dev.Free(t.slots[a])
		t.slots[a] = nil
	}
	t.quant.live = t.quant.live[:0]
}

// setQuantized quantizes the quantized rows' weights from frozen, the
// frozen rows' values in Param.Store order (a []float32 or []float64),
// through a temporary of the working type (the weights as a 16-bit model
// loads them before bitsandbytes quantizes them). With frozen nil, on a
// device that does not compute, it makes the same allocations: what a
// simulated run's allocator sees where a measured one loads its weights.
func (t *Trainer) setQuantized(frozen any) error {
	for i, p := range t.table {
		if !p.Quantized {
			continue
		}
		w, err := t.dev.Alloc(cuda.Temporaries, t.dtypes.param, int(p.Count))
		if err != nil {
			return err
		}
		if frozen != nil {
			err = t.dev.Upload(w, sliceOf(frozen, int(p.Store), int(p.Store+p.Count)))
		}
		if err == nil {
			err = t.quantize(i, w)
		}
		t.dev.Free(w)
		if err != nil {
			return fmt.Errorf("train: quantizing %s: %w", p.Name, err)
		}
	}
	return nil
}

// downloadQuantized writes the quantized rows' weights, dequantized, into
// frozen at their Store offsets.
func (t *Trainer) downloadQuantized(frozen []float32) error {
	for i, p := range t.table {
		if !p.Quantized {
			continue
		}
		w, err := t.dequantize(i)
		if err != nil {
			return err
		}
		err = t.dev.Download(frozen[p.Store:p.Store+p.Count], w)
		t.dev.Free(w)
		if err != nil {
			return err
		}
	}
	return nil
}

// sliceOf is v[lo:hi] of a []float32 or []float64.
func sliceOf(v any, lo, hi int) any {
	switch s := v.(type) {
	case []float32:
		return s[lo:hi]
	case []float64:
		return s[lo:hi]
	}
	panic(fmt.Sprintf("train: sliceOf %T", v))
}
