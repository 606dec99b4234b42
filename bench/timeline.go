package bench

// The timeline plot: a step's memory over its allocator events, stacked by
// category, the phases shaded and the peak marked with what it holds; one
// panel per trace on a shared axis (the checkpoint sweep's policies).

import (
	"fmt"
	"image/color"
	"math"
	"sort"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"trainmem/cuda"
	"trainmem/model"
)

// Timeline is a step's allocated bytes per category after each of its
// allocator events (index 0: before the first), and each event's phase.
type Timeline struct {
	Bytes  [][cuda.NumCategories]int64
	Phases []string // Phases[i] is event i's (Bytes[i+1] is after it)
	// Peak is the index into Bytes of the first moment the total is
	// highest, and PeakBytes that total.
	Peak      int
	PeakBytes int64
}

// Timeline replays the trace from the state it began in.
func (m *MemoryTrace) Timeline() Timeline {
	m.mu.Lock()
	defer m.mu.Unlock()
	cats, _ := m.start()
	tl := Timeline{Bytes: [][cuda.NumCategories]int64{cats}}
	total := func(c [cuda.NumCategories]int64) (n int64) {
		for _, v := range c {
			n += v
		}
		return n
	}
	tl.PeakBytes = total(cats)
	for _, e := range m.Events {
		switch e.Action {
		case cuda.TraceAlloc:
			cats[e.Category] += e.Size
		case cuda.TraceFree:
			cats[e.Category] -= e.Size
		default:
			continue // segments and ooms move no allocated bytes
		}
		tl.Bytes = append(tl.Bytes, cats)
		tl.Phases = append(tl.Phases, e.Site.Phase)
		if t := total(cats); t > tl.PeakBytes {
			tl.Peak, tl.PeakBytes = len(tl.Bytes)-1, t
		}
	}
	return tl
}

// TimelinePanel is one panel of a timeline plot: a title and its trace.
type TimelinePanel struct {
	Title string
	Trace *MemoryTrace
}

// categoryColors are d3's schemeTableau10, the palette PyTorch's memory
// viewer colours categories with, in the order of cuda.Categories: the
// order the snapshot names them in (WriteSnapshot), so that a category
// has the same colour in the viewer and in trainmem's plots.
var categoryColors = []color.Color{
	color.RGBA{0x4e, 0x79, 0xa7, 0xff}, color.RGBA{0xf2, 0x8e, 0x2c, 0xff}, color.RGBA{0xe1, 0x57, 0x59, 0xff},
	color.RGBA{0x76, 0xb7, 0xb2, 0xff}, color.RGBA{0x59, 0xa1, 0x4f, 0xff}, color.RGBA{0xed, 0xc9, 0x49, 0xff},
	color.RGBA{0xaf, 0x7a, 0xa1, 0xff}, color.RGBA{0xff, 0x9d, 0xa7, 0xff}, color.RGBA{0x9c, 0x75, 0x5f, 0xff},
	color.RGBA{0xba, 0xb0, 0xab, 0xff},
}

// phaseColors shade the phases behind the areas.
var phaseColors = map[string]color.Color{
	"forward":   color.RGBA{0xdd, 0xe8, 0xf5, 0xff},
	"recompute": color.RGBA{0xf9, 0xe3, 0xc8, 0xff},
	"backward":  color.RGBA{0xe3, 0xf1, 0xdf, 0xff},
	"optimizer": color.RGBA{0xee, 0xe2, 0xf0, 0xff},
}

// binaryUnit is the binary unit of n bytes: the divisor and its name.
func binaryUnit(n int64) (int64, string) {
	unit, name := int64(1), "B"
	for i, u := range []string{"KiB", "MiB", "GiB", "TiB"} {
		if n >= int64(1)<<(10*(i+1)) {
			unit, name = int64(1)<<(10*(i+1)), u
		}
	}
	return unit, name
}

// PlotTimeline draws each panel's step as a stacked area of allocated
// bytes per category over its allocator events, the phases shaded behind
// (forward, recompute, backward, optimizer, each named once), the peak
// marked by a line and labelled with its total and what makes it (the
// model states together, then every other category). Panels stack top to
// bottom on one byte axis, so that their heights compare: the checkpoint
// sweep's sawtooth of recomputation against the ramp of no checkpointing.
// When the model states, held all step long, are most of the peak, the
// axis starts just below them, so that what moves (activations,
// temporaries) fills the panel instead of a sliver above them. The legend
// stands right of the data, never over it. The format follows path's
// extension (.svg or .png); the file is written atomically.
func PlotTimeline(path string, panels []TimelinePanel) error {
	if err := CheckPlotPath(path); err != nil {
		return err
	}
	f, err := timelineFigure(panels)
	if err != nil {
		return err
	}
	return f.write(path)
}

// requestedStates is the model states' peak requested bytes of st, each
// category's own peak.
func requestedStates(st cuda.Stats) int64 {
	var b [cuda.NumCategories]int64
	for c, v := range st.CategoryRequested {
		b[c] = v.Peak
	}
	return modelStates(b)
}

