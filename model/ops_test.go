package model

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// in describes one input of an op: its shape, and whether it holds token ids.
type in struct {
	shape tensor.Shape
	ids   bool
}

func f(s ...int) in             { return in{shape: s} }
func ids32(n int) in            { return in{shape: tensor.Shape{n}, ids: true} }
func scalarIn() in              { return in{shape: tensor.ScalarShape()} }
func shp(s ...int) tensor.Shape { return s }

// opCase is one op with inputs of valid shapes and the output it must have.
type opCase struct {
	op   G.Op
	ins  []in
	out  tensor.Shape
	diff []bool // DiffWRT, for the forward ops; nil for backward ops
}

// opCases covers every trainmem op with distinct sizes (B=2, T=3, C=8,
// NH=2, V=11, ctx=5, N=6), so that a swapped dimension shows; the flash and
// rotary ops have one key and value head (grouped-query), so that qkv's
// width W = C + 2·hd differs from 3·C.
func opCases() []opCase {
	const B, T, C, NH, V, Ctx, N = 2, 3, 8, 2, 11, 5, 6
	gqa := AttentionShape{B: B, T: T, C: C, NH: NH, KV: 1}
	W := gqa.QKVWidth()
	return []opCase{
		{bind(&EmbeddingOp{B: B, T: T, C: C, V: V, Ctx: Ctx}, ""), []in{ids32(N), f(V, C), f(Ctx, C)}, shp(N, C), []bool{false, true, true}},
		{bind(&NormStatsOp{Kind: NormLayer, N: N, C: C, Eps: 1e-5}, ""), []in{f(N, C)}, shp(N, 2), []bool{false}},
		{bind(&NormOp{Kind: NormLayer, N: N, C: C}, ""), []in{f(N, C), f(N, 2), f(C), f(C)}, shp(N, C), []bool{true, false, true, true}},
		{bind(&NormStatsOp{Kind: NormRMS, N: N, C: C, Eps: 1e-5}, ""), []in{f(N, C)}, shp(N, 1), []bool{false}},
		{bind(&NormOp{Kind: NormRMS, N: N, C: C}, ""), []in{f(N, C), f(N, 1), f(C)}, shp(N, C), []bool{true, false, true}},
		{bind(&LinearOp{N: N, In: C, Out: 3 * C, Bias: true}, ""), []in{f(N, C), f(3*C, C), f(3 * C)}, shp(N, 3*C), []bool{true, true, true}},
		{bind(&LinearOp{N: N, In: C, Out: V}, ""), []in{f(N, C), f(V, C)}, shp(N, V), []bool{true, true}},
		{bind(&AttentionProbsOp{AttentionShape: AttentionShape{B: B, T: T, C: C, NH: NH, KV: NH}}, ""), []in{f(N, 3*C)}, shp(B, NH, T, T), []bool{false}},
		{bind(&AttentionOutOp{AttentionShape: AttentionShape{B: B, T: T, C: C, NH: NH, KV: NH}}, ""), []in{f(N, 3*C), f(B, NH, T, T)}, shp(N, C), []bool{true, false}},
		{bind(&FlashAttentionStatsOp{AttentionShape: gqa}, ""), []in{f(N, W)}, shp(B, NH, T), []bool{false}},
		{bind(&FlashAttentionOutOp{AttentionShape: gqa}, ""), []in{f(N, W), f(B, NH, T)}, shp(N, C), []bool{true, false}},
		{bind(&RoPEOp{AttentionShape: gqa, Theta: 10000}, ""), []in{f(N, W)}, shp(N, W), []bool{true}},
		{bind(&GELUOp{N: N, C: 4 * C}, ""), []in{f(N, 4*C)}, shp(N, 4*C), []bool{true}},
		{bind(&SwiGLUOp{N: N, F: 3 * C}, ""), []in{f(N, 6*C)}, shp(N, 3*C), []bool{true}},
		{bind(&AddOp{N: N, C: C}, ""), []in{f(N, C), f(N, C)}, shp(N, C), []bool{true, true}},
		{bind(&CrossEntropyOp{N: N, V: V}, ""), []in{f(N, V), ids32(N)}, tensor.ScalarShape(), []bool{true, false}},
		{bind(&CrossEntropyStatsOp{N: N, V: 4, Lo: 4, Vocab: V}, ""), []in{f(N, 4), ids32(N)}, shp(3, N), []bool{false, false}},
		{bind(&CrossEntropyPartOp{N: N, V: 4, Lo: 4, Vocab: V}, ""), []in{f(N, 4), ids32(N), f(3, N)}, tensor.ScalarShape(), []bool{true, false, false}},
		{bind(&LoRAUpOp{LoRAShape: LoRAShape{N: N, Out: 3 * C, R: 2, Parts: [][2]int{{0, C}, {2 * C, 3 * C}}, Scale: 2}}, ""), []in{f(N, 3*C), f(N, 4), f(2*C, 2)}, shp(N, 3*C), []bool{true, true, true}},

		{bind(&EmbeddingBackwardTokensOp{B: B, T: T, C: C, V: V}, ""), []in{f(N, C), ids32(N)}, shp(V, C), nil},
		{bind(&EmbeddingBackwardPositionsOp{B: B, T: T, C: C, Ctx: Ctx}, ""), []in{f(N, C)}, shp(Ctx, C), nil},
		{bind(&NormBackwardXOp{Kind: NormLayer, N: N, C: C}, ""), []in{f(N, C), f(N, C), f(N, 2), f(C)}, shp(N, C), nil},
		{bind(&NormBackwardWOp{Kind: NormLayer, N: N, C: C}, ""), []in{f(N, C), f(N, C), f(N, 2)}, shp(C), nil},
		{bind(&NormBackwardXOp{Kind: NormRMS, N: N, C: C}, ""), []in{f(N, C), f(N, C), f(N, 1), f(C)}, shp(N, C), nil},
		{bind(&NormBackwardWOp{Kind: NormRMS, N: N, C: C}, ""), []in{f(N, C), f(N, C), f(N, 1)}, shp(C), nil},
		{bind(&SumRowsOp{N: N, C: 3 * C}, ""), []in{f(N, 3*C)}, shp(3 * C), nil},
		{bind(&LinearBackwardXOp{N: N, In: C, Out: 4 * C}, ""), []in{f(N, 4*C), f(4*C, C)}, shp(N, C), nil},
		{bind(&LinearBackwardWOp{N: N, In: C, Out: 4 * C}, ""), []in{f(N, 4*C), f(N, C)}, shp(4*C, C), nil},
		{bind(&AttentionBackwardOp{AttentionShape: AttentionShape{B: B, T: T, C: C, NH: NH, KV: NH}}, ""), []in{f(N, C), f(N, 3*C), f(B, NH, T, T)}, shp(N, 3*C), nil},
		{bind(&FlashAttentionBackwardOp{AttentionShape: gqa}, ""), []in{f(N, C), f(N, W), f(N, C), f(B, NH, T)}, shp(N, W), nil},
		{bind(&RoPEBackwardOp{AttentionShape: gqa, Theta: 10000}, ""), []in{f(N, W)}, shp(N, W), nil},
		{bind(&GELUBackwardOp{N: N, C: C}, ""), []in{f(N, C), f(N, C)}, shp(N, C), nil},
		{bind(&SwiGLUBackwardOp{N: N, F: C}, ""), []in{f(N, C), f(N, 2*C)}, shp(N, 2*C), nil},
		{bind(&CrossEntropyBackwardOp{N: N, V: V}, ""), []in{scalarIn(), f(N, V), ids32(N)}, shp(N, V), nil},
		{bind(&CrossEntropyPartBackwardOp{N: N, V: 4, Lo: 4, Vocab: V}, ""), []in{scalarIn(), f(N, 4), ids32(N), f(3, N)}, shp(N, 4), nil},
		{bind(&LoRAUpBackwardUOp{LoRAShape: LoRAShape{N: N, Out: 3 * C, R: 2, Parts: [][2]int{{0, C}, {2 * C, 3 * C}}, Scale: 2}}, ""), []in{f(N, 3*C), f(2*C, 2)}, shp(N, 4), nil},
		{bind(&LoRAUpBackwardBOp{LoRAShape: LoRAShape{N: N, Out: 3 * C, R: 2, Parts: [][2]int{{0, C}, {2 * C, 3 * C}}, Scale: 2}}, ""), []in{f(N, 3*C), f(N, 4)}, shp(2*C, 2), nil},
	}
}

