// Package pickle writes Python pickles of plain data (dicts, lists,
// strings, integers, floats, booleans and None), in the subset of pickle
// protocol 4 that every reader of PyTorch's memory snapshots reads: Python's
// pickle.load, and the small unpickler of PyTorch's browser viewer
// (pytorch.org/memory_viz, MemoryViz.js), which knows protocols 2 to 4 and
// binary opcodes only. So integers are BININT1, BININT2 and BININT, and
// LONG1 beyond 32 bits (never the text INT and LONG, which that viewer does
// not read); strings are SHORT_BINUNICODE and BINUNICODE (not BINUNICODE8,
// which it does not read either); floats BINFLOAT; dicts EMPTY_DICT and
// SETITEMS, lists EMPTY_LIST and APPENDS, in batches of at most 1000 as
// Python writes them; no memo and no FRAME.
package pickle

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"unicode/utf8"
)

// Dict is a Python dict whose keys are strings, in the order given.
type Dict []Item

// Item is one key and its value.
type Item struct {
	Key   string
	Value any
}

// D is the Dict of key, value pairs: D("a", 1, "b", "x"). A key that is
// not a string is a programming error and panics.
func D(kv ...any) Dict {
	if len(kv)%2 != 0 {
		panic("pickle: D takes key, value pairs")
	}
	d := make(Dict, 0, len(kv)/2)
	for i := 0; i < len(kv); i += 2 {
		d = append(d, Item{Key: kv[i].(string), Value: kv[i+1]})
	}
	return d
}

// List is a Python list.
type List []any

// Tuple is a Python tuple.
type Tuple []any

// The opcodes written (Python's Lib/pickletools.py names them).
const (
	opProto           = 0x80
	opStop            = '.'
	opMark            = '('
	opNone            = 'N'
	opNewTrue         = 0x88
	opNewFalse        = 0x89
	opBinInt          = 'J'
	opBinInt1         = 'K'
	opBinInt2         = 'M'
	opLong1           = 0x8a
	opBinFloat        = 'G'
	opShortBinUnicode = 0x8c
	opBinUnicode      = 'X'
	opEmptyList       = ']'
	opAppends         = 'e'
	opEmptyDict       = '}'
	opSetItems        = 'u'
	opEmptyTuple      = ')'
	opTuple           = 't'
	batch             = 1000
)

// Write writes v as one pickle, protocol 4. v is built of Dict, List,
// Tuple, string, bool, nil, the integer types and float64; anything else is
// an error naming its type.
func Write(w io.Writer, v any) error {
	bw := bufio.NewWriter(w)
	e := encoder{w: bw}
	e.byte(opProto, 4)
	e.value(v)
	e.byte(opStop)
	if e.err != nil {
		return e.err
	}
	return bw.Flush()
}

type encoder struct {
	w   *bufio.Writer
	err error
}

func (e *encoder) byte(b ...byte) {
	if e.err == nil {
		_, e.err = e.w.Write(b)
	}
}

// batches writes n items (each) in marked batches of at most batch items,
// each closed by end (SETITEMS, APPENDS), as Python's pickler does.
func (e *encoder) batches(n int, end byte, each func(i int)) {
	for lo := 0; lo < n; lo += batch {
		e.byte(opMark)
		for i := lo; i < min(lo+batch, n); i++ {
			each(i)
		}
		e.byte(end)
	}
}

func (e *encoder) value(v any) {
	switch x := v.(type) {
	case nil:
		e.byte(opNone)
	case bool:
		if x {
			e.byte(opNewTrue)
		} else {
			e.byte(opNewFalse)
		}
	case int:
		e.int(int64(x))
	case int32:
		e.int(int64(x))
	case int64:
		e.int(x)
	case uint64:
		if x > math.MaxInt64 {
			e.fail(fmt.Errorf("pickle: %d does not fit the 64 bits this encoder writes", x))
			return
		}
		e.int(int64(x))
	case uintptr:
		e.int(int64(x))
	case float64:
		var b [9]byte
		b[0] = opBinFloat
		binary.BigEndian.PutUint64(b[1:], math.Float64bits(x))
		e.byte(b[:]...)
	case string:
		e.string(x)
	case Dict:
		e.byte(opEmptyDict)
		e.batches(len(x), opSetItems, func(i int) {
			e.string(x[i].Key)
			e.value(x[i].Value)
		})
	case List:
		e.byte(opEmptyList)
		e.batches(len(x), opAppends, func(i int) { e.value(x[i]) })
	case Tuple:
		if len(x) == 0 {
			e.byte(opEmptyTuple)
			return
		}
		e.byte(opMark)
		for _, it := range x {
			e.value(it)
		}
		e.byte(opTuple)
	default:
		e.fail(fmt.Errorf("pickle: cannot write a %T", v))
	}
}

func (e *encoder) fail(err error) {
	if e.err == nil {
		e.err = err
	}
}

// int writes v in the fewest bytes: BININT1 and BININT2 (unsigned),
// BININT (signed 32 bits), else LONG1 (little-endian two's complement, the
// fewest bytes that keep the sign).
func (e *encoder) int(v int64) {
	switch {
	case v >= 0 && v < 1<<8:
		e.byte(opBinInt1, byte(v))
	case v >= 0 && v < 1<<16:
		e.byte(opBinInt2, byte(v), byte(v>>8))
	case v >= math.MinInt32 && v <= math.MaxInt32:
		var b [5]byte
		b[0] = opBinInt
		binary.LittleEndian.PutUint32(b[1:], uint32(int32(v)))
		e.byte(b[:]...)
	default:
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], uint64(v))
		n := 8
		for n > 1 && (b[n-1] == 0 && b[n-2]&0x80 == 0 || b[n-1] == 0xff && b[n-2]&0x80 != 0) {
			n-- // drop a byte that only repeats the sign
		}
		e.byte(opLong1, byte(n))
		e.byte(b[:n]...)
	}
}

func (e *encoder) string(s string) {
	switch {
	case !utf8.ValidString(s):
		e.fail(fmt.Errorf("pickle: %q is not UTF-8", s))
		return
	case int64(len(s)) > math.MaxUint32:
		e.fail(fmt.Errorf("pickle: a string of %d bytes (BINUNICODE holds at most 4 GiB)", len(s)))
		return
	}
	if len(s) < 256 {
		e.byte(opShortBinUnicode, byte(len(s)))
	} else {
		var b [5]byte
		b[0] = opBinUnicode
		binary.LittleEndian.PutUint32(b[1:], uint32(len(s)))
		e.byte(b[:]...)
	}
	if e.err == nil {
		_, e.err = e.w.WriteString(s)
	}
}
