package model

import (
	"strings"
	"testing"
)

// TestTensorRankTable holds a rank's parameter table to Megatron-LM's split
// of a GPT-2 block (Shoeybi et al. 2019, Section 3): the QKV projection and
// the first MLP matrix split by their output rows, the attention output and
// the second MLP matrix by their input columns, the token embedding by the
// vocabulary (the first V mod t ranks a row more), everything else whole;
// the ranks' counts sum to the whole model's plus the whole rows every
// rank holds again.
func TestTensorRankTable(t *testing.T) {
	cfg, _ := Preset("gpt2")
	const tp = 4
	h := cfg.Hidden
	wholeRows := int64(0) // the elements of the rows every rank holds whole
	for _, p := range cfg.Params() {
		switch {
		case p.Name == "wte", strings.HasSuffix(p.Name, "attn.qkv.w"), strings.HasSuffix(p.Name, "attn.qkv.b"),
			strings.HasSuffix(p.Name, "attn.proj.w"), strings.HasSuffix(p.Name, "mlp.fc.w"),
			strings.HasSuffix(p.Name, "mlp.fc.b"), strings.HasSuffix(p.Name, "mlp.proj.w"):
		default:
			wholeRows += p.Count
		}
	}
	var sum int64
	for r := range tp {
		part, err := cfg.TensorRank(tp, r)
		if err != nil {
			t.Fatal(err)
		}
		if err := part.Validate(); err != nil {
			t.Fatal(err)
		}
		table := part.Params()
		var off int64
		for _, p := range table {
			if p.Offset != off {
				t.Fatalf("rank %d: %s at %d, want %d", r, p.Name, p.Offset, off)
			}
			off += p.Count
		}
		if off != part.NumParams() {
			t.Errorf("rank %d: the table holds %d, NumParams %d", r, off, part.NumParams())
		}
		sum += part.NumParams()
		q, _ := part.ParamByName("h3.attn.qkv.w")
		k := h / tp
		want := [][2]int{{r * k, (r + 1) * k}, {h + r*k, h + (r+1)*k}, {2*h + r*k, 2*h + (r+1)*k}}
		if q.Shape[0] != 3*k || q.Shape[1] != h || q.Split.Axis != 0 || len(q.Split.Ranges) != 3 || q.Split.Ranges[0] != want[0] || q.Split.Ranges[1] != want[1] || q.Split.Ranges[2] != want[2] {
			t.Errorf("rank %d: qkv.w %v split %+v, want (%d, %d) rows %v", r, q.Shape, q.Split, 3*k, h, want)
		}
		pw, _ := part.ParamByName("h0.mlp.proj.w")
		if pw.Shape[0] != h || pw.Shape[1] != 4*k || pw.Split.Axis != 1 || pw.Split.Ranges[0] != [2]int{4 * k * r, 4 * k * (r + 1)} {
			t.Errorf("rank %d: mlp.proj.w %v split %+v", r, pw.Shape, pw.Split)
		}
		if b, _ := part.ParamByName("h0.attn.proj.b"); b.Count != int64(h) || len(b.Split.Ranges) != 0 {
			t.Errorf("rank %d: the row-parallel bias %v split %+v, want whole", r, b.Shape, b.Split)
		}
		// 50257 = 4·12564 + 1: rank 0 holds 12565 rows, the others 12564.
		wte, _ := part.ParamByName("wte")
		lo, n := 0, 12565
		if r > 0 {
			lo, n = 12565+(r-1)*12564, 12564
		}
		if wte.Shape[0] != n || wte.Split.Ranges[0] != [2]int{lo, lo + n} {
			t.Errorf("rank %d: wte %v split %+v, want rows [%d, %d)", r, wte.Shape, wte.Split, lo, lo+n)
		}
	}
	if want := cfg.NumParams() + (tp-1)*wholeRows; sum != want {
		t.Errorf("the ranks hold %d parameters, want Φ + (t-1)·whole rows = %d", sum, want)
	}
}

// TestSplitJoinParams: the ranks' parts of a model's weights put together
// are the weights, every element from the one rank that holds it; a whole
// row that differs between ranks is refused by name.
func TestSplitJoinParams(t *testing.T) {
	cfg := Config{Name: "t", Layers: 2, Hidden: 16, Heads: 4, Vocab: 40, Context: 8, Untied: true}
	flat := InitParams(cfg, 7)
	for i := range flat {
		flat[i] = float32(i) // every element its own value, so a misplaced copy shows
	}
	for _, tp := range []int{2, 4} {
		parts := make([][]float32, tp)
		cfgs := make([]Config, tp)
		for r := range parts {
			part, err := cfg.TensorRank(tp, r)
			if err != nil {
				t.Fatal(err)
			}
			cfgs[r] = part
			if parts[r], err = SplitParams(part, flat); err != nil {
				t.Fatal(err)
			}
		}
		// Rank 1's first column of h1.attn.proj.w is the whole's column k.
		part, _ := cfg.TensorRank(tp, 1)
		p, _ := part.ParamByName("h1.attn.proj.w")
		w, _ := cfg.ParamByName("h1.attn.proj.w")
		k := cfg.Hidden / tp
		if got, want := parts[1][p.Offset+int64(k)], flat[w.Offset+int64(cfg.Hidden)+int64(k)]; got != want {
			t.Errorf("tp %d: rank 1's attn.proj.w[1, 0] = %g, want the whole's [1, %d] = %g", tp, got, k, want)
		}
		back, err := JoinParams(cfgs, parts)
		if err != nil {
			t.Fatal(err)
		}
		for i := range flat {
			if back[i] != flat[i] {
				t.Fatalf("tp %d: joined[%d] = %g, want %g", tp, i, back[i], flat[i])
			}
		}
		ln, _ := part.ParamByName("h0.ln2.b")
		parts[1][ln.Offset+3]++
		if _, err := JoinParams(cfgs, parts); err == nil || !strings.Contains(err.Error(), "h0.ln2.b[3]") {
			t.Errorf("tp %d: a whole row that differs between ranks: %v, want an error naming h0.ln2.b[3]", tp, err)
		}
	}
}

func TestTensorRankRefusals(t *testing.T) {
	cfg, _ := Preset("tiny") // 4 heads
	for _, tc := range []struct {
		size, rank int
		want       string
	}{
		{3, 0, "do not divide the 4 heads"},
		{8, 0, "valid: 2 to the heads, 4"},
		{2, 2, "rank 2 of 2 (valid: 0 to 1)"},
		{0, 0, "split over 0 ranks"},
	} {
		if _, err := cfg.TensorRank(tc.size, tc.rank); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("TensorRank(%d, %d) = %v, want an error with %q", tc.size, tc.rank, err, tc.want)
		}
	}
	part, _ := cfg.TensorRank(2, 1)
	if _, err := part.TensorRank(2, 0); err == nil {
		t.Error("a part split again was accepted")
	}
	if whole, _ := cfg.TensorRank(1, 0); whole != cfg {
		t.Errorf("one rank's part is %v, want the whole %v", whole, cfg)
	}
}