// modelStates is the model states' bytes of one moment of a timeline.
func modelStates(b [cuda.NumCategories]int64) int64 {
	var n int64
	for _, c := range cuda.Categories() {
		if c.ModelState() {
			n += b[c]
		}
	}
	return n
}

// timelineAxis is the byte axis the panels share: from base (0, or just
// below the model states when they are at least 40% of the peak) to top.
func timelineAxis(tls []Timeline) (base, top int64) {
	floor := int64(math.MaxInt64)
	for _, tl := range tls {
		top = max(top, tl.PeakBytes)
		for _, b := range tl.Bytes {
			floor = min(floor, modelStates(b))
		}
	}
	if top <= 0 || floor < top*2/5 {
		return 0, top
	}
	// A sliver of the model states stays in view: a tenth of what moves.
	return max(floor-(top-floor)/10, 0), top
}

// timelineFigure draws the panels.
func timelineFigure(panels []TimelinePanel) (figure, error) {
	if len(panels) == 0 {
		return figure{}, fmt.Errorf("bench: a timeline plot needs a trace")
	}
	tls := make([]Timeline, len(panels))
	for i, p := range panels {
		tls[i] = p.Trace.Timeline()
	}
	base, top := timelineAxis(tls)
	unit, uname := binaryUnit(top)
	ymin := float64(base) / float64(unit)
	ymax := ymin + (float64(top)-float64(base))/float64(unit)*1.15 // room for the phases' names and the peak's mark
	var plots [][]*plot.Plot
	var legends [][]*plot.Legend
	for i, p := range panels {
		pl, leg, err := timelinePlot(p.Title, tls[i], unit, uname, ymin, ymax, base)
		if err != nil {
			return figure{}, err
		}
		plots = append(plots, []*plot.Plot{pl})
		legends = append(legends, []*plot.Legend{leg})
	}
	width, height := 10*vg.Inch, vg.Length(len(plots))*3*vg.Inch+vg.Inch/2
	tiles := draw.Tiles{Rows: len(plots), Cols: 1, PadY: vg.Inch / 6, PadTop: vg.Inch / 8, PadBottom: vg.Inch / 8, PadLeft: vg.Inch / 8, PadRight: vg.Inch / 8}
	return figure{plots: plots, tiles: tiles, width: width, height: height, legends: legends, legendWidth: 1.9 * vg.Inch}, nil
}

// phaseLabels are the phases' names of a timeline: each phase named once,
// at its widest run, when that run is wide enough to hold it and clear of
// the names already placed (selective checkpointing alternates recompute
// and backward a dozen times: naming each run made the names collide).
func phaseLabels(phases []string, n int) plotter.XYLabels {
	type run struct {
		name   string
		lo, hi int
	}
	var runs []run
	for lo := 0; lo < len(phases); {
		hi := lo
		for hi < len(phases) && phases[hi] == phases[lo] {
			hi++
		}
		if _, ok := phaseColors[phases[lo]]; ok {
			runs = append(runs, run{phases[lo], lo, hi})
		}
		lo = hi
	}
	sort.SliceStable(runs, func(i, j int) bool { return runs[i].hi-runs[i].lo > runs[j].hi-runs[j].lo })
	var out plotter.XYLabels
	named := map[string]bool{}
	var centers []float64
	for _, r := range runs {
		// A name is about n/12 events wide at this size: its run must hold
		// it, and its centre be clear of the others'.
		c, w := float64(r.lo+r.hi)/2, float64(r.hi-r.lo)
		if named[r.name] || w < float64(n)/12 {
			continue
		}
		clear := true
		for _, o := range centers {
			clear = clear && math.Abs(o-c) >= float64(n)/8
		}
		if !clear {
			continue
		}
		named[r.name] = true
		centers = append(centers, c)
		out.XYs = append(out.XYs, plotter.XY{X: c})
		out.Labels = append(out.Labels, r.name)
	}
	return out
}

// peakLabel says the peak's total and what makes it: the model states
// together, then every other category held, largest first.
func peakLabel(tl Timeline) string {
	b := tl.Bytes[tl.Peak]
	type part struct {
		name string
		v    int64
	}
	parts := []part{{"model states", modelStates(b)}}
	for _, c := range cuda.Categories() {
		if !c.ModelState() && b[c] > 0 {
			parts = append(parts, part{c.String(), b[c]})
		}
	}
	sort.SliceStable(parts[1:], func(i, j int) bool { return parts[1+i].v > parts[1+j].v })
	var held []string
	for _, pt := range parts {
		if pt.v > 0 {
			held = append(held, fmt.Sprintf("%s %s", pt.name, model.GiB(pt.v)))
		}
	}
	return fmt.Sprintf("peak %s: %s", model.GiB(tl.PeakBytes), strings.Join(held, ", "))
}

