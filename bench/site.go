package bench

// trainmem report DIR: one setup's answers on one self-contained page:
// validate, the checkpoint sweep, a batch and a sequence sweep, the ZeRO
// stage table and a scale-up over the presets, every table also as CSV and
// JSON, every figure inline SVG with a caption saying what to look at.

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"html"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"trainmem/cuda"
	"trainmem/cuda/shape"
	"trainmem/model"
	"trainmem/model/files"
	"trainmem/train"
	"trainmem/zero"
)

// Site is a report of one setup over several questions, written as a
// directory (Write).
type Site struct {
	Setup    model.Setup
	Device   string // the measured device, "" when nothing was measured
	Sections []Section
}

// Section is one question: its tables and figures.
type Section struct {
	ID, Title, Intro string
	Tables           []SiteTable
	Figures          []SiteFigure
	Notes            []string
}

// SiteTable is a table of the site, also written as ID.csv and ID.json.
// Cells are strings, int64 (exact bytes) or float64.
type SiteTable struct {
	ID, Caption string
	Header      []string
	Rows        [][]any
}

// SiteFigure is an inline SVG and its caption.
type SiteFigure struct {
	ID, Caption string
	SVG         []byte
	// Lead puts the figure before its section's tables: the answer first,
	// then the explanations.
	Lead bool
}

// SiteOptions say what the site covers.
type SiteOptions struct {
	Options
	// Ranks is the stage table's data-parallel ranks (0: 4).
	Ranks int
	// NewDevice opens the measured device; nil measures nothing.
	NewDevice func() (cuda.Device, error)
}

// BuildSite answers every question of the site for o.Setup (one rank).
func BuildSite(ctx context.Context, o SiteOptions) (*Site, error) {
	if err := o.Setup.Err(); err != nil {
		return nil, err
	}
	s := o.Setup.Setup()
	site := &Site{Setup: s}
	steps := []func() (Section, error){
		func() (Section, error) { return siteValidate(ctx, o, site) },
		func() (Section, error) { return siteCheckpoint(ctx, o) },
		func() (Section, error) { return siteScan(ctx, s, "batch", o) },
		func() (Section, error) { return siteScan(ctx, s, "seq", o) },
		func() (Section, error) { return siteStages(s, o) },
		func() (Section, error) { return sitePresets(s, o) },
	}
	for i, step := range steps {
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		sec, err := step()
		if err != nil {
			return nil, err
		}
		site.Sections = append(site.Sections, sec)
		o.progress("report: %d/%d: %s", i+1, len(steps), sec.Title)
	}
	return site, nil
}

func bytesCell(p *int64) any {
	if p == nil {
		return "-"
	}
	return *p
}

func siteValidate(ctx context.Context, o SiteOptions, site *Site) (Section, error) {
	tr := &MemoryTrace{}
	vo := o.Options
	var where *Where
	if o.NewDevice != nil {
		where = &Where{New: o.NewDevice, Traces: RankTraces{0: tr}}
	} else {
		vo.Trace = tr
	}
	r, err := Validate(ctx, where, vo)
	if err != nil {
		return Section{}, err
	}
	site.Device = r.Device
	x, err := estimatorsOf(r.Setup, model.Cluster{})
	if err != nil {
		return Section{}, err
	}
	t := SiteTable{ID: "validate", Caption: "Each memory category at its own peak in the last step, in requested bytes: the formulas, Megatron-LM's and DeepSpeed's estimators (their figures stand in the rows they count: model states, activations, their total), the simulation (the real schedule on a shape-only device) and the measured run. Simulated equals measured byte for byte in every category the allocator tags; the formulas' gaps are explained below.",
		Header: []string{"category"}}
	for _, f := range r.Formulas {
		t.Header = append(t.Header, f.String())
	}
	// An estimator's column where it has an estimate of the setup
	// (DeepSpeed's counts ZeRO-2 and 3 only).
	if x.Megatron != nil {
		t.Header = append(t.Header, "megatron")
	}
	if x.DeepSpeed != nil {
		t.Header = append(t.Header, "deepspeed")
	}
	t.Header = append(t.Header, "simulated", "measured")
	for _, row := range r.Rows {
		cells := []any{row.Category}
		for _, f := range r.Formulas {
			cells = append(cells, bytesCell(row.Estimate[f]))
		}
		if x.Megatron != nil {
			cells = append(cells, bytesCell(x.megatronCell(row.Category)))
		}
		if x.DeepSpeed != nil {
			cells = append(cells, bytesCell(x.deepSpeedCell(row.Category)))
		}
		cells = append(cells, bytesCell(row.Simulated), bytesCell(row.Measured))
		t.Rows = append(t.Rows, cells)
	}
	sec := Section{ID: "validate", Title: "Where the memory goes: formulas, simulation, measurement",
		Intro: "trainmem validate for this setup, in bytes.", Tables: []SiteTable{t}, Notes: r.Explanations}
	answer, caption, err := answerFigure(r, x)
	if err != nil {
		return Section{}, err
	}
	f, err := timelineFigure([]TimelinePanel{{Title: "the last step, " + tr.Device, Trace: tr}})
	if err != nil {
		return Section{}, err
	}
	for _, fig := range []struct {
		id, caption string
		f           figure
		lead        bool
	}{{"validate-answer", caption, answer, true}, {"validate-timeline", timelineCaption(tr.Timeline()), f, false}} {
		svg, err := renderSVG(fig.f)
		if err != nil {
			return Section{}, err
		}
		sec.Figures = append(sec.Figures, SiteFigure{ID: fig.id, SVG: svg, Caption: fig.caption, Lead: fig.lead})
	}
	return sec, nil
}

// megatronCell is Megatron-LM's figure for a validate row: its weights and
// optimizer for the model states, its activations, its total for the
// peak; nil for the rows it has no figure for.
func (x Estimators) megatronCell(row string) *int64 {
	m := x.Megatron
	switch row {
	case RowModelStates:
		return ptr(m.WeightsAndOptimizer)
	case cuda.Activations.String():
		return ptr(m.Activations)
	case RowTotalPeak:
		return ptr(m.Total())
	}
	return nil
}

// deepSpeedCell is DeepSpeed's GPU figure for the setup's offload, in the
// model states' row (it counts nothing else); nil elsewhere.
func (x Estimators) deepSpeedCell(row string) *int64 {
	if row != RowModelStates {
		return nil
	}
	return ptr(x.DeepSpeed.Row(x.Offload).GPU)
}

