package bench

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"gonum.org/v1/plot/plotter"

	"trainmem/model"
	"trainmem/zero"
)

// box is a rectangle of a rendered SVG figure, in its coordinates (y up:
// gonum's SVG draws text under scale(1, -1)).
type box struct {
	x0, y0, x1, y1 float64
	what           string
}

func (a box) overlaps(b box) bool {
	return a.x0 < b.x1 && b.x0 < a.x1 && a.y0 < b.y1 && b.y0 < a.y1
}

var (
	svgText = regexp.MustCompile(`<text x="([-0-9.e]+)" y="([-0-9.e]+)" transform="scale\(1, -1\)"\s*style="[^"]*font-size:([0-9.]+)px"[^>]*>([^<]*)</text>`)
	svgPath = regexp.MustCompile(`<path d="([^"]*)" style="([^"]*)"`)
	svgNum  = regexp.MustCompile(`[-0-9.e]+`)
)

// texts are a figure's unrotated text boxes: from the baseline's start,
// as wide as the text at 0.45 em a character (Liberation Sans's mean on
// these labels: "korthikanti" is 4.56 em wide, 0.41 a character), from a fifth of an em
// below the baseline to 0.7 em above it.
func texts(svg string) []box {
	var out []box
	for _, m := range svgText.FindAllStringSubmatch(svg, -1) {
		x, _ := strconv.ParseFloat(m[1], 64)
		y, _ := strconv.ParseFloat(m[2], 64)
		size, _ := strconv.ParseFloat(m[3], 64)
		y = -y
		s := strings.TrimSpace(m[4])
		if s == "" {
			continue
		}
		w := 0.45 * size * float64(len([]rune(s)))
		out = append(out, box{x, y - 0.2*size, x + w, y + 0.7*size, s})
	}
	return out
}

// marks are a figure's data marks: filled paths (areas, bars, the phases'
// shading) and the vertices of stroked ones (lines), each path's bounding
// box; tiny fills (legend swatches, points) are left out, and white.
func marks(svg string) (fills []box, vertices [][2]float64) {
	for _, m := range svgPath.FindAllStringSubmatch(svg, -1) {
		var xs, ys []float64
		nums := svgNum.FindAllString(m[1], -1)
		for i := 0; i+1 < len(nums); i += 2 {
			x, _ := strconv.ParseFloat(nums[i], 64)
			y, _ := strconv.ParseFloat(nums[i+1], 64)
			xs, ys = append(xs, x), append(ys, y)
		}
		if len(xs) == 0 {
			continue
		}
		style := m[2]
		if strings.Contains(style, "fill:none") {
			if strings.Contains(style, "stroke-dasharray") || strings.Contains(style, "stroke-width:1.5") {
				for i := range xs {
					vertices = append(vertices, [2]float64{xs[i], ys[i]})
				}
			}
			continue
		}
		if strings.Contains(style, "fill:#FFFFFF") || strings.Contains(style, "fill:#000000") {
			continue
		}
		b := box{math.Inf(1), math.Inf(1), math.Inf(-1), math.Inf(-1), style}
		for i := range xs {
			b.x0, b.x1 = math.Min(b.x0, xs[i]), math.Max(b.x1, xs[i])
			b.y0, b.y1 = math.Min(b.y0, ys[i]), math.Max(b.y1, ys[i])
		}
		if (b.x1-b.x0)*(b.y1-b.y0) > 600 {
			fills = append(fills, b)
		}
	}
	return fills, vertices
}