// timelinePlot is one panel and its legend (drawn beside it): its y axis
// from ymin to ymax (in unit), base the bytes below ymin; its title says
// what the peak holds, and a dashed line marks where it falls.
func timelinePlot(title string, tl Timeline, unit int64, uname string, ymin, ymax float64, base int64) (*plot.Plot, *plot.Legend, error) {
	p := plot.New()
	leg := sideLegend()
	p.Title.Text = title
	if base > 0 {
		p.Title.Text = fmt.Sprintf("%s (the axis starts at %s: the model states below it)", title, model.GiB(base))
	}
	p.Title.Text += "\n" + peakLabel(tl)
	p.X.Label.Text = "allocator events of the step (allocs and frees, in order)"
	p.Y.Label.Text = uname + " allocated"
	p.Y.Min, p.Y.Max = ymin, ymax
	n := len(tl.Bytes)
	last := float64(max(n-1, 1))
	p.X.Min, p.X.Max = 0, last
	p.X.Tick.Marker = eventTicks{last}
	// The phases, shaded behind, each named once at the top where a run of
	// it is wide enough, and in the legend.
	var phaseSwatches []struct {
		name string
		poly *plotter.Polygon
	}
	for lo := 0; lo < len(tl.Phases); {
		hi := lo
		for hi < len(tl.Phases) && tl.Phases[hi] == tl.Phases[lo] {
			hi++
		}
		if c, ok := phaseColors[tl.Phases[lo]]; ok {
			x0, x1 := float64(lo), float64(hi)
			poly, err := plotter.NewPolygon(plotter.XYs{{X: x0, Y: ymin}, {X: x1, Y: ymin}, {X: x1, Y: ymax}, {X: x0, Y: ymax}})
			if err != nil {
				return nil, nil, err
			}
			poly.Color, poly.LineStyle.Width = c, 0
			p.Add(poly)
			seen := false
			for _, sw := range phaseSwatches {
				seen = seen || sw.name == tl.Phases[lo]
			}
			if !seen {
				phaseSwatches = append(phaseSwatches, struct {
					name string
					poly *plotter.Polygon
				}{tl.Phases[lo], poly})
			}
		}
		lo = hi
	}
	labels := phaseLabels(tl.Phases, n)
	for i := range labels.XYs {
		labels.XYs[i].Y = ymin + (ymax-ymin)*0.955
	}
	// The categories, stacked in cuda.Categories order, as steps: each
	// event holds its bytes until the next.
	cats := cuda.Categories()
	below := make([]float64, n)
	for k, c := range cats {
		above := make([]float64, n)
		any := false
		for i := range n {
			above[i] = below[i] + float64(tl.Bytes[i][c])/float64(unit)
			any = any || tl.Bytes[i][c] > 0
		}
		if any {
			var pts plotter.XYs
			for i := range n {
				pts = append(pts, plotter.XY{X: float64(i), Y: above[i]}, plotter.XY{X: float64(i + 1), Y: above[i]})
			}
			for i := n - 1; i >= 0; i-- {
				pts = append(pts, plotter.XY{X: float64(i + 1), Y: below[i]}, plotter.XY{X: float64(i), Y: below[i]})
			}
			poly, err := plotter.NewPolygon(pts)
			if err != nil {
				return nil, nil, err
			}
			poly.Color, poly.LineStyle.Width = categoryColors[k%len(categoryColors)], 0
			p.Add(poly)
			leg.Add(c.String(), poly)
		}
		below = above
	}
	for _, sw := range phaseSwatches {
		leg.Add(sw.name+" (phase)", sw.poly)
	}
	// The peak: a dashed line up to it, and the word "peak" beside its top,
	// on the side with more room (what it holds is in the title).
	peakX := float64(tl.Peak)
	peakY := float64(tl.PeakBytes) / float64(unit)
	line, err := plotter.NewLine(plotter.XYs{{X: peakX, Y: ymin}, {X: peakX, Y: peakY}})
	if err != nil {
		return nil, nil, err
	}
	line.Color, line.Width, line.Dashes = color.Black, vg.Points(1), []vg.Length{vg.Points(3), vg.Points(2)}
	p.Add(line)
	peak, right := len(labels.Labels), peakX > last*0.85
	labelX := peakX + last*0.006
	if right {
		labelX = peakX - last*0.006
	}
	labels.XYs = append(labels.XYs, plotter.XY{X: labelX, Y: peakY + (ymax-ymin)*0.02})
	labels.Labels = append(labels.Labels, "peak")
	lb, err := plotter.NewLabels(labels)
	if err != nil {
		return nil, nil, err
	}
	for i := range lb.TextStyle {
		lb.TextStyle[i].XAlign = draw.XCenter
		if i == peak {
			lb.TextStyle[i].XAlign = draw.XLeft
			if right {
				lb.TextStyle[i].XAlign = draw.XRight
			}
		}
	}
	p.Add(lb)
	// The axes last: adding a plotter widens them to its data (the stacks
	// start at 0, below a raised axis).
	p.X.Min, p.X.Max = 0, last
	p.Y.Min, p.Y.Max = ymin, ymax
	return p, leg, nil
}

// eventTicks marks a timeline's x axis at round event counts up to its
// last event, none in the legend's room beyond.
type eventTicks struct{ last float64 }

func (t eventTicks) Ticks(min, max float64) []plot.Tick {
	var out []plot.Tick
	for _, tk := range (plot.DefaultTicks{}).Ticks(min, t.last) {
		if tk.Value <= t.last {
			out = append(out, tk)
		}
	}
	return out
}