// answerFigure is the report's first figure, its answer: where the memory
// went at the step's peak, one bar a source, each a stack of categories
// in the timelines' colours: every formula's model states and activations,
// Megatron-LM's and DeepSpeed's figures, and the simulated (and measured)
// peak as it held them; each bar labelled with its total. Its caption
// says, from the numbers, what sets the peak and how far each source is
// from the simulation.
func answerFigure(r *ValidateReport, x Estimators) (figure, string, error) {
	type source struct {
		name  string
		parts map[string]int64 // by category name, or "model states"
	}
	var sources []source
	byCat := func(get func(Row) *int64) map[string]int64 {
		m := map[string]int64{}
		for _, row := range r.Rows {
			if _, err := cuda.ParseCategory(row.Category); err == nil {
				if v := get(row); v != nil && *v > 0 {
					m[row.Category] = *v
				}
			}
		}
		return m
	}
	atPeak := func(st cuda.Stats) map[string]int64 {
		m := map[string]int64{}
		for _, c := range cuda.Categories() {
			if st.AtPeak[c] > 0 {
				m[c.String()] = st.AtPeak[c]
			}
		}
		return m
	}
	if r.MeasuredStats != nil {
		sources = append(sources, source{"measured", atPeak(*r.MeasuredStats)})
	}
	sources = append(sources, source{"simulated", atPeak(r.SimulatedStats)})
	for _, f := range r.Formulas {
		sources = append(sources, source{f.String(), byCat(func(row Row) *int64 { return row.Estimate[f] })})
	}
	if m := x.Megatron; m != nil {
		sources = append(sources, source{"megatron", map[string]int64{"model states": m.WeightsAndOptimizer, cuda.Activations.String(): m.Activations}})
	}
	if d := x.DeepSpeed; d != nil {
		sources = append(sources, source{"deepspeed", map[string]int64{"model states": d.Row(x.Offload).GPU}})
	}
	totals := make([]int64, len(sources))
	var top int64
	for i, src := range sources {
		for _, v := range src.parts {
			totals[i] += v
		}
		top = max(top, totals[i])
	}
	unit, uname := binaryUnit(top)
	// The bars from the top down: gonum's y axis counts up, so the list is
	// drawn reversed.
	n := len(sources)
	segs := []stackSegment{{name: "model states, one sum", color: color.RGBA{0x9a, 0x9a, 0x9a, 0xff}, values: make([]float64, n)}}
	for k, c := range cuda.Categories() {
		segs = append(segs, stackSegment{name: c.String(), color: categoryColors[k%len(categoryColors)], values: make([]float64, n)})
	}
	var names []string
	for i := range sources {
		src := sources[n-1-i]
		names = append(names, src.name)
		for k := range segs {
			key := segs[k].name
			if k == 0 {
				key = "model states"
			}
			segs[k].values[i] = float64(src.parts[key]) / float64(unit)
		}
	}
	p := plot.New()
	p.Title.Text = "where the memory went at the step's peak"
	p.X.Label.Text = uname
	leg := sideLegend()
	if err := addStacks(p, leg, segs, vg.Points(16), true); err != nil {
		return figure{}, "", err
	}
	var lab plotter.XYLabels
	for i := range sources {
		lab.XYs = append(lab.XYs, plotter.XY{X: float64(totals[n-1-i])/float64(unit) + float64(top)/float64(unit)*0.01, Y: float64(i)})
		lab.Labels = append(lab.Labels, model.GiB(totals[n-1-i]))
	}
	lb, err := plotter.NewLabels(lab)
	if err != nil {
		return figure{}, "", err
	}
	for i := range lb.TextStyle {
		lb.TextStyle[i].YAlign = draw.YCenter
		lb.TextStyle[i].Font.Size = vg.Points(9)
	}
	p.Add(lb)
	p.NominalY(names...)
	p.X.Min, p.X.Max = 0, float64(top)/float64(unit)*1.14 // the totals' labels
	tiles := draw.Tiles{Rows: 1, Cols: 1, PadTop: vg.Inch / 8, PadBottom: vg.Inch / 8, PadLeft: vg.Inch / 8, PadRight: vg.Inch / 8}
	fig := figure{plots: [][]*plot.Plot{{p}}, tiles: tiles, width: 9 * vg.Inch, height: vg.Length(1.2+0.32*float64(n)) * vg.Inch,
		legends: [][]*plot.Legend{{leg}}, legendWidth: 2 * vg.Inch}

	// The caption: the peak's makeup, then each source against the
	// simulation.
	simIdx := 0
	if r.MeasuredStats != nil {
		simIdx = 1
	}
	sim := sources[simIdx]
	peak := totals[simIdx]
	states := modelStates(r.SimulatedStats.AtPeak)
	words := fmt.Sprintf("The answer: the step's peak is %s (simulated", model.GiB(peak))
	if r.MeasuredStats != nil {
		words += fmt.Sprintf("; measured %s", model.GiB(totals[0]))
	}
	words += fmt.Sprintf("), of which the model states are %s (%.0f%%) and the activations %s. ", model.GiB(states), 100*float64(states)/float64(peak),
		model.GiB(sim.parts[cuda.Activations.String()]))
	var gaps []string
	for i, src := range sources {
		if i <= simIdx {
			continue
		}
		gaps = append(gaps, fmt.Sprintf("%s %s (%s)", src.name, model.GiB(totals[i]), pct(float64(totals[i])/float64(peak)-1)))
	}
	words += "Each formula and estimator against it: " + strings.Join(gaps, ", ") + ". The formulas count model states and activations only; the simulation also holds temporaries, workspace and the allocator's rounding, as a card does. The table below has every category's bytes, and the notes after it explain every gap."
	return fig, words, nil
}