// TestIsBackwardOp: the backward ops are those opCases writes with no
// DiffWRT, and every kind of op of trainmem's that the graphs of GPT-2's
// and LLaMA's blocks, naive and flash attention, hold is among opCases.
func TestIsBackwardOp(t *testing.T) {
	cased := map[string]bool{}
	for _, tc := range opCases() {
		cased[fmt.Sprintf("%T", tc.op)] = true
		if got := isBackwardOp(tc.op); got != (tc.diff == nil) {
			t.Errorf("%v: isBackwardOp = %t, want %t", tc.op, got, tc.diff == nil)
		}
	}
	for _, preset := range []string{"tiny", "tiny-llama"} {
		for _, att := range []Attention{AttentionNaive, AttentionFlash} {
			cfg := mustPreset(t, preset)
			cfg.Attention = att
			if att == AttentionFlash { // and a LoRA on every linear layer
				targets, err := cfg.ParseLoRATargets("all-linear")
				if err != nil {
					t.Fatal(err)
				}
				cfg.LoRA = LoRA{Rank: 2, Alpha: 4, Targets: targets}
			}
			gr, err := Build(cfg, 2, 8, tensor.Float32)
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range gr.G.AllNodes() {
				if _, ours := n.Op().(op); ours && !cased[fmt.Sprintf("%T", n.Op())] {
					t.Errorf("%s, %v attention: op %T (node %s) is not among opCases", preset, att, n.Op(), n.Name())
					cased[fmt.Sprintf("%T", n.Op())] = true
				}
			}
		}
	}
}

