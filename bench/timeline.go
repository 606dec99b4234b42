package bench

// The timeline plot: a step's memory over its allocator events, stacked by
// category, the phases shaded and the peak marked with what it holds; one
// panel per trace on a shared axis (the checkpoint sweep's policies).

import (
	"fmt"
	"image/color"
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

// categoryColors are Tableau 10's, the palette PyTorch's memory viewer
// colours categories with, in the order of cuda.Categories.
var categoryColors = []color.Color{
	color.RGBA{0x4e, 0x79, 0xa7, 0xff}, color.RGBA{0xf2, 0x8e, 0x2b, 0xff}, color.RGBA{0xe1, 0x57, 0x59, 0xff},
	color.RGBA{0x76, 0xb7, 0xb2, 0xff}, color.RGBA{0x59, 0xa1, 0x4f, 0xff}, color.RGBA{0xed, 0xc9, 0x48, 0xff},
	color.RGBA{0xb0, 0x7a, 0xa1, 0xff}, color.RGBA{0xff, 0x9d, 0xa7, 0xff}, color.RGBA{0x9c, 0x75, 0x5f, 0xff},
	color.RGBA{0xba, 0xb0, 0xac, 0xff},
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
// (forward, recompute, backward, optimizer), the peak marked by a line and
// labelled with its total and its three largest categories. Panels stack
// top to bottom on one byte axis, so that their heights compare: the
// checkpoint sweep's sawtooth of recomputation against the ramp of no
// checkpointing. The format follows path's extension (.svg or .png); the
// file is written atomically.
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

// timelineFigure draws the panels.
func timelineFigure(panels []TimelinePanel) (figure, error) {
	if len(panels) == 0 {
		return figure{}, fmt.Errorf("bench: a timeline plot needs a trace")
	}
	tls := make([]Timeline, len(panels))
	var top int64
	for i, p := range panels {
		tls[i] = p.Trace.Timeline()
		top = max(top, tls[i].PeakBytes)
	}
	unit, uname := binaryUnit(top)
	ymax := float64(top) / float64(unit) * 1.45 // room for the peak's label and the legend
	var plots [][]*plot.Plot
	for i, p := range panels {
		pl, err := timelinePlot(p.Title, tls[i], unit, uname, ymax, i == 0)
		if err != nil {
			return figure{}, err
		}
		plots = append(plots, []*plot.Plot{pl})
	}
	width, height := 10*vg.Inch, vg.Length(len(plots))*3*vg.Inch+vg.Inch/2
	tiles := draw.Tiles{Rows: len(plots), Cols: 1, PadY: vg.Inch / 6, PadTop: vg.Inch / 8, PadBottom: vg.Inch / 8, PadLeft: vg.Inch / 8, PadRight: vg.Inch / 8}
	return figure{plots, tiles, width, height}, nil
}

// timelinePlot is one panel.
func timelinePlot(title string, tl Timeline, unit int64, uname string, ymax float64, legend bool) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "allocator events of the step (allocs and frees, in order)"
	p.Y.Label.Text = uname + " allocated"
	p.Y.Min, p.Y.Max = 0, ymax
	n := len(tl.Bytes)
	p.X.Min, p.X.Max = 0, float64(max(n-1, 1))
	// The phases, shaded behind, each labelled at the top.
	var labels plotter.XYLabels
	for lo := 0; lo < len(tl.Phases); {
		hi := lo
		for hi < len(tl.Phases) && tl.Phases[hi] == tl.Phases[lo] {
			hi++
		}
		if c, ok := phaseColors[tl.Phases[lo]]; ok {
			x0, x1 := float64(lo), float64(hi)
			poly, err := plotter.NewPolygon(plotter.XYs{{X: x0, Y: 0}, {X: x1, Y: 0}, {X: x1, Y: ymax}, {X: x0, Y: ymax}})
			if err != nil {
				return nil, err
			}
			poly.Color, poly.LineStyle.Width = c, 0
			p.Add(poly)
			if hi-lo > n/25 { // wide enough to name
				labels.XYs = append(labels.XYs, plotter.XY{X: x0 + (x1-x0)/2, Y: ymax * 0.97})
				labels.Labels = append(labels.Labels, tl.Phases[lo])
			}
		}
		lo = hi
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
				return nil, err
			}
			poly.Color, poly.LineStyle.Width = categoryColors[k%len(categoryColors)], 0
			p.Add(poly)
			if legend {
				p.Legend.Add(c.String(), poly)
			}
		}
		below = above
	}
	// The peak: a line, and what it holds.
	peakX := float64(tl.Peak)
	line, err := plotter.NewLine(plotter.XYs{{X: peakX, Y: 0}, {X: peakX, Y: float64(tl.PeakBytes) / float64(unit)}})
	if err != nil {
		return nil, err
	}
	line.Color, line.Width, line.Dashes = color.Black, vg.Points(1), []vg.Length{vg.Points(3), vg.Points(2)}
	p.Add(line)
	type part struct {
		c cuda.Category
		v int64
	}
	var parts []part
	for _, c := range cats {
		if v := tl.Bytes[tl.Peak][c]; v > 0 {
			parts = append(parts, part{c, v})
		}
	}
	sort.SliceStable(parts, func(i, j int) bool { return parts[i].v > parts[j].v })
	var held []string
	for _, pt := range parts[:min(3, len(parts))] {
		held = append(held, fmt.Sprintf("%s %s", pt.c, model.GiB(pt.v)))
	}
	labels.XYs = append(labels.XYs, plotter.XY{X: peakX, Y: float64(tl.PeakBytes)/float64(unit) + ymax*0.03})
	labels.Labels = append(labels.Labels, fmt.Sprintf("peak %s: %s", model.GiB(tl.PeakBytes), strings.Join(held, ", ")))
	lb, err := plotter.NewLabels(labels)
	if err != nil {
		return nil, err
	}
	for i := range lb.TextStyle {
		lb.TextStyle[i].XAlign = draw.XCenter
		if i == len(lb.TextStyle)-1 && peakX > float64(n)*0.6 {
			lb.TextStyle[i].XAlign = draw.XRight
		} else if i == len(lb.TextStyle)-1 && peakX < float64(n)*0.3 {
			lb.TextStyle[i].XAlign = draw.XLeft
		}
	}
	p.Add(lb)
	p.Legend.Left, p.Legend.Top = false, true // the step ends low: the legend's corner is free
	p.Legend.YOffs = -vg.Points(14)           // below the phases' names
	return p, nil
}