func siteCheckpoint(ctx context.Context, o SiteOptions) (Section, error) {
	so := o.Options
	so.Timelines = true
	so.Steps = 0 // the sweep's own default
	r, err := Sweep(ctx, o.NewDevice, so)
	if err != nil {
		return Section{}, err
	}
	t := SiteTable{ID: "checkpoint", Caption: checkpointTableCaption,
		Header: []string{"policy", model.ZeROPaper.String(), model.Korthikanti.String(), "simulated", "measured", "simulated peak", "peak vs none", "model states at the peak", "activations at the peak", "other at the peak", "recompute FLOP fraction", "step ms", "overhead", "dominated by"}}
	none := r.Rows[0]
	for _, row := range r.Rows {
		ms, over := any("-"), any("-")
		if row.StepMs != nil {
			ms = *row.StepMs
		}
		if row.Overhead != nil {
			over = *row.Overhead
		}
		states, acts, other := peakShare(row)
		dom := any("-")
		if row.DominatedBy != "" {
			dom = row.DominatedBy
		}
		t.Rows = append(t.Rows, []any{row.Policy, row.Estimate[model.ZeROPaper], row.Estimate[model.Korthikanti], row.Simulated, bytesCell(row.Measured),
			row.SimulatedPeak, pct(float64(row.SimulatedPeak)/float64(none.SimulatedPeak) - 1), states, acts, other,
			row.RecomputeFraction, ms, over, dom})
	}
	sec := Section{ID: "checkpoint", Title: "The checkpointing trade-off", Intro: "trainmem validate --sweep checkpoint: what each policy keeps, what its peak holds, and what it recomputes.", Tables: []SiteTable{t}}
	peaks, err := r.peaksFigure()
	if err != nil {
		return Section{}, err
	}
	bars, err := r.figure()
	if err != nil {
		return Section{}, err
	}
	tl, err := timelineFigure(r.Timelines)
	if err != nil {
		return Section{}, err
	}
	for _, f := range []struct {
		id, caption string
		fig         figure
	}{
		{"checkpoint-peaks", checkpointPeaksCaption(r), peaks},
		{"checkpoint-bars", checkpointCaption(r), bars},
		{"checkpoint-timelines", "Each policy's simulated step on one byte axis: the ramp of no checkpointing, which holds every activation to the end of the forward pass, against the sawtooth of recomputation, which rebuilds one segment at a time during the backward pass; each panel's title says what its peak holds.", tl},
	} {
		svg, err := renderSVG(f.fig)
		if err != nil {
			return Section{}, err
		}
		sec.Figures = append(sec.Figures, SiteFigure{ID: f.id, Caption: f.caption, SVG: svg})
	}
	return sec, nil
}

// scanValues are the batch sizes or sequence lengths a scan simulates:
// powers of two up to 8 times the setup's (batch), or to the context and,
// with naive attention, on to twice the sequence where the scores' s²
// term becomes the larger part (seq: scoresCrossover), so that the scan
// shows it take over (tiny's context of 64 stopped the scan before it, on
// a slope of 1.13).
func scanValues(s model.Setup, what string, crossover int) []int {
	var out []int
	limit := 8 * s.Batch
	if what == "seq" {
		limit = max(s.Model.Context, 2*crossover)
	}
	for v := 1; v <= limit; v *= 2 {
		if what == "seq" && v < 8 {
			continue
		}
		out = append(out, v)
	}
	return out
}

// scoresCrossover is the shortest power-of-two sequence at which the
// attention scores (the a·s²·b tensors) are at least half of the setup's
// activations by trainmem's exact formula, which the simulation equals:
// in Korthikanti et al.'s 16-bit count that is s ≥ 34h/(5a), but the
// share depends on the precision and the kept tensors, so it is counted,
// not assumed. 0 when there is none by 2^17 (flash attention keeps no
// scores) or no exact formula for the setup.
func scoresCrossover(s model.Setup) int {
	if s.Model.Attention != model.AttentionNaive {
		return 0
	}
	for v := 8; v <= 1<<17; v *= 2 {
		if share, ok := scoresShare(s, v); !ok {
			return 0
		} else if share >= 0.5 {
			return v
		}
	}
	return 0
}

// scoresShare is the scores' share of the exact formula's activations at
// sequence seq (the positions' table lengthened to it when need be).
func scoresShare(s model.Setup, seq int) (float64, bool) {
	u := s
	u.Seq, u.Model.Context = seq, max(s.Model.Context, seq)
	e, err := u.EstimateBy(model.Exact)
	if err != nil {
		return 0, false
	}
	a, ok := e.Activation(model.Exact)
	if !ok || a.Total <= 0 {
		return 0, false
	}
	k, _ := a.ByKind()
	return float64(k[model.Scores].Bytes) / float64(a.Total), true
}

// siteScan simulates the setup over batch sizes or sequence lengths,
// each formula's activations beside the simulation's.
func siteScan(ctx context.Context, s model.Setup, what string, o SiteOptions) (Section, error) {
	name := map[string]string{"batch": "micro-batch b", "seq": "sequence s"}[what]
	t := SiteTable{ID: what, Header: []string{name}}
	for _, f := range model.Formulas() {
		t.Header = append(t.Header, f.String())
	}
	t.Header = append(t.Header, "simulated", "measured")
	series := make([]plotter.XYs, len(model.Formulas())+1)
	crossover := 0 // the scores' crossover, for a sequence scan
	if what == "seq" {
		crossover = scoresCrossover(s)
	}
	for _, v := range scanValues(s, what, crossover) {
		u := s
		if what == "batch" {
			u.Batch = v
		} else {
			u.Seq = v
			// Past the context, a longer table of learned positions: the
			// activations do not depend on it.
			u.Model.Context = max(u.Model.Context, v)
		}
		po := o
		if u.Model.Context > s.Model.Context {
			po.NewDevice = nil // simulated only past the model's own context
		}
		e, st, measured, err := scanPoint(ctx, u, po)
		if err != nil {
			return Section{}, fmt.Errorf("bench: %s %d: %w", what, v, err)
		}
		row := []any{int64(v)}
		for i, f := range model.Formulas() {
			b := e.ActivationBytes(f)
			row = append(row, b)
			series[i] = append(series[i], plotter.XY{X: float64(v), Y: float64(b)})
		}
		sim := st.CategoryRequested[cuda.Activations].Peak
		row = append(row, sim, bytesCell(measured))
		series[len(series)-1] = append(series[len(series)-1], plotter.XY{X: float64(v), Y: float64(sim)})
		t.Rows = append(t.Rows, row)
	}
	sec := Section{ID: what, Tables: []SiteTable{t}}
	if what == "batch" {
		sec.Title = "Activations against the micro-batch"
		t.Caption = "Activation bytes at their peak for each micro-batch size: every formula, the simulation and the measurement are linear in b, one micro-batch's activations times b; measured equals simulated to the byte."
		sec.Intro = "The setup simulated (and, when measuring, measured) at each micro-batch size."
	} else {
		sec.Title = "Activations against the sequence length"
		t.Caption = "Activation bytes at their peak for each sequence length: linear in s but for the attention scores' term, which grows as s² (Korthikanti et al.'s 5·a·s/h per layer value; the ZeRO paper's 12·h·b·s·L has none and falls behind at long sequences); measured equals simulated to the byte."
		sec.Intro = "The setup simulated (and, when measuring, measured) at each sequence length up to the context."
		if x := crossover; x > 0 {
			sec.Intro = fmt.Sprintf("The setup simulated (and, when measuring, measured) at each sequence length up to the context (%d) and on to twice s = %d, the first power of two at which the attention scores (a·s²·b values a layer) are the larger part of the activations by trainmem's exact formula; past the context the table of learned positions is lengthened, which the activations do not depend on, and nothing is measured.", s.Model.Context, x)
		}
	}
	sec.Tables[0] = t
	p, leg, err := scanPlot(sec.Title, name, series)
	if err != nil {
		return Section{}, err
	}
	svg, err := renderSVG(figure{plots: [][]*plot.Plot{{p}}, tiles: draw.Tiles{Rows: 1, Cols: 1, PadRight: vg.Inch / 8}, width: 8 * vg.Inch, height: 4 * vg.Inch,
		legends: [][]*plot.Legend{{leg}}, legendWidth: 1.4 * vg.Inch})
	if err != nil {
		return Section{}, err
	}
	sec.Figures = []SiteFigure{{ID: what + "-scan", SVG: svg, Caption: scanCaption(what, series, s, crossover)}}
	return sec, nil
}

