package model

import (
	"fmt"
	"math"
	"strings"
	"testing"
)

// TestStageTables: a pipeline's stages hold every row of the whole model's
// table once, under its name, the blocks split as StageBlocks says (L/P
// each, the first L mod P one more), the embeddings on the first stage, the
// final layer norm and head on the last, and a tied head's copy of wte on
// the last as well: the stages' parameters are Φ, plus V·h for the copy.
func TestStageTables(t *testing.T) {
	for _, untied := range []bool{false, true} {
		cfg := Config{Name: "t", Layers: 7, Hidden: 16, Heads: 4, Vocab: 40, Context: 8, Untied: untied}
		whole := byName(cfg.Params())
		for _, p := range []int{2, 3, 7} {
			seen := map[string]int{}
			var sum int64
			next := 0
			for r := range p {
				st, err := cfg.PipelineStage(p, r)
				if err != nil {
					t.Fatal(err)
				}
				lo, n := StageBlocks(cfg.Layers, p, r)
				if lo != next || st.Layers != n || st.Stage.Lo != lo {
					t.Errorf("p %d stage %d: blocks from %d, %d of them (config %d from %d), want from %d", p, r, lo, n, st.Layers, st.Stage.Lo, next)
				}
				if want := cfg.Layers/p + b2i(r < cfg.Layers%p); n != want {
					t.Errorf("p %d stage %d: %d blocks, want %d", p, r, n, want)
				}
				next = lo + n
				var table int64
				for _, row := range st.Params() {
					w, ok := whole[row.Name]
					if !ok || w.Count != row.Count {
						t.Errorf("p %d stage %d: row %s (%d) is not the whole model's (%d)", p, r, row.Name, row.Count, w.Count)
					}
					seen[row.Name]++
					table += row.Count
				}
				if table != st.NumParams() {
					t.Errorf("p %d stage %d: the table holds %d, NumParams says %d", p, r, table, st.NumParams())
				}
				sum += table
				if st.First() != (r == 0) || st.Last() != (r == p-1) {
					t.Errorf("p %d stage %d: first %t last %t", p, r, st.First(), st.Last())
				}
			}
			if next != cfg.Layers {
				t.Errorf("p %d: the stages hold %d of %d blocks", p, next, cfg.Layers)
			}
			want := cfg.NumParams()
			if !untied {
				want += int64(cfg.Vocab * cfg.Hidden)
			}
			if sum != want {
				t.Errorf("p %d untied %t: the stages hold %d parameters, want %d", p, untied, sum, want)
			}
			for name := range whole {
				copies := 1
				if name == "wte" && !untied {
					copies = 2
				}
				if seen[name] != copies {
					t.Errorf("p %d: %s is held by %d stages, want %d", p, name, seen[name], copies)
				}
			}
		}
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestSplitJoinStages: the parts of a pipeline (and of a pipeline of
// tensor-parallel ranks) put together are the weights; the tied
// embedding's copies must agree, and a part missing leaves values unheld.
func TestSplitJoinStages(t *testing.T) {
	cfg := Config{Name: "t", Layers: 4, Hidden: 16, Heads: 4, Vocab: 40, Context: 8}
	flat := make([]float32, cfg.NumParams())
	for i := range flat {
		flat[i] = float32(i)
	}
	for _, tc := range []struct{ tp, pp int }{{1, 2}, {1, 3}, {2, 2}, {4, 4}} {
		var cfgs []Config
		var parts [][]float32
		for pp := range tc.pp {
			for tp := range tc.tp {
				part, err := cfg.TensorRank(tc.tp, tp)
				if err == nil {
					part, err = part.PipelineStage(tc.pp, pp)
				}
				if err != nil {
					t.Fatal(err)
				}
				p, err := SplitParams(part, flat)
				if err != nil {
					t.Fatal(err)
				}
				cfgs, parts = append(cfgs, part), append(parts, p)
			}
		}
		back, err := JoinParams(cfgs, parts)
		if err != nil {
			t.Fatal(err)
		}
		for i := range flat {
			if back[i] != flat[i] {
				t.Fatalf("tp %d pp %d: joined[%d] = %g, want %g", tc.tp, tc.pp, i, back[i], flat[i])
			}
		}
		// The last stage's copy of wte differs from the first's.
		last := len(cfgs) - 1
		w, _ := cfgs[last].ParamByName("wte")
		parts[last][w.Offset+2]++
		if _, err := JoinParams(cfgs, parts); err == nil || !strings.Contains(err.Error(), "wte[2]") {
			t.Errorf("tp %d pp %d: differing copies of wte: %v, want an error naming wte[2]", tc.tp, tc.pp, err)
		}
		parts[last][w.Offset+2]--
		if _, err := JoinParams(cfgs[1:], parts[1:]); err == nil || !strings.Contains(err.Error(), "hold no value") {
			t.Errorf("tp %d pp %d: a part missing: %v, want an error saying what no part holds", tc.tp, tc.pp, err)
		}
	}
}

// TestPipelineActions: under both schedules every micro-batch goes forward
// once and back once, after its forward pass, in order; 1F1B's stage r of
// P keeps at most min(P-r, M) micro-batches in flight (Narayanan et al.
// 2021, Section 2.2), GPipe's M.
func TestPipelineActions(t *testing.T) {
	for _, sched := range []PipelineSchedule{OneFOneB, GPipe} {
		for _, tc := range []struct{ p, m int }{{1, 1}, {1, 4}, {2, 1}, {2, 4}, {4, 4}, {4, 8}, {8, 3}} {
			for r := range tc.p {
				acts := sched.Actions(tc.p, r, tc.m)
				name := fmt.Sprintf("%s p %d m %d stage %d", sched, tc.p, tc.m, r)
				nf, nb := 0, 0
				for _, a := range acts {
					if a.Backward {
						if a.Micro != nb || a.Micro >= nf {
							t.Errorf("%s: backward of %d after %d forward and %d backward passes", name, a.Micro, nf, nb)
						}
						nb++
					} else {
						if a.Micro != nf {
							t.Errorf("%s: forward of %d after %d forward passes", name, a.Micro, nf)
						}
						nf++
					}
				}
				if nf != tc.m || nb != tc.m {
					t.Errorf("%s: %d forward and %d backward passes, want %d each", name, nf, nb, tc.m)
				}
				want := tc.m
				if sched == OneFOneB {
					want = min(tc.p-r, tc.m)
				}
				if got := InFlight(acts); got != want {
					t.Errorf("%s: %d in flight, want %d", name, got, want)
				}
			}
		}
	}
	if s, err := ParsePipelineSchedule("gpipe"); err != nil || s != GPipe {
		t.Errorf("ParsePipelineSchedule(gpipe) = %v, %v", s, err)
	}
	if _, err := ParsePipelineSchedule("zb"); err == nil || !strings.Contains(err.Error(), `"zb" (valid: 1f1b, gpipe)`) {
		t.Errorf("an unknown schedule: %v", err)
	}
}

func TestPipelineStageRefusals(t *testing.T) {
	cfg, _ := Preset("tiny") // 2 blocks
	for _, tc := range []struct {
		size, rank int
		want       string
	}{
		{3, 0, "3 stages over 2 blocks (valid: 1 to 2)"},
		{0, 0, "0 stages"},
		{2, 2, "stage 2 of 2 (valid: 0 to 1)"},
	} {
		if _, err := cfg.PipelineStage(tc.size, tc.rank); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("PipelineStage(%d, %d) = %v, want an error with %q", tc.size, tc.rank, err, tc.want)
		}
	}
	st, _ := cfg.PipelineStage(2, 1)
	if _, err := st.PipelineStage(2, 0); err == nil {
		t.Error("a stage split again was accepted")
	}
	if whole := st.Whole(); whole != cfg {
		t.Errorf("a stage's whole model is %v, want %v", whole, cfg)
	}
}

// TestBubble: with equal passes on every stage, GPipe and 1F1B idle
// (P-1)/(M+P-1) of a step on every stage (Narayanan et al. 2021, Section
// 2.2, and Huang et al. 2019's bubble); one stage idles not at all; a
// stage twice as slow as the others makes them wait for it.
func TestBubble(t *testing.T) {
	for _, sched := range []PipelineSchedule{OneFOneB, GPipe} {
		for _, tc := range []struct{ p, m int }{{1, 4}, {2, 1}, {2, 4}, {4, 4}, {4, 8}, {8, 3}, {16, 64}} {
			fwd, bwd := make([]float64, tc.p), make([]float64, tc.p)
			for r := range fwd {
				fwd[r], bwd[r] = 1, 2
			}
			want := float64(tc.p-1) / float64(tc.m+tc.p-1)
			for r, got := range sched.Bubble(tc.m, fwd, bwd) {
				if math.Abs(got-want) > 1e-12 {
					t.Errorf("%s p %d m %d stage %d: bubble %.6f, want (P-1)/(M+P-1) = %.6f", sched, tc.p, tc.m, r, got, want)
				}
			}
		}
	}
	// Stage 1 of 3 twice as slow: the step is set by it, (M+2)·2 + ... ;
	// it idles least.
	b := OneFOneB.Bubble(4, []float64{1, 2, 1}, []float64{2, 4, 2})
	if !(b[1] < b[0] && b[1] < b[2]) {
		t.Errorf("a slow middle stage idles %.3f, the others %.3f and %.3f: want it the least idle", b[1], b[0], b[2])
	}
}