// nodes makes input nodes of the given shapes in g.
func nodes(g *G.ExprGraph, dt tensor.Dtype, ins []in) []*G.Node {
	var ns []*G.Node
	for i, x := range ins {
		name := fmt.Sprintf("in%d", i)
		switch {
		case x.ids:
			ns = append(ns, G.NewVector(g, tensor.Int32, G.WithShape(x.shape...), G.WithName(name)))
		case x.shape.IsScalar():
			ns = append(ns, G.NewScalar(g, dt, G.WithName(name)))
		default:
			ns = append(ns, G.NewTensor(g, dt, x.shape.Dims(), G.WithShape(x.shape...), G.WithName(name)))
		}
	}
	return ns
}

func TestOpsApply(t *testing.T) {
	for _, tc := range opCases() {
		for _, dt := range []tensor.Dtype{tensor.Float32, tensor.Float64} {
			t.Run(fmt.Sprintf("%v/%v", tc.op, dt), func(t *testing.T) {
				if !IsTrainmemOp(tc.op) {
					t.Errorf("IsTrainmemOp is false")
				}
				if tc.op.Arity() != len(tc.ins) {
					t.Fatalf("Arity %d, want %d", tc.op.Arity(), len(tc.ins))
				}
				g := G.NewGraph()
				n, err := G.ApplyOp(tc.op, nodes(g, dt, tc.ins)...)
				if err != nil {
					t.Fatalf("ApplyOp: %v", err)
				}
				if !n.Shape().Eq(tc.out) {
					t.Errorf("output shape %v, want %v", n.Shape(), tc.out)
				}
				if n.Dtype() != dt {
					t.Errorf("output dtype %v, want %v", n.Dtype(), dt)
				}
				if tc.out.IsScalar() && !n.IsScalar() {
					t.Errorf("output type %v, want a bare %v scalar (a cost gorgonia can differentiate)", n.Type(), dt)
				}
			})
		}
	}
}