// scanPlot draws a scan on log-log axes: each formula a line (the
// implementation-exact one solid, the published ones dashed) and the
// simulation as points on top, so that a formula equal to it runs through
// them instead of hiding under a line of its own; the x ticks at the
// sample points, the y ticks in bytes with binary units. Its legend is
// drawn beside it, and the axes end just past the data.
func scanPlot(title, xname string, series []plotter.XYs) (*plot.Plot, *plot.Legend, error) {
	p := plot.New()
	leg := sideLegend()
	p.Title.Text = title
	p.X.Label.Text = xname
	p.Y.Label.Text = "activation bytes (log)"
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	var xs []float64
	lo, hi := math.Inf(1), 0.0
	for _, xy := range series {
		for _, pt := range xy {
			if pt.Y > 0 {
				lo, hi = math.Min(lo, pt.Y), math.Max(hi, pt.Y)
			}
		}
	}
	for _, pt := range series[len(series)-1] {
		xs = append(xs, pt.X)
	}
	p.X.Tick.Marker = pointTicks(xs)
	p.Y.Tick.Marker = byteLogTicks{}
	names := append(formulaNames(), "simulated")
	for i, xy := range series {
		c := palette[i%len(palette)]
		if i == len(series)-1 { // the simulation: points on top
			pts, err := plotter.NewScatter(xy)
			if err != nil {
				return nil, nil, err
			}
			pts.Color, pts.Radius, pts.Shape = color.Black, vg.Points(3.5), draw.CircleGlyph{}
			p.Add(pts)
			leg.Add(names[i], pts)
			continue
		}
		l, err := plotter.NewLine(xy)
		if err != nil {
			return nil, nil, err
		}
		l.Color, l.Width = c, vg.Points(1.5)
		if names[i] != model.Exact.String() {
			l.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
		}
		p.Add(l)
		leg.Add(names[i], l)
	}
	// The axes last (adding a plotter widens them to its data): a point's
	// radius of room at the ends of a log axis.
	if lo <= hi {
		p.Y.Min, p.Y.Max = lo/1.15, hi*1.15
	}
	if n := len(xs); n > 0 {
		p.X.Min, p.X.Max = xs[0]/1.08, xs[n-1]*1.08
	}
	return p, leg, nil
}

// pointTicks marks an axis at its sample points, labelled.
type pointTicks []float64

