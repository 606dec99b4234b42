package train

import (
	"errors"
	"fmt"

	"trainmem/cuda"
	"trainmem/model"
)

// 8-bit optimizer states (model.Adam8bit, model.AdamW8bit): m and v of
// each trained row (a tensor) in blocks of cuda.Block8 from the row's
// start, as bitsandbytes quantizes each parameter's states. t.m and t.v
// then hold the rows' 8-bit codes (U8) and moments8 their fp32 parts: the
// blocks' scales, and the whole fp32 states of the rows below
// model.Min8bitSize, which bitsandbytes keeps in fp32. Both parts are the
// moment's category (adam_m, adam_v).

// moments8 is the fp32 parts of 8-bit states and each row's place.
type moments8 struct {
	m, v *cuda.Buffer       // F32: scales, and small rows' states
	rows map[int]moment8Row // by parameter-table row, the trained ones
}

// moment8Row is a row's place: its codes at Codes (-1 for a row in fp32)
// and its scales, or its fp32 states, at Floats.
type moment8Row struct{ Codes, Floats int }

// layout8 places the trained rows of table: the codes' and the fp32
// parts' lengths.
func layout8(table []model.Param) (rows map[int]moment8Row, codes, floats int) {
	rows = map[int]moment8Row{}
	for i, p := range table {
		if p.Frozen {
			continue
		}
		n := int(p.Count)
		if p.Count < model.Min8bitSize {
			rows[i] = moment8Row{Codes: -1, Floats: floats}
			floats += n
			continue
		}
		rows[i] = moment8Row{Codes: codes, Floats: floats}
		codes += n
		floats += cuda.Blocks(n, cuda.Block8)
	}
	return rows, codes, floats
}

// allocMoments8 allocates the 8-bit states on dev: t.m and t.v the codes,
// t.moments8 the fp32 parts, zero (so every state starts at 0: any code
// times a zero scale).
func (t *Trainer) allocMoments8(dev cuda.Device) error {
	l := t.layout
	if len(l.Pieces) != 1 || l.Pieces[0].Lo != 0 || l.Pieces[0].Hi < t.trained || l.Pieces[0].State != 0 {
		return errors.New("train: 8-bit optimizer states are a tensor's blocks: this rank must update every trained row (no ZeRO sharding)")
	}
	rows, codes, floats := layout8(t.table)
	t.moments8 = &moments8{rows: rows}
	var a stateAlloc
	t.m = a.alloc(dev, cuda.AdamM, cuda.U8, codes)
	t.moments8.m = a.alloc(dev, cuda.AdamM, cuda.F32, floats)
	t.v = a.alloc(dev, cuda.AdamV, cuda.U8, codes)
	t.moments8.v = a.alloc(dev, cuda.AdamV, cuda.F32, floats)
	return a.err
}

// free gives the fp32 parts back.
func (s *moments8) free(dev cuda.Device) {
	for _, b := range []*cuda.Buffer{s.m, s.v} {
		if b != nil {
			dev.Free(b)
		}
	}
	s.m, s.v = nil, nil
}

// update8 updates table row r (its weights param, gradient grad and
// master copy master, n values) with 8-bit states: cuda.Adam8bit over its
// blocks, or cuda.Adam over its fp32 states for a small row.
func (t *Trainer) update8(dev cuda.Device, row, n int, param, grad, master *cuda.Buffer, a cuda.AdamArgs) error {
	pl, ok := t.moments8.rows[row]
	if !ok {
		return fmt.Errorf("train: no 8-bit states for row %d", row)
	}
	if pl.Codes < 0 {
		return dev.Adam(param, grad, master, t.moments8.m.View(pl.Floats, n), t.moments8.v.View(pl.Floats, n), a)
	}
	b := cuda.Blocks(n, cuda.Block8)
	return dev.Adam8bit(param, grad, master, t.m.View(pl.Codes, n), t.v.View(pl.Codes, n),
		t.moments8.m.View(pl.Floats, b), t.moments8.v.View(pl.Floats, b), a)
}