func TestOpsRejectWrongShapes(t *testing.T) {
	for _, tc := range opCases() {
		for i := range tc.ins {
			if tc.ins[i].shape.IsScalar() {
				continue
			}
			ins := append([]in(nil), tc.ins...)
			bad := tc.ins[i].shape.Clone()
			bad[0]++
			ins[i] = in{shape: bad, ids: tc.ins[i].ids}
			g := G.NewGraph()
			_, err := G.ApplyOp(tc.op, nodes(g, tensor.Float32, ins)...)
			if err == nil {
				t.Errorf("%v: input %d of shape %v accepted, want an error", tc.op, i, bad)
				continue
			}
			if msg := err.Error(); !strings.Contains(msg, tc.op.(fmt.Stringer).String()) || !strings.Contains(msg, fmt.Sprint(bad)) {
				t.Errorf("%v: input %d of shape %v: error %q should name the op and the bad shape", tc.op, i, bad, msg)
			}
		}
		// Float operands must share one dtype: a float64 operand among
		// float32 ones fails type inference. (A lone operand's dtype is
		// not constrained: hm's type variables carry no class, as with
		// gorgonia's own ops; Build makes only float graphs.)
		g := G.NewGraph()
		args := nodes(g, tensor.Float32, tc.ins)
		floats := 0
		for _, x := range tc.ins {
			if !x.ids {
				floats++
			}
		}
		if floats < 2 {
			continue
		}
		for i, x := range tc.ins {
			if !x.ids && !x.shape.IsScalar() {
				args[i] = nodes(g, tensor.Float64, []in{x})[0]
				break
			}
		}
		if _, err := G.ApplyOp(tc.op, args...); err == nil {
			t.Errorf("%v: mixed float32 and float64 operands were accepted", tc.op)
		}
	}
}

// TestOpsTypeFresh: gorgonia returns an op's function type to a pool after
// inference, so Type must build a new one each call.
func TestOpsTypeFresh(t *testing.T) {
	for _, tc := range opCases() {
		a, b := tc.op.Type(), tc.op.Type()
		if reflect.ValueOf(a).Pointer() == reflect.ValueOf(b).Pointer() {
			t.Errorf("%v: Type returned the same %T twice", tc.op, a)
		}
		if a.String() != b.String() {
			t.Errorf("%v: Type changed between calls: %v, %v", tc.op, a, b)
		}
	}
}

// TestOpsHashCoversEveryField changes each exported field of each op in
// turn: the hash and the string must change (gorgonia merges nodes of equal
// hash, so a field missing from the hash would merge different nodes).
func TestOpsHashCoversEveryField(t *testing.T) {
	seen := map[uint32]G.Op{}
	for _, tc := range opCases() {
		h0 := tc.op.Hashcode()
		if other, dup := seen[h0]; dup {
			t.Errorf("%v and %v hash alike", tc.op, other)
		}
		seen[h0] = tc.op
		v := reflect.ValueOf(tc.op).Elem()
		fields := 0
		// Every exported field, those of an exported embedded struct
		// (AttentionShape) included, by its index path.
		var paths [][]int
		var walk func(t reflect.Type, at []int)
		walk = func(t reflect.Type, at []int) {
			for i := range t.NumField() {
				sf := t.Field(i)
				path := append(append([]int(nil), at...), i)
				switch {
				case !sf.IsExported():
				case sf.Anonymous && sf.Type.Kind() == reflect.Struct:
					walk(sf.Type, path)
				case !sf.Anonymous:
					paths = append(paths, path)
				}
			}
		}
		walk(v.Type(), nil)
		for _, path := range paths {
			fv, sf := v.FieldByIndex(path), v.Type().FieldByIndex(path)
			fields++
			clone := reflect.New(v.Type())
			clone.Elem().Set(v)
			cf := clone.Elem().FieldByIndex(path)
			switch fv.Kind() {
			case reflect.Int:
				cf.SetInt(fv.Int() + 1)
			case reflect.Uint8: // an enum (Parallel)
				cf.SetUint(fv.Uint() + 1)
			case reflect.Bool:
				cf.SetBool(!fv.Bool())
			case reflect.Float32:
				cf.SetFloat(fv.Float() * 2)
			case reflect.Slice: // a LoRA's parts: one range's end moved
				parts := append([][2]int(nil), fv.Interface().([][2]int)...)
				parts[0][1]--
				cf.Set(reflect.ValueOf(parts))
			default:
				t.Fatalf("%v: field %s of kind %v not covered by this test", tc.op, sf.Name, fv.Kind())
			}
			op2 := bind(clone.Interface().(op), "")
			if op2.Hashcode() == h0 {
				t.Errorf("%v: changing %s leaves the hash unchanged", tc.op, sf.Name)
			}
			if op2.String() == tc.op.String() {
				t.Errorf("%v: changing %s leaves String unchanged", tc.op, sf.Name)
			}
		}
		if fields == 0 {
			t.Errorf("%v has no fields: the executor needs its dimensions", tc.op)
		}
	}
}