func (t pointTicks) Ticks(min, max float64) []plot.Tick {
	var out []plot.Tick
	for _, v := range t {
		if v >= min && v <= max {
			out = append(out, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', -1, 64)})
		}
	}
	return out
}

// byteLogTicks marks a log axis of bytes at powers of two, labelled in
// binary units ("16 MiB"), every second or fourth power when the axis
// spans many.
type byteLogTicks struct{}

func (byteLogTicks) Ticks(lo, hi float64) []plot.Tick {
	if !(lo > 0) || !(hi > lo) {
		return nil
	}
	e0, e1 := max(int(math.Ceil(math.Log2(lo))), 0), int(math.Floor(math.Log2(hi)))
	step := 1
	for (e1-e0)/step > 7 {
		step *= 2
	}
	var out []plot.Tick
	for e := e0; e <= e1; e++ {
		t := plot.Tick{Value: math.Exp2(float64(e))}
		if (e-e0)%step == 0 {
			unit, name := binaryUnit(int64(t.Value))
			t.Label = fmt.Sprintf("%d %s", int64(t.Value)/unit, name)
		}
		out = append(out, t)
	}
	return out
}

// scanCaption says what the scan shows, from its numbers: which formula
// meets the simulated points (equal to the byte, or the largest relative
// gap), and how the simulation grows from the first point to the last
// (its slope on the log-log axes: 1 is linear, 2 quadratic), and for a
// sequence scan of s's setup the scores' share of the activations at its
// ends (trainmem's exact formula, which the simulation equals) against
// their crossover (scoresCrossover; 0 for none).
func scanCaption(what string, series []plotter.XYs, s model.Setup, crossover int) string {
	sim := series[len(series)-1]
	var parts []string
	for i, f := range formulaNames() {
		worst := 0.0
		for j, pt := range series[i] {
			if y := sim[j].Y; y > 0 {
				worst = math.Max(worst, math.Abs(pt.Y-y)/y)
			}
		}
		if worst == 0 {
			parts = append(parts, f+" runs through every simulated point (equal to the byte)")
		} else {
			parts = append(parts, fmt.Sprintf("%s is off by up to %.0f%%", f, 100*worst))
		}
	}
	growth := ""
	if n := len(sim); n >= 2 && sim[0].Y > 0 && sim[n-2].Y > 0 && sim[n-1].Y > 0 {
		slope := func(a, b plotter.XY) float64 { return math.Log(b.Y/a.Y) / math.Log(b.X/a.X) }
		growth = fmt.Sprintf("; the simulated bytes grow with slope %.2f from %s %g to %g", slope(sim[0], sim[n-1]), what, sim[0].X, sim[n-1].X)
		growth += fmt.Sprintf(", %.2f over the last doubling", slope(sim[n-2], sim[n-1]))
		if what == "seq" {
			first, _ := scoresShare(s, int(sim[0].X))
			last, _ := scoresShare(s, int(sim[n-1].X))
			switch x := crossover; {
			case x == 0:
			case sim[n-1].X >= float64(x):
				growth += fmt.Sprintf(": the attention scores' s² term, %.0f%% of the activations at s = %g, is %.0f%% at s = %g, the larger part from s = %d on", 100*first, sim[0].X, 100*last, sim[n-1].X, x)
			default:
				growth += fmt.Sprintf(": the attention scores' s² term is %.0f%% of the activations at s = %g, still the smaller part (the larger from s = %d)", 100*last, sim[n-1].X, x)
			}
		}
	}
	return "Both axes logarithmic (a slope of 1 is linear growth): " + strings.Join(parts, ", ") + growth + "."
}

// timelineCaption says where a step's peak falls and what it holds, from
// its timeline.
func timelineCaption(tl Timeline) string {
	where := "before the step's first event"
	if tl.Peak > 0 && tl.Peak <= len(tl.Phases) {
		where = fmt.Sprintf("in the %s phase, at event %d of %d", tl.Phases[tl.Peak-1], tl.Peak, len(tl.Phases))
	}
	return fmt.Sprintf("The step over its allocator events, stacked by category, the phases shaded: the peak falls %s and holds %s.", where, strings.TrimPrefix(peakLabel(tl), "peak "))
}

// checkpointCaption says what the sweep's bars show, from its rows: which
// policy keeps the least activation memory and which recomputes the most.
func checkpointCaption(r *SweepReport) string {
	if len(r.Rows) == 0 {
		return ""
	}
	act := func(x SweepRow) int64 {
		if x.Measured != nil {
			return *x.Measured
		}
		return x.Simulated
	}
	least, costliest := r.Rows[0], r.Rows[0]
	for _, row := range r.Rows[1:] {
		if act(row) < act(least) {
			least = row
		}
		if row.RecomputeFraction > costliest.RecomputeFraction {
			costliest = row
		}
	}
	what := "simulated"
	if least.Measured != nil {
		what = "measured"
	}
	c := fmt.Sprintf("Activation memory per policy by each formula and as %s (left)", what)
	if r.Device != "" {
		c += ", and step time against what the recompute FLOPs predict (right)"
	}
	c += fmt.Sprintf(": %s keeps the least (%s %s)", least.Policy, model.GiB(act(least)), what)
	if costliest.RecomputeFraction > 0 {
		var same []string
		for _, row := range r.Rows {
			if row.RecomputeFraction == costliest.RecomputeFraction {
				same = append(same, row.Policy)
			}
		}
		c += fmt.Sprintf("; %s recompute the most, %.1f%% more FLOPs a step", strings.Join(same, ", "), 100*costliest.RecomputeFraction)
		if len(same) == 1 {
			c = strings.Replace(c, " recompute the most", " recomputes the most", 1)
		}
	}
	return c + "."
}

// peakShare is what a row's peak holds, in three parts: the model states,
// the activations and the rest (temporaries, workspace).
func peakShare(row SweepRow) (states, acts, other int64) {
	for c, v := range row.AtPeak {
		switch {
		case c.ModelState():
			states += v
		case c == cuda.Activations:
			acts += v
		default:
			other += v
		}
	}
	return
}

// checkpointPeaksCaption says, from the sweep's numbers, what sets the
// peak and how far the policies move it: the peak itself, not the
// activations alone (captions of activations only made checkpointing look
// far more useful than it is when the model states set the peak).
func checkpointPeaksCaption(r *SweepReport) string {
	if len(r.Rows) == 0 {
		return ""
	}
	none, lowest := r.Rows[0], r.Rows[0]
	for _, row := range r.Rows[1:] {
		if row.SimulatedPeak < lowest.SimulatedPeak {
			lowest = row
		}
	}
	states, acts, other := peakShare(none)
	c := fmt.Sprintf("Each policy's simulated step peak, stacked by what it holds at that moment. Under %s the peak is %s: model states %s (%.0f%%), activations %s (%.0f%%), the rest %s.",
		none.Policy, model.GiB(none.SimulatedPeak), model.GiB(states), 100*float64(states)/float64(none.SimulatedPeak),
		model.GiB(acts), 100*float64(acts)/float64(none.SimulatedPeak), model.GiB(other))
	if lowest.Policy != none.Policy {
		ls, la, _ := peakShare(lowest)
		c += fmt.Sprintf(" The lowest peak, %s's, is %s: %s less (%s), while its activations at the peak fall from %s to %s; the model states (%s) stay, so no policy can take the peak below them.",
			lowest.Policy, model.GiB(lowest.SimulatedPeak), model.GiB(none.SimulatedPeak-lowest.SimulatedPeak),
			pct(float64(lowest.SimulatedPeak)/float64(none.SimulatedPeak)-1), model.GiB(acts), model.GiB(la), model.GiB(ls))
	}
	var dom []string
	for _, row := range r.Rows {
		if row.DominatedBy != "" {
			dom = append(dom, row.Policy+" (by "+row.DominatedBy+")")
		}
	}
	if len(dom) > 0 {
		c += " Dominated, another policy reaching a peak no higher with no more activations and no more recompute: " + strings.Join(dom, ", ") + "."
	}
	return c
}

// checkpointTableCaption says what the sweep's table holds.
const checkpointTableCaption = "Every checkpoint policy: its activations at their peak by each formula, simulated and measured; the step's peak (simulated; the measured peak equals it) and what it holds at that moment; the recompute FLOPs the policy adds (Korthikanti et al. 2022, Appendix A) and, when measured, its step time. A policy is dominated when another reaches a peak no higher, keeps no more activations and recomputes no more."

// scanPoint is u's estimate, its simulation's statistics and, when the
// site measures, its measured activation peak (a fresh device, validate's
// measured run); nil otherwise.
func scanPoint(ctx context.Context, u model.Setup, o SiteOptions) (model.Estimate, cuda.Stats, *int64, error) {
	if o.NewDevice == nil {
		e, st, err := estimateAndSimulate(u, o.simSteps())
		return e, st, nil, err
	}
	uc, err := u.Check()
	if err != nil {
		return model.Estimate{}, cuda.Stats{}, nil, err
	}
	vo := o.Options
	vo.Setup, vo.Steps, vo.Progress = uc, o.simSteps(), nil
	r, err := Validate(ctx, &Where{New: o.NewDevice}, vo)
	if err != nil {
		return model.Estimate{}, cuda.Stats{}, nil, err
	}
	m := r.MeasuredStats.CategoryRequested[cuda.Activations].Peak
	return r.Estimate, r.SimulatedStats, &m, nil
}

// estimateAndSimulate is u's estimate and its simulation's statistics.
func estimateAndSimulate(us model.Setup, steps int) (model.Estimate, cuda.Stats, error) {
	u, err := us.Check()
	if err != nil {
		return model.Estimate{}, cuda.Stats{}, err
	}
	e, err := u.Estimate()
	if err != nil {
		return e, cuda.Stats{}, err
	}
	dev := shape.New(0)
	defer dev.Close()
	_, st, err := train.Simulate(dev, u, steps, nil)
	return e, st, err
}

func formulaNames() []string {
	var out []string
	for _, f := range model.Formulas() {
		out = append(out, f.String())
	}
	return out
}

func (o SiteOptions) simSteps() int {
	if o.Steps > 0 {
		return o.Steps
	}
	return 2
}

func siteStages(s model.Setup, o SiteOptions) (Section, error) {
	n := o.Ranks
	if n <= 0 {
		n = 4
	}
	u := s
	u.Ranks = n
	uc, err := u.Check()
	if err != nil {
		return Section{}, err
	}
	// On the default card over its network (a DGX of its generation), so
	// that each stage's step comes replayed in time too.
	g, ok := cuda.GPUByKey(cuda.DefaultGPU)
	if !ok {
		return Section{}, fmt.Errorf("bench: no card %s", cuda.DefaultGPU)
	}
	nw := zero.DefaultNetwork(g.Key)
	so := o.Options
	so.Setup, so.Steps, so.Setting = uc, o.simSteps(), zero.Setting{Network: &nw}
	r, err := SweepStages(onCard(g.Roofline), so)
	if err != nil {
		return Section{}, err
	}
	t := SiteTable{ID: "zero", Caption: stagesCaption(r, n),
		Header: []string{"setting", "model states", "zero_paper model states", "beyond the paper", "activations", "gathered", "comm", "peak allocated", "peak reserved", "sent a step", "zero_paper ring bytes"}}
	for _, row := range r.Rows {
		beyond := any("-")
		if row.PaperStates != nil {
			beyond = row.ModelStates - *row.PaperStates
		}
		t.Rows = append(t.Rows, []any{row.Setting, row.ModelStates, bytesCell(row.PaperStates), beyond, row.Peaks[cuda.Activations], row.Peaks[cuda.Gathered], row.Peaks[cuda.Comm],
			row.PeakAllocated, row.PeakReserved, row.SentBytes, bytesCell(row.PaperRingBytes)})
	}
	sec := Section{ID: "zero", Title: fmt.Sprintf("ZeRO stages over %d ranks", n), Intro: fmt.Sprintf("trainmem simulate --ranks %d --sweep zero.", n), Tables: []SiteTable{t}}
	fig, caption, err := stageStreams(r, n, g, nw)
	if err != nil {
		return Section{}, err
	}
	svg, err := renderSVG(fig)
	if err != nil {
		return Section{}, err
	}
	sec.Figures = append(sec.Figures, SiteFigure{ID: "zero-streams", Caption: caption, SVG: svg})
	return sec, nil
}

// stageStreams draws the ZeRO stages' rank 0 steps of the sweep r over n
// ranks, replayed in time on card g over network nw, with a caption from
// their numbers: what each stage's collectives cost and how much of it the
// kernels hide.
func stageStreams(r *StagesReport, n int, g cuda.GPUSpec, nw zero.Network) (figure, string, error) {
	var rows []streamRow
	var parts []string
	for _, row := range r.Rows {
		if row.Setting == (zero.Setting{PS: true}).String() {
			continue // the parameter server is no ZeRO stage
		}
		t := row.Timing
		if t == nil {
			return figure{}, "", fmt.Errorf("bench: %s over %d ranks: no replayed step", row.Setting, n)
		}
		rows = append(rows, streamRow{row.Setting, t})
		parts = append(parts, fmt.Sprintf("%s %s (collectives holding the kernels %s, beside them %s)", row.Setting, durText(t.Step), durText(t.Comm), durText(t.CommStream)))
	}
	fig, err := streamsFigure(fmt.Sprintf("rank 0's step over %d ranks on %s, %s", n, g.Name, nw.Name), rows)
	if err != nil {
		return figure{}, "", err
	}
	caption := fmt.Sprintf("Rank 0's step in time at each ZeRO stage over %d ranks, simulated on %s (its kernel model) over %s, each collective costed as NCCL runs it: the compute stream (grey, red where a collective holds the kernels, yellow where the rank waits, for the other ranks or for an overlapped collective to end) and the communication stream (blue: DDP's and ZeRO-2's bucket reductions during the backward pass, ZeRO-3's prefetched gathers), the time ZeRO trades for its memory. %s.",
		n, g.Name, nw.String(), strings.Join(parts, "; "))
	return fig, caption, nil
}

// durText is a duration in ms to three figures.
func durText(d time.Duration) string { return msText(ms(d)) }

// stagesCaption says what the stage table shows, from its numbers: what
// each stage shards, and why the simulated model states of ZeRO-2 and 3
// stand above the paper's (the gradients in flight, which the paper does
// not count), down to ZeRO-2 holding more than ZeRO-1 when they outweigh
// what it shards.
func stagesCaption(r *StagesReport, n int) string {
	rows := map[string]StageRow{}
	for _, row := range r.Rows {
		rows[row.Setting] = row
	}
	z1, z2, z3 := rows[zero.Setting{Stage: 1}.String()], rows[zero.Setting{Stage: 2}.String()], rows[zero.Setting{Stage: 3}.String()]
	beyond := func(row StageRow) int64 {
		if row.PaperStates == nil {
			return 0
		}
		return row.ModelStates - *row.PaperStates
	}
	c := fmt.Sprintf("Every data-parallel setting over %d ranks, simulated: the largest rank's model states beside the ZeRO paper's (Rajbhandari et al. 2020, Table 1: ZeRO-1 shards the optimizer states, ZeRO-2 the gradients too, ZeRO-3 the parameters too), its activations, gathered weights and staging, its peak, and the bytes it sends a step beside the paper's ring volume.", n)
	c += fmt.Sprintf(" The paper counts a rank's 1/%d share of each sharded state and nothing in flight; a real schedule holds more. ZeRO-2 reduce-scatters the gradients a bucket at a time, a bucket being whole gradients (a tensor larger than the bucket, such as a tied embedding, goes alone), so beside its shard it holds the bucket in flight: %s beyond the paper here.", n, model.GiB(beyond(z2)))
	c += fmt.Sprintf(" ZeRO-3 holds a unit's full gradients until their reduce-scatter (%s beyond the paper) and gathers one unit's weights at a time (the gathered column, %s).", model.GiB(beyond(z3)), model.GiB(z3.Peaks[cuda.Gathered]))
	if z1.PaperStates != nil && z2.PaperStates != nil && z2.ModelStates > z1.ModelStates {
		c += fmt.Sprintf(" On this model the gradients in flight (%s) outweigh the %d/%d of the gradients ZeRO-2 shards away (%s), so its model states stand above ZeRO-1's (%s against %s); its peak is %s against ZeRO-1's %s.",
			model.GiB(beyond(z2)), n-1, n, model.GiB(*z1.PaperStates-*z2.PaperStates), model.GiB(z2.ModelStates), model.GiB(z1.ModelStates), model.GiB(z2.PeakAllocated), model.GiB(z1.PeakAllocated))
	}
	return c
}

func sitePresets(s model.Setup, o SiteOptions) (Section, error) {
	t := SiteTable{ID: "presets", Caption: "Every preset at this setup's micro-batch, sequence (at most each preset's context), precision and checkpoint policy, one rank: model states and activations by each formula, beside the simulated peak. The formulas' totals leave out temporaries, workspace and the allocator's rounding, which the simulation counts.",
		Header: []string{"preset", "parameters", "seq", "model states"}}
	for _, f := range model.Formulas() {
		t.Header = append(t.Header, f.String()+" activations")
	}
	t.Header = append(t.Header, "simulated activations", "simulated peak allocated")
	for _, name := range model.PresetNames() {
		c, err := model.Preset(name)
		if err != nil {
			return Section{}, err
		}
		u := s
		u.Model, u.Seq = c, min(s.Seq, c.Context)
		e, st, err := estimateAndSimulate(u, o.simSteps())
		if err != nil {
			return Section{}, fmt.Errorf("bench: preset %s: %w", name, err)
		}
		row := []any{name, c.NumParams(), int64(u.Seq), e.States.Total()}
		for _, f := range model.Formulas() {
			row = append(row, e.ActivationBytes(f))
		}
		row = append(row, st.CategoryRequested[cuda.Activations].Peak, st.AllocatedBytes.Peak)
		t.Rows = append(t.Rows, row)
		o.progress("report: preset %s simulated", name)
	}
	return Section{ID: "presets", Title: "Scaling up over the presets", Intro: presetsIntro(t), Tables: []SiteTable{t}}, nil
}

// presetsIntro names the table's span from its rows: the smallest and the
// largest preset and their parameters (it said "tiny to 6B" over a table
// that ended at 8B).
func presetsIntro(t SiteTable) string {
	if len(t.Rows) == 0 {
		return ""
	}
	lo, hi := t.Rows[0], t.Rows[0]
	for _, r := range t.Rows[1:] {
		if r[1].(int64) < lo[1].(int64) {
			lo = r
		}
		if r[1].(int64) > hi[1].(int64) {
			hi = r
		}
	}
	return fmt.Sprintf("Every preset, from %s (%s parameters) to %s (%s), simulated without running.", lo[0], shortCount(lo[1].(int64)), hi[0], shortCount(hi[1].(int64)))
}

// shortCount is a count in three significant digits and a suffix: 124M,
// 8.03B.
func shortCount(n int64) string {
	for _, u := range []struct {
		div  float64
		name string
	}{{1e12, "T"}, {1e9, "B"}, {1e6, "M"}, {1e3, "K"}} {
		if float64(n) >= u.div {
			return strconv.FormatFloat(float64(n)/u.div, 'g', 3, 64) + u.name
		}
	}
	return strconv.FormatInt(n, 10)
}

func renderSVG(f figure) ([]byte, error) {
	var buf bytes.Buffer
	if err := f.render(&buf, true); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	if i := bytes.Index(b, []byte("<svg")); i > 0 {
		b = b[i:] // inline: no XML declaration
	}
	return b, nil
}

// cellText is a cell for people: bytes with their binary unit.
func cellText(v any, header string) string {
	switch x := v.(type) {
	case int64:
		if isBytesColumn(header) {
			return model.GiB(x)
		}
		return model.Comma(x)
	case float64:
		return strconv.FormatFloat(x, 'g', 4, 64)
	}
	return fmt.Sprint(v)
}

// isBytesColumn says whether a column holds bytes (the counts' columns
// are named for what they count).
func isBytesColumn(h string) bool {
	switch h {
	case "parameters", "seq", "micro-batch b", "sequence s":
		return false
	}
	return true
}

// CheckSiteDir refuses a directory that holds anything: the report is
// written into a new or empty directory, so that nothing of the user's is
// replaced. A link to nothing is refused too, before any work (it made the
// report fail once it was done).
func CheckSiteDir(dir string) error {
	if fi, err := os.Lstat(dir); err == nil && fi.Mode()&os.ModeSymlink != 0 {
		if _, err := os.Stat(dir); err != nil {
			target, _ := os.Readlink(dir)
			return &files.PathError{Path: dir, Problem: fmt.Sprintf("a link to %s, which is not there (give a new or empty directory)", target)}
		}
	}
	entries, err := os.ReadDir(dir)
	switch {
	case os.IsNotExist(err):
		parent := filepath.Dir(dir)
		if st, err := os.Stat(parent); err != nil || !st.IsDir() {
			return &files.PathError{Path: dir, Problem: fmt.Sprintf("its parent %s is not a directory", parent)}
		}
		// The report makes dir at the end: its parent must take one now.
		probe, err := os.MkdirTemp(parent, ".trainmem-check-*")
		if err != nil {
			return &files.PathError{Path: dir, Problem: fmt.Sprintf("cannot be made: its parent %s takes no new directory (%v)", parent, errors.Unwrap(err))}
		}
		os.Remove(probe)
		return nil
	case err != nil:
		return &files.PathError{Path: dir, Problem: fmt.Sprintf("not a directory trainmem can read (%v)", err)}
	case len(entries) > 0:
		return &files.PathError{Path: dir, Problem: fmt.Sprintf("holds %d entries: give a new or empty directory (the report replaces nothing)", len(entries))}
	}
	probe, err := os.CreateTemp(dir, ".trainmem-check-*")
	if err != nil {
		return &files.PathError{Path: dir, Problem: fmt.Sprintf("cannot be written (%v)", errors.Unwrap(err))}
	}
	probe.Close()
	os.Remove(probe.Name())
	return nil
}

// Write writes the site into dir (new or empty: CheckSiteDir): index.html,
// and each table as ID.csv and ID.json. The whole report is written into a
// new directory beside dir, then renamed to dir, so that dir holds a whole
// report or nothing: a disk that fills leaves nothing half-made (it left
// 12 files and no index.html, which a rerun then refused), and of two
// reports into one directory the second is refused, not mixed file by
// file into the first. A dir that is a link to a directory is written
// through.
func (site *Site) Write(dir string) error {
	if target, err := filepath.EvalSymlinks(dir); err == nil {
		dir = target
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), ".trainmem-report-*")
	if err != nil {
		return &files.PathError{Path: dir, Problem: fmt.Sprintf("cannot be written: %v", errors.Unwrap(err))}
	}
	keep := false
	defer func() {
		if !keep {
			os.RemoveAll(tmp)
		}
	}()
	for _, sec := range site.Sections {
		for _, t := range sec.Tables {
			if err := files.WriteAtomic(filepath.Join(tmp, t.ID+".csv"), t.writeCSV); err != nil {
				return err
			}
			if err := files.WriteAtomic(filepath.Join(tmp, t.ID+".json"), t.writeJSON); err != nil {
				return err
			}
		}
	}
	if err := files.WriteAtomic(filepath.Join(tmp, "index.html"), site.writeHTML); err != nil {
		return err
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return err
	}
	// rename(2) puts a directory in place of a missing or an empty one,
	// and fails on one that holds anything.
	if err := os.Rename(tmp, dir); err != nil {
		if errors.Is(err, syscall.ENOTEMPTY) || errors.Is(err, syscall.EEXIST) {
			keep = true
			return fmt.Errorf("bench: %s: something else (another report?) wrote into it while this report ran; nothing of it was replaced, and this report is whole in %s", dir, tmp)
		}
		return fmt.Errorf("bench: %s: the report could not be put in place: %w", dir, err)
	}
	return nil
}