// The report's figures, rendered, read as a reader's eye would (a
// screenshot's geometry, from the SVG the page inlines): no two labels
// collide (before, twelve "backward" phase names ran together in the
// selective panel), and the legends stand clear of the data (before, the
// timeline's legend sat over its areas and the scans' over their lines).
// The captions say what the numbers say: the policy that keeps the least
// is the table's least (before: "full checkpointing keeps the least"
// beside every:2 and sqrt below full).
func TestReportFigures(t *testing.T) {
	for _, c := range []struct {
		preset    string
		b, s, l   int
		wantLeast string
	}{{"tiny", 8, 64, 0, ""}, {"gpt2", 2, 128, 0, "every:2"}} {
		s := setup(t, c.preset, c.b, c.s, model.FP32, model.Adam, "none")
		so := SiteOptions{Ranks: 4}
		so.Setup = checked(t, s)
		site, err := BuildSite(context.Background(), so)
		if err != nil {
			t.Fatal(err)
		}
		figures := 0
		for _, sec := range site.Sections {
			for _, f := range sec.Figures {
				figures++
				what := fmt.Sprintf("%s %s", c.preset, f.ID)
				svg := string(f.SVG)
				ts := texts(svg)
				if len(ts) < 5 {
					t.Fatalf("%s: %d texts read from the SVG", what, len(ts))
				}
				for i := range ts {
					for j := i + 1; j < len(ts); j++ {
						if ts[i].overlaps(ts[j]) {
							t.Errorf("%s: %q and %q collide", what, ts[i].what, ts[j].what)
						}
					}
				}
				legend := map[string]bool{}
				for _, name := range append(formulaNames(), "simulated", "megatron", "deepspeed", "model states, one sum", "params", "grads", "adam_m", "adam_v", "activations", "temporaries", "workspace", "forward (phase)", "backward (phase)", "recompute (phase)", "optimizer (phase)") {
					legend[name] = true
				}
				fills, vertices := marks(svg)
				for _, tb := range ts {
					if !legend[tb.what] {
						continue
					}
					for _, fb := range fills {
						if tb.overlaps(fb) {
							t.Errorf("%s: the legend's %q lies over the data (%v)", what, tb.what, fb)
						}
					}
					for _, v := range vertices {
						if v[0] > tb.x0 && v[0] < tb.x1 && v[1] > tb.y0 && v[1] < tb.y1 {
							t.Errorf("%s: the legend's %q lies over a line", what, tb.what)
							break
						}
					}
				}
				if strings.Contains(svg, "Serif") {
					t.Errorf("%s: serif text on the sans-serif page", what)
				}
				// The peak's dashed line runs through no text (it ran
				// through the peak's label).
				for _, m := range svgPath.FindAllStringSubmatch(svg, -1) {
					if !strings.Contains(m[2], "stroke-dasharray:3") {
						continue
					}
					nums := svgNum.FindAllString(m[1], -1)
					if len(nums) != 4 || nums[0] != nums[2] {
						continue
					}
					x, _ := strconv.ParseFloat(nums[0], 64)
					y0, _ := strconv.ParseFloat(nums[1], 64)
					y1, _ := strconv.ParseFloat(nums[3], 64)
					line := box{x - 0.5, math.Min(y0, y1), x + 0.5, math.Max(y0, y1), "the peak's line"}
					for _, tb := range ts {
						if tb.overlaps(line) {
							t.Errorf("%s: the peak's line runs through %q", what, tb.what)
						}
					}
				}
				if f.ID == "checkpoint-bars" && c.wantLeast != "" && !strings.Contains(f.Caption, c.wantLeast+" keeps the least") {
					t.Errorf("%s: caption %q, want %s keeping the least", what, f.Caption, c.wantLeast)
				}
				if strings.HasSuffix(f.ID, "-scan") && !strings.Contains(f.Caption, "trainmem runs through every simulated point") {
					t.Errorf("%s: caption %q", what, f.Caption)
				}
				if strings.HasSuffix(f.ID, "-scan") && strings.Contains(svg, "e+0") {
					t.Errorf("%s: a tick reads in exponent notation, not bytes", what)
				}
			}
		}
		if figures != 8 {
			t.Errorf("%s: %d figures, want 8 (validate 2, checkpointing 3, the scans 2, the ZeRO streams 1)", c.preset, figures)
		}
	}
}