func TestOpsDoRefuses(t *testing.T) {
	for _, tc := range opCases() {
		v, err := tc.op.Do()
		if v != nil || !errors.Is(err, ErrNotVM) || !strings.Contains(err.Error(), tc.op.String()) {
			t.Errorf("%v: Do = %v, %v; want ErrNotVM naming the op", tc.op, v, err)
		}
		if tc.op.ReturnsPtr() || tc.op.CallsExtern() || tc.op.OverwritesInput() != -1 {
			t.Errorf("%v: ReturnsPtr %t, CallsExtern %t, OverwritesInput %d; want false, false, -1",
				tc.op, tc.op.ReturnsPtr(), tc.op.CallsExtern(), tc.op.OverwritesInput())
		}
	}
}

// TestOpsSymDiff checks DiffWRT and the gradient nodes each forward op's
// SymDiff makes: one per differentiable input, of that input's shape and
// dtype, nil for the others; Add makes none (it passes dy through).
func TestOpsSymDiff(t *testing.T) {
	for _, tc := range opCases() {
		sd, ok := tc.op.(G.SDOp)
		if tc.diff == nil {
			if ok {
				t.Errorf("%v: a backward op should not be differentiable", tc.op)
			}
			continue
		}
		if !ok {
			t.Errorf("%v: a forward op must implement gorgonia.SDOp", tc.op)
			continue
		}
		if got := sd.DiffWRT(len(tc.ins)); fmt.Sprint(got) != fmt.Sprint(tc.diff) {
			t.Errorf("%v: DiffWRT %v, want %v", tc.op, got, tc.diff)
		}
		g := G.NewGraph()
		args := nodes(g, tensor.Float64, tc.ins)
		out, err := G.ApplyOp(tc.op, args...)
		if err != nil {
			t.Fatal(err)
		}
		dy := nodes(g, tensor.Float64, []in{{shape: tc.out}})[0]
		grads, err := sd.SymDiff(args, out, dy)
		anyDiff := false
		for _, d := range tc.diff {
			anyDiff = anyDiff || d
		}
		if !anyDiff {
			if err == nil {
				t.Errorf("%v: SymDiff of a non-differentiable op succeeded", tc.op)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%v: SymDiff: %v", tc.op, err)
		}
		if len(grads) != len(args) {
			t.Fatalf("%v: SymDiff returned %d nodes for %d inputs", tc.op, len(grads), len(args))
		}
		for i, d := range grads {
			if !tc.diff[i] {
				if d != nil {
					t.Errorf("%v: gradient for non-differentiable input %d: %v", tc.op, i, d)
				}
				continue
			}
			if d == nil || !d.Shape().Eq(args[i].Shape()) || d.Dtype() != tensor.Float64 {
				t.Errorf("%v: gradient of input %d: %v, want shape %v float64", tc.op, i, d, args[i].Shape())
				continue
			}
			// The sums pass their output's gradient through: both of
			// Add's inputs, the frozen layer's output of LoRAUp.
			_, isAdd := tc.op.(*AddOp)
			_, isLoRA := tc.op.(*LoRAUpOp)
			isAdd = isAdd || isLoRA && i == 0
			if isAdd != (d == dy) {
				t.Errorf("%v: gradient of input %d is dy: %t, want %t", tc.op, i, d == dy, isAdd)
			}
			if !isAdd && !isBackwardOp(d.Op()) {
				t.Errorf("%v: gradient of input %d has op %T, want a backward op", tc.op, i, d.Op())
			}
		}
	}
}

func TestIsGradAccumulation(t *testing.T) {
	g := G.NewGraph()
	a := G.NewMatrix(g, tensor.Float32, G.WithShape(2, 2), G.WithName("a"))
	b := G.NewMatrix(g, tensor.Float32, G.WithShape(2, 2), G.WithName("b"))
	for _, tc := range []struct {
		name string
		f    func(a, b *G.Node) (*G.Node, error)
		want bool
	}{
		{"add", G.Add, true},
		{"reduce add", func(a, b *G.Node) (*G.Node, error) { return G.ReduceAdd(G.Nodes{a, b}) }, true},
		{"sub", G.Sub, false},
		{"mul", G.HadamardProd, false},
	} {
		n, err := tc.f(a, b)
		if err != nil {
			t.Fatal(err)
		}
		if got := IsGradAccumulation(n.Op()); got != tc.want {
			t.Errorf("%s (%T %q): IsGradAccumulation %t, want %t", tc.name, n.Op(), n.Op(), got, tc.want)
		}
	}
	if IsGradAccumulation(&AddOp{N: 2, C: 2}) {
		t.Error("trainmem's AddOp is not gorgonia's accumulation")
	}
}

// The shared G.Op methods reach an op through its base: an op used before
// bind, or copied after it, is refused at once rather than described as
// another op.
func TestOpsBoundOnce(t *testing.T) {
	mustPanic := func(what, want string, f func()) {
		t.Helper()
		defer func() {
			if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), want) {
				t.Errorf("%s: recovered %v, want a panic saying %q", what, r, want)
			}
		}()
		f()
	}
	mustPanic("unbound", "before bind", func() { (&GELUOp{N: 2, C: 3}).Hashcode() })
	a := bind(&GELUOp{N: 2, C: 3}, "a")
	c := *a
	c.C = 4
	mustPanic("copied", "copied after bind", func() { c.Hashcode() })
	if b := bind(&c, "a"); b.Hashcode() == a.Hashcode() || b.Arity() != 1 {
		t.Errorf("a rebound copy of other fields hashes as the original")
	}
}