func (t SiteTable) writeCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	cw.Write(t.Header)
	for _, row := range t.Rows {
		rec := make([]string, len(row))
		for i, v := range row {
			rec[i] = fmt.Sprint(v)
		}
		cw.Write(rec)
	}
	cw.Flush()
	return cw.Error()
}

func (t SiteTable) writeJSON(w io.Writer) error {
	var rows []map[string]any
	for _, row := range t.Rows {
		m := map[string]any{}
		for i, v := range row {
			if s, ok := v.(string); ok && s == "-" {
				v = nil
			}
			m[t.Header[i]] = v
		}
		rows = append(rows, m)
	}
	return writeJSON(w, map[string]any{"table": t.ID, "caption": t.Caption, "columns": t.Header, "rows": rows})
}

// writeHTML writes index.html: self-contained (inline CSS and SVG, no
// network), every table with links to its CSV and JSON, every figure with
// its caption. A script on load checks that every figure drew, and puts
// the count in the page's data-figures attribute, and counts the table
// cells whose text wrapped onto a second line in data-wrapped (the tests
// read both).
func (site *Site) writeHTML(w io.Writer) error {
	var b strings.Builder
	esc := html.EscapeString
	s := site.Setup
	b.WriteString(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>trainmem report: ` + esc(s.Model.Name) + `</title>
<style>
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1100px;color:#222;line-height:1.45}
h1{font-size:1.6em}h2{margin-top:2em;border-bottom:1px solid #ccc}
table{border-collapse:collapse;margin:1em 0;font-size:.9em}td,th{border:1px solid #ddd;padding:.25em .6em;text-align:right}
td{white-space:nowrap}.wide{overflow-x:auto}
figure svg text{font-family:"Liberation Sans",Arial,Helvetica,sans-serif!important}
th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}
figure{margin:1.5em 0}figcaption,.caption{color:#555;font-size:.92em;max-width:60em}
svg{max-width:100%;height:auto}nav a{margin-right:1em}.notes li{margin:.2em 0}.notes summary{cursor:pointer;color:#333}
</style></head><body data-figures="pending">
`)
	fmt.Fprintf(&b, "<h1>trainmem report: %s</h1>\n<p>%s; micro-batch %d, sequence %d, %s, %s, checkpoint %s. %s</p>\n<nav>",
		esc(s.Model.Name), esc(s.Model.String()), s.Batch, s.Seq, esc(s.Precision.String()), esc(s.Optimizer.String()), esc(s.Checkpoint.String()),
		esc(map[bool]string{true: "Measured on " + site.Device + ".", false: "Nothing measured (simulated and estimated only)."}[site.Device != ""]))
	for _, sec := range site.Sections {
		fmt.Fprintf(&b, `<a href="#%s">%s</a>`, sec.ID, esc(sec.Title))
	}
	b.WriteString("</nav>\n")
	writeFigure := func(f SiteFigure) {
		fmt.Fprintf(&b, "<figure id=\"%s\">\n%s\n<figcaption>%s</figcaption></figure>\n", f.ID, f.SVG, esc(f.Caption))
	}
	for _, sec := range site.Sections {
		fmt.Fprintf(&b, "<section id=\"%s\"><h2>%s</h2>\n<p>%s</p>\n", sec.ID, esc(sec.Title), esc(sec.Intro))
		for _, f := range sec.Figures {
			if f.Lead {
				writeFigure(f)
			}
		}
		for _, t := range sec.Tables {
			fmt.Fprintf(&b, "<p class=\"caption\">%s (<a href=\"%s.csv\">CSV</a>, <a href=\"%s.json\">JSON</a>)</p>\n<div class=\"wide\"><table><tr>", esc(t.Caption), t.ID, t.ID)
			for _, h := range t.Header {
				fmt.Fprintf(&b, "<th>%s</th>", esc(h))
			}
			b.WriteString("</tr>\n")
			for _, row := range t.Rows {
				b.WriteString("<tr>")
				for i, v := range row {
					fmt.Fprintf(&b, "<td>%s</td>", esc(cellText(v, t.Header[i])))
				}
				b.WriteString("</tr>\n")
			}
			b.WriteString("</table></div>\n")
		}
		for _, f := range sec.Figures {
			if !f.Lead {
				writeFigure(f)
			}
		}
		if len(sec.Notes) > 0 {
			fmt.Fprintf(&b, "<details class=\"notes\"><summary>Why the numbers differ: %d explanations</summary><ul>", len(sec.Notes))
			for _, n := range sec.Notes {
				fmt.Fprintf(&b, "<li>%s</li>", esc(n))
			}
			b.WriteString("</ul></details>\n")
		}
		b.WriteString("</section>\n")
	}
	b.WriteString(`<script>
window.addEventListener("load", function () {
  var figs = document.querySelectorAll("figure svg"), drawn = 0;
  figs.forEach(function (svg) { var r = svg.getBoundingClientRect(); if (r.width > 0 && r.height > 0) drawn++; });
  var imgs = document.querySelectorAll("img"), broken = 0;
  imgs.forEach(function (im) { if (!im.complete || im.naturalWidth === 0) broken++; });
  document.body.setAttribute("data-figures", broken === 0 && drawn === figs.length ? "ok " + drawn : "broken " + (figs.length - drawn + broken));
  var wrapped = 0, range = document.createRange();
  document.querySelectorAll("td").forEach(function (cell) { range.selectNodeContents(cell); if (range.getClientRects().length > 1) wrapped++; });
  document.body.setAttribute("data-wrapped", String(wrapped));
});
</script>
</body></html>
`)
	_, err := io.WriteString(w, b.String())
	return err
}