// The report says what its numbers say, and leads with its answer: what
// sets each policy's peak and how far it falls (the checkpoint section
// spoke of activations only: full checkpointing cut them from 213 to 55 MiB
// while the peak fell 3%), the dominated policy flagged, the ZeRO table's
// gradients in flight beyond the paper (its caption said each stage
// shards more, above a ZeRO-2 row holding more than ZeRO-1's), one name
// a formula in tables and figures alike, Megatron-LM's figures in the
// table, the sequence scan past the scores' crossover (tiny's stopped at
// its context of 64, before it), the presets' span from the table, and
// the axes ending at the data.
func TestReportSays(t *testing.T) {
	build := func(preset string, b, seq int) *Site {
		s := setup(t, preset, b, seq, model.FP32, model.Adam, "none")
		so := SiteOptions{Ranks: 4}
		so.Setup = checked(t, s)
		site, err := BuildSite(context.Background(), so)
		if err != nil {
			t.Fatal(err)
		}
		return site
	}
	section := func(site *Site, id string) Section {
		for _, sec := range site.Sections {
			if sec.ID == id {
				return sec
			}
		}
		t.Fatalf("no section %s", id)
		return Section{}
	}
	figure := func(sec Section, id string) SiteFigure {
		for _, f := range sec.Figures {
			if f.ID == id {
				return f
			}
		}
		t.Fatalf("section %s: no figure %s", sec.ID, id)
		return SiteFigure{}
	}
	gpt2, tiny := build("gpt2", 2, 128), build("tiny", 8, 64)

	// The answer first: a figure before the validate table, every formula
	// and Megatron-LM beside the simulation, in the names the tables use.
	val := section(gpt2, "validate")
	ans := figure(val, "validate-answer")
	if !ans.Lead || val.Figures[0].ID != "validate-answer" {
		t.Error("the validate section does not lead with its answer")
	}
	for _, name := range append(formulaNames(), "megatron", "simulated") {
		if !strings.Contains(string(ans.SVG), ">"+name+"<") || !strings.Contains(ans.Caption, name) && name != "simulated" {
			t.Errorf("the answer has no bar or no word for %s", name)
		}
	}
	if !strings.Contains(ans.Caption, "model states are 1.85 GiB (88%)") {
		t.Errorf("the answer's caption does not say what sets the peak: %s", ans.Caption)
	}
	if !slices.Contains(val.Tables[0].Header, "megatron") {
		t.Errorf("validate's table has no Megatron-LM column: %v", val.Tables[0].Header)
	}
	for _, sec := range gpt2.Sections {
		for _, f := range sec.Figures {
			for _, old := range []string{"ZeRO paper", "Korthikanti<"} {
				if strings.Contains(string(f.SVG), ">"+old) {
					t.Errorf("%s: %q, where the tables say %s", f.ID, old, model.ZeROPaper)
				}
			}
		}
	}

	// Checkpointing: the peak and what it holds, per policy.
	cp := section(gpt2, "checkpoint")
	peaks := figure(cp, "checkpoint-peaks")
	for _, want := range []string{"Under none the peak is 2.11 GiB: model states 1.85 GiB (88%)", "The lowest peak, every:6's, is 1.95 GiB: 163.55 MiB less (−7.6%)", "full (by sqrt)"} {
		if !strings.Contains(peaks.Caption, want) {
			t.Errorf("the peaks' caption has no %q: %s", want, peaks.Caption)
		}
	}
	tab := cp.Tables[0]
	col := slices.Index(tab.Header, "dominated by")
	peakCol := slices.Index(tab.Header, "simulated peak")
	statesCol := slices.Index(tab.Header, "model states at the peak")
	if col < 0 || peakCol < 0 || statesCol < 0 {
		t.Fatalf("checkpoint table header %v", tab.Header)
	}
	for _, row := range tab.Rows {
		if row[0] == "full" && row[col] != "sqrt" {
			t.Errorf("full dominated by %v, want sqrt (a lower peak and fewer activations for the same recompute)", row[col])
		}
		if row[0] == "none" && row[col] != "-" {
			t.Errorf("none dominated by %v", row[col])
		}
		if row[statesCol].(int64) >= row[peakCol].(int64) || row[statesCol].(int64) < row[peakCol].(int64)*8/10 {
			t.Errorf("%v: model states %v at a peak of %v", row[0], row[statesCol], row[peakCol])
		}
	}

	// ZeRO: the bytes beyond the paper, and tiny's ZeRO-2 above ZeRO-1.
	z := section(gpt2, "zero").Tables[0]
	if !strings.Contains(z.Caption, "the bucket in flight: 192.30 MiB beyond the paper") || strings.Contains(z.Caption, "stand above ZeRO-1's") {
		t.Errorf("gpt2's ZeRO caption: %s", z.Caption)
	}
	if zt := section(tiny, "zero").Tables[0]; !strings.Contains(zt.Caption, "so its model states stand above ZeRO-1's (1.26 MiB against 1.15 MiB)") {
		t.Errorf("tiny's ZeRO caption: %s", zt.Caption)
	}

	// The sequence scan goes past tiny's context to where the scores are
	// the larger part, and says so.
	seq := section(tiny, "seq")
	last := seq.Tables[0].Rows[len(seq.Tables[0].Rows)-1][0].(int64)
	x := scoresCrossover(tiny.Setup)
	if x <= 64 || last < int64(2*x) {
		t.Errorf("tiny's sequence scan ends at %d, its crossover at %d: want past twice the crossover", last, x)
	}
	if f := figure(seq, "seq-scan"); !strings.Contains(f.Caption, fmt.Sprintf("the larger part from s = %d on", x)) {
		t.Errorf("the sequence caption: %s", f.Caption)
	}

	// The presets' span, from the table (it said 6B over 8B).
	pr := section(gpt2, "presets")
	if !strings.Contains(pr.Intro, "to llama3-8b (8.03B)") {
		t.Errorf("the presets' intro: %s", pr.Intro)
	}
}