// TestApplyOpTypes holds applyOp, which skips gorgonia's type inference, to
// gorgonia's ApplyOp: for every op, in fp32 and fp64, the same type and
// shape; and it refuses what the inference refused (a float input of
// another dtype, float ids).
func TestApplyOpTypes(t *testing.T) {
	for _, tc := range opCases() {
		for _, dt := range []tensor.Dtype{tensor.Float32, tensor.Float64} {
			g := G.NewGraph()
			args := nodes(g, dt, tc.ins)
			want, err := G.ApplyOp(tc.op, args...)
			if err != nil {
				t.Fatalf("%v: gorgonia.ApplyOp: %v", tc.op, err)
			}
			g2 := G.NewGraph()
			got, err := applyOp(tc.op.(op), nodes(g2, dt, tc.ins)...)
			if err != nil {
				t.Fatalf("%v: applyOp: %v", tc.op, err)
			}
			if !got.Type().Eq(want.Type()) || !got.Shape().Eq(want.Shape()) || got.Dtype() != want.Dtype() {
				t.Errorf("%v %v: applyOp made %v %v, gorgonia.ApplyOp %v %v", tc.op, dt, got.Type(), got.Shape(), want.Type(), want.Shape())
			}
			mixed := 0
			for i, x := range tc.ins {
				if !x.ids {
					mixed = i
				}
			}
			if len(tc.ins) > 1 && !tc.ins[mixed].ids {
				other := tensor.Float64
				if dt == tensor.Float64 {
					other = tensor.Float32
				}
				g3 := G.NewGraph()
				bad := nodes(g3, dt, tc.ins)
				bad[mixed] = nodes(g3, other, []in{{shape: tc.ins[mixed].shape}})[0]
				floats := 0
				for _, x := range tc.ins {
					if !x.ids {
						floats++
					}
				}
				_, gerr := G.ApplyOp(tc.op, bad...)
				_, err := applyOp(tc.op.(op), bad...)
				if floats > 1 && (err == nil || gerr == nil) {
					t.Errorf("%v: a %v input among %v ones: applyOp %v, gorgonia %v; want both refused", tc.op, other, dt, err, gerr)
				}
			}
		}
	}
}
