package bench

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"trainmem/model"
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
// as wide as the text at 0.45 em a character (Liberation Serif's mean on
// these labels, measured in the SVG, is 0.42 em), from a fifth of an em
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
				for _, name := range append(formulaNames(), "simulated", "ZeRO paper", "Korthikanti", "params", "grads", "adam_m", "adam_v", "activations", "temporaries", "workspace", "forward (phase)", "backward (phase)", "recompute (phase)", "optimizer (phase)") {
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
		if figures != 5 {
			t.Errorf("%s: %d figures, want 5", c.preset, figures)
		}
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
