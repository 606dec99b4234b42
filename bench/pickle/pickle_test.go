package pickle

import (
	"bytes"
	"math"
	"strings"
	"testing"

	gp "github.com/nlpodyssey/gopickle/pickle"
	"github.com/nlpodyssey/gopickle/types"
)

// Every kind of value, decoded by an independent reader (gopickle), comes
// back as written: integers at every width boundary and beyond 32 bits (as
// LONG1), strings of every length class, batches of more than 1000 items.
func TestRoundTrip(t *testing.T) {
	ints := []int64{0, 1, 255, 256, 65535, 65536, math.MaxInt32, math.MaxInt32 + 1, -1, -128, -129, math.MinInt32, math.MinInt32 - 1,
		1 << 40, 1<<53 - 1, 0x7f12_3456_7890, math.MaxInt64, math.MinInt64, 0x80, 0x8000_0000_0000}
	long := strings.Repeat("é", 200) // 400 bytes: BINUNICODE
	list := List{}
	for i := range 2500 {
		list = append(list, int64(i))
	}
	dict := Dict{}
	for i := range 1200 {
		dict = append(dict, Item{strings.Repeat("k", i%7) + string(rune('a'+i%26)) + string(rune('0'+i/26%10)) + string(rune('A'+i/260)), int64(i)})
	}
	in := Dict{
		{"ints", func() List {
			l := List{}
			for _, v := range ints {
				l = append(l, v)
			}
			return l
		}()},
		{"short", "block 7 / attention / forward"}, {"long", long}, {"empty", ""},
		{"float", 3.25}, {"none", nil}, {"yes", true}, {"no", false},
		{"list", list}, {"dict", dict}, {"tuple", Tuple{int64(1), "x"}}, {"empty tuple", Tuple{}},
	}
	var buf bytes.Buffer
	if err := Write(&buf, in); err != nil {
		t.Fatal(err)
	}
	out, err := gp.Loads(buf.String())
	if err != nil {
		t.Fatal(err)
	}
	d, ok := out.(*types.Dict)
	if !ok {
		t.Fatalf("decoded a %T", out)
	}
	get := func(k string) any {
		v, ok := d.Get(k)
		if !ok {
			t.Fatalf("no key %q", k)
		}
		return v
	}
	for i, v := range *get("ints").(*types.List) {
		if got := asInt(t, v); got != ints[i] {
			t.Errorf("int %d: %d came back as %d", i, ints[i], got)
		}
	}
	for k, want := range map[string]any{"short": "block 7 / attention / forward", "long": long, "empty": "", "float": 3.25, "none": nil, "yes": true, "no": false} {
		if got := get(k); got != want {
			t.Errorf("%s: %v came back as %v", k, want, got)
		}
	}
	if l := get("list").(*types.List); l.Len() != 2500 || asInt(t, l.Get(2499)) != 2499 {
		t.Errorf("a list of 2500: %d items", l.Len())
	}
	dd := get("dict").(*types.Dict)
	if dd.Len() != 1200 {
		t.Errorf("a dict of 1200: %d items", dd.Len())
	}
	for _, it := range dict {
		if v, ok := dd.Get(it.Key); !ok || asInt(t, v) != it.Value.(int64) {
			t.Errorf("dict item %q: %v", it.Key, v)
		}
	}
	if tu := get("tuple").(*types.Tuple); tu.Len() != 2 || tu.Get(1) != "x" {
		t.Errorf("tuple: %v", tu)
	}
}

func asInt(t *testing.T, v any) int64 {
	t.Helper()
	switch x := v.(type) {
	case int:
		return int64(x)
	case int64:
		return x
	case interface{ Int64() int64 }: // *big.Int
		return x.Int64()
	}
	t.Fatalf("not an integer: %T %v", v, v)
	return 0
}

// The opcodes are the binary ones the browser viewer reads: no text INT or
// LONG, no BINUNICODE8, no memo, no FRAME; and what cannot be written is an
// error naming it.
func TestOpcodes(t *testing.T) {
	var buf bytes.Buffer
	if err := Write(&buf, List{int64(1 << 40), int64(-5), int64(70000), int64(3)}); err != nil {
		t.Fatal(err)
	}
	want := []byte{0x80, 4, ']', '(', 0x8a, 6, 0, 0, 0, 0, 0, 1, 'J', 0xfb, 0xff, 0xff, 0xff, 'J', 0x70, 0x11, 1, 0, 'K', 3, 'e', '.'}
	if !bytes.Equal(buf.Bytes(), want) {
		t.Errorf("got % x\nwant % x", buf.Bytes(), want)
	}
	for _, bad := range []any{struct{}{}, "\xff", uint64(math.MaxUint64), map[string]int{}} {
		if err := Write(&buf, bad); err == nil {
			t.Errorf("%T %v: written", bad, bad)
		}
	}
}