// The timelines' and scans' x axes end at their data: the legends stand
// beside the plots (the timeline's axis ran 22% past its last event, the
// scans' 30% past their last point).
func TestAxesEndAtTheData(t *testing.T) {
	s := setup(t, "tiny", 2, 32, model.FP32, model.Adam, "none")
	tr := &MemoryTrace{}
	if _, err := Validate(context.Background(), nil, runOf(checked(t, s), 2, tr, zero.Setting{})); err != nil {
		t.Fatal(err)
	}
	f, err := timelineFigure([]TimelinePanel{{Title: "t", Trace: tr}})
	if err != nil {
		t.Fatal(err)
	}
	p := f.plots[0][0]
	if last := float64(len(tr.Timeline().Bytes) - 1); p.X.Max != last {
		t.Errorf("the timeline's x axis ends at %v, its last event is %v", p.X.Max, last)
	}
	if f.legends[0][0] == nil || f.legendWidth <= 0 {
		t.Error("the timeline's legend is not beside it")
	}
	sp, _, err := scanPlot("s", "x", []plotter.XYs{{{X: 8, Y: 1}, {X: 64, Y: 8}}, {{X: 8, Y: 1}, {X: 64, Y: 8}}, {{X: 8, Y: 1}, {X: 64, Y: 8}}, {{X: 8, Y: 1}, {X: 64, Y: 8}}})
	if err != nil {
		t.Fatal(err)
	}
	if sp.X.Max > 64*1.1 || sp.X.Min < 8/1.1 {
		t.Errorf("the scan's x axis runs from %v to %v around data from 8 to 64", sp.X.Min, sp.X.Max)
	}
}

// The report's directory holds a whole report or nothing: Write puts a
// report written beside it in place at once; a directory another writer
// filled while the report ran is refused, its files untouched, and this
// report kept whole beside it (two reports a second apart into one
// directory both exited 0, one replacing the other file by file); a link
// to nothing is refused before any work (it failed once the work was done).
func TestSiteWriteWholeOrNothing(t *testing.T) {
	c, err := model.Preset("tiny")
	if err != nil {
		t.Fatal(err)
	}
	site := &Site{Setup: model.Setup{Model: c, Batch: 1, Seq: 8, Ranks: 1, TP: 1, PP: 1},
		Sections: []Section{{ID: "s", Title: "one", Tables: []SiteTable{{ID: "t", Caption: "a table", Header: []string{"policy", "bytes"}, Rows: [][]any{{"none", int64(512)}}}}}}}
	parent := t.TempDir()
	dir := filepath.Join(parent, "out")
	if err := CheckSiteDir(dir); err != nil {
		t.Fatal(err)
	}
	if err := site.Write(dir); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"index.html", "t.csv", "t.json"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
	left, _ := filepath.Glob(filepath.Join(parent, ".trainmem-report-*"))
	if len(left) != 0 {
		t.Errorf("left beside the report: %v", left)
	}

	// Checked empty, then filled by another writer before this one ends.
	other := filepath.Join(parent, "other")
	os.Mkdir(other, 0o755)
	if err := CheckSiteDir(other); err != nil {
		t.Fatal(err)
	}
	mine := filepath.Join(other, "index.html")
	os.WriteFile(mine, []byte("the other report"), 0o644)
	err = site.Write(other)
	if err == nil || !strings.Contains(err.Error(), "wrote into it while this report ran") {
		t.Fatalf("a directory filled meanwhile: %v", err)
	}
	if b, _ := os.ReadFile(mine); string(b) != "the other report" {
		t.Errorf("the other writer's file became %q", b)
	}
	kept, _ := filepath.Glob(filepath.Join(parent, ".trainmem-report-*", "index.html"))
	if len(kept) != 1 || !strings.Contains(err.Error(), filepath.Dir(kept[0])) {
		t.Errorf("this report is not kept whole where the error says (%v): %v", kept, err)
	}

	link := filepath.Join(parent, "dangling")
	os.Symlink(filepath.Join(parent, "nowhere"), link)
	if err := CheckSiteDir(link); err == nil || !strings.Contains(err.Error(), "which is not there") {
		t.Errorf("a link to nothing: %v", err)
	}
}
