package model

import (
	"fmt"
	"strings"
	"testing"
)

// TestKeptTensors holds what the dataflow's derivation gives (which values
// the backward ops read, at the ops' signatures' sizes) to the table written
// in exact.go from the ops' own doc comments, at gpt2-xl's shape in fp16
// and in fp32, tied and untied: an op whose backward read another input, or
// a block that made another tensor, would change a line here.
func TestKeptTensors(t *testing.T) {
	for _, x := range []struct {
		p      Precision
		untied bool
	}{{FP16, false}, {FP32, false}, {FP16, true}} {
		s := Setup{Model: preset(t, "gpt2-xl"), Batch: 3, Seq: 1000, Precision: x.p, Optimizer: Adam, Ranks: 1, TP: 1, PP: 1}
		s.Model.Untied = x.untied
		k, err := s.KeptTensors()
		if err != nil {
			t.Fatal(err)
		}
		N, h, a, e, V := int64(3*1000), int64(1600), int64(25), x.p.Size(), int64(50257)
		nh := N * h * e
		stats := fmt.Sprintf("Statistics×1/0=%d", 8*N)
		values := func(n int64) string { return fmt.Sprintf("LayerValues×%d/1=%d", n, n*nh) }
		want := []string{
			"tokens: TokenIDs×1/0=" + fmt.Sprint(4*N),
			"embedding: Outside×1/0=" + fmt.Sprint(nh),
			"ln1_stats: " + strings.Replace(stats, "/0", "/1", 1), "ln1: " + values(1), "qkv: " + values(3),
			fmt.Sprintf("attention_probs: Scores×1/1=%d", a*3*1000*1000*e),
			"attention_out: " + values(1), "residual1: " + values(1),
			"ln2_stats: " + strings.Replace(stats, "/0", "/1", 1), "ln2: " + values(1),
			"mlp_fc: " + values(4), "mlp_gelu: " + values(4), "block_output: " + values(1),
			"final_layer_norm: " + stats + fmt.Sprintf(" Outside×1/0=%d", nh),
			fmt.Sprintf("logits: Outside×1/0=%d", N*V*e),
			"targets: TokenIDs×1/0=" + fmt.Sprint(4*N),
		}
		var got []string
		var block int64
		for _, sec := range [][]Term{k.Embed, k.Block, k.Head} {
			for _, term := range sec {
				var parts []string
				var sum int64
				for _, p := range term.Parts {
					parts = append(parts, fmt.Sprintf("%s×%d/%d=%d", kindNames[p.Kind], p.Count, p.Layers, p.Bytes))
					sum += p.Bytes
				}
				if sum != term.Bytes {
					t.Errorf("%s: parts sum to %d, the term holds %d", term.Name, sum, term.Bytes)
				}
				got = append(got, term.Name+": "+strings.Join(parts, " "))
			}
		}
		for _, term := range k.Block {
			block += term.Bytes
		}
		if g, w := strings.Join(got, "\n"), strings.Join(want, "\n"); g != w {
			t.Errorf("%v untied=%t: kept tensors\n%s\nwant\n%s", x.p, x.untied, g, w)
		}
		// exact.go's sum: 16·N·h·e + a·b·s²·e + 16·N a block.
		if w := 16*nh + a*3*1000*1000*e + 16*N; block != w {
			t.Errorf("%v: a block keeps %d bytes, exact.go's sum is %d", x.p, block, w)
		}
		// Korthikanti et al.'s list without its dropout tensors keeps the
		// same 16 s·b·h values and one score tensor a layer: a block of
		// trainmem's is that layer and its two layer norms' statistics
		// (16·N bytes), which no formula counts. With dropout the paper's
		// layer holds 3·a·s²·b + 2·s·b·h bytes more (e = 2).
		nd, err := KorthikantiLayerNoDropout(1000, 3, h, a, e, 1, false)
		if err != nil {
			t.Fatal(err)
		}
		if block-16*N != nd.Total() {
			t.Errorf("%v: a block keeps %d bytes less its statistics, Korthikanti's layer without dropout %d", x.p, block-16*N, nd.Total())
		}
	}
}

var kindNames = map[TensorKind]string{LayerValues: "LayerValues", Scores: "Scores", Masks: "Masks", Statistics: "Statistics", Checkpoints: "Checkpoints", Outside: "Outside", TokenIDs: "TokenIDs"}

// TestDataflowRefs: a step that reads a value no earlier step makes is
// refused by name, and a dataflow's parameters are the parameter table's.
func TestDataflowRefs(t *testing.T) {
	var s sectionOf
	s.add("a", "", nil, "x")
	s.add("b", "", nil, "a", "later")
	if s.err == nil || !strings.Contains(s.err.Error(), `step b reads "later"`) {
		t.Errorf("a forward reference: %v", s.err)
	}
	for _, untied := range []bool{false, true} {
		cfg := preset(t, "tiny")
		cfg.Untied = untied
		flow, err := flowOf(cfg, 1, 4)
		if err != nil {
			t.Fatal(err)
		}
		table := map[string]bool{}
		for _, p := range cfg.Params() {
			table[p.Name] = true
		}
		read := map[string]bool{}
		for _, sec := range []struct {
			prefix string
			steps  []step
		}{{"", flow.embed}, {"h0.", flow.block}, {"h1.", flow.block}, {"", flow.head}} {
			for _, st := range sec.steps {
				for _, a := range st.args {
					if a.kind == refParam {
						if !table[sec.prefix+a.name] {
							t.Errorf("untied=%t: step %s reads parameter %s%s, which is not in the table", untied, st.name, sec.prefix, a.name)
						}
						read[sec.prefix+a.name] = true
					}
				}
			}
		}
		for name := range table {
			if !read[name] {
				t.Errorf("untied=%t: parameter %s is read by no step", untied, name)
			}
		}
	}
}
