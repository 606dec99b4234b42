package bench

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"

	"trainmem/cuda"
	"trainmem/model"
	"trainmem/model/files"
)

// PlotFormats are the file extensions Plot writes.
const PlotFormats = ".svg, .png"

// CheckPlotPath reports whether path has an extension Plot writes.
func CheckPlotPath(path string) error {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".svg", ".png":
		return nil
	}
	return fmt.Errorf("bench: plot file %q: unknown format (valid extensions: %s)", path, PlotFormats)
}

// The figures' text is Liberation Sans, the sans-serif face gonum/plot
// carries (its default is Liberation Serif, which stood out on the report's
// sans-serif page); the page names Arial and Helvetica, of the same
// metrics, for a browser that lacks it, so that the text keeps the width
// the layout measured.
func init() {
	plot.DefaultFont = font.Font{Typeface: "Liberation", Variant: "Sans"}
	plotter.DefaultFont = plot.DefaultFont // the labels'

}

var palette = []color.Color{
	color.RGBA{0x4c, 0x72, 0xb0, 0xff}, // blue
	color.RGBA{0xdd, 0x84, 0x52, 0xff}, // orange
	color.RGBA{0x55, 0xa8, 0x68, 0xff}, // green
	color.RGBA{0x81, 0x72, 0xb3, 0xff}, // purple
}

// Plot draws the sweep as two bar charts side by side, activation memory
// per policy (two formulas and the simulated or measured bytes) and, when
// measured, step time per policy beside what the recompute FLOPs predict
// from none's time. The format follows path's extension (.svg or .png); the
// file is written atomically.
func (r *SweepReport) Plot(path string) error {
	if err := CheckPlotPath(path); err != nil {
		return err
	}
	f, err := r.figure()
	if err != nil {
		return err
	}
	return f.write(path)
}

// figure draws the sweep's bar charts.
func (r *SweepReport) figure() (figure, error) {
	var names []string
	for _, row := range r.Rows {
		names = append(names, row.Policy)
	}
	measured := r.Device != ""

	// Memory, in the binary unit of the largest bar.
	var top int64
	for _, row := range r.Rows {
		for _, v := range row.Estimate {
			top = max(top, v)
		}
		top = max(top, row.Simulated)
	}
	unit, uname := binaryUnit(top)
	memSeries := []struct {
		name string
		get  func(SweepRow) int64
	}{
		{model.ZeROPaper.String(), func(x SweepRow) int64 { return x.Estimate[model.ZeROPaper] }},
		{model.Korthikanti.String(), func(x SweepRow) int64 { return x.Estimate[model.Korthikanti] }},
	}
	if measured {
		memSeries = append(memSeries, struct {
			name string
			get  func(SweepRow) int64
		}{"measured (= simulated)", func(x SweepRow) int64 { return *x.Measured }})
	} else {
		memSeries = append(memSeries, struct {
			name string
			get  func(SweepRow) int64
		}{"simulated", func(x SweepRow) int64 { return x.Simulated }})
	}
	mp := plot.New()
	mp.Title.Text = "activation memory at its peak"
	mp.Y.Label.Text = uname
	mp.Legend.Top = true
	mp.Legend.Padding = vg.Points(2.5)
	w := vg.Points(12)
	for i, sr := range memSeries {
		var vs plotter.Values
		for _, row := range r.Rows {
			vs = append(vs, float64(sr.get(row))/float64(unit))
		}
		b, err := plotter.NewBarChart(vs, w)
		if err != nil {
			return figure{}, err
		}
		b.Color = palette[i%len(palette)]
		b.LineStyle.Width = 0
		b.Offset = w * vg.Length(float64(i)-float64(len(memSeries)-1)/2)
		mp.Add(b)
		mp.Legend.Add(sr.name, b)
	}
	mp.NominalX(names...)
	mp.Y.Min, mp.Y.Max = 0, float64(top)/float64(unit)*1.35 // room for the legend

	plots := [][]*plot.Plot{{mp}}
	if measured {
		tp := plot.New()
		tp.Title.Text = "step time (median)"
		tp.Y.Label.Text = "ms"
		tp.Legend.Top = true
		tp.Legend.Padding = vg.Points(2.5)
		var got, want plotter.Values
		var base float64
		for _, row := range r.Rows {
			if row.Policy == "none" {
				base = *row.StepMs
			}
		}
		for _, row := range r.Rows {
			got = append(got, *row.StepMs)
			want = append(want, base*(1+row.RecomputeFraction))
		}
		for i, s := range []struct {
			name string
			vs   plotter.Values
		}{{"measured", got}, {"none × (1 + recompute FLOPs)", want}} {
			if s.name != "measured" && base == 0 {
				continue
			}
			b, err := plotter.NewBarChart(s.vs, w)
			if err != nil {
				return figure{}, err
			}
			b.Color = palette[(i+2)%len(palette)]
			b.LineStyle.Width = 0
			b.Offset = w * vg.Length(float64(i)-0.5)
			tp.Add(b)
			tp.Legend.Add(s.name, b)
		}
		tp.NominalX(names...)
		var slowest float64
		for i := range got {
			slowest = max(slowest, got[i], want[i])
		}
		tp.Y.Min, tp.Y.Max = 0, slowest*1.35
		plots[0] = append(plots[0], tp)
	}

	width := vg.Length(math.Max(4, float64(len(r.Rows)))) * vg.Inch * 0.9 * vg.Length(len(plots[0]))
	height := 4 * vg.Inch
	tiles := draw.Tiles{Rows: 1, Cols: len(plots[0]), PadX: vg.Inch / 4, PadTop: vg.Inch / 8, PadBottom: vg.Inch / 8, PadLeft: vg.Inch / 8, PadRight: vg.Inch / 8}
	return figure{plots: plots, tiles: tiles, width: width, height: height}, nil
}

// peaksFigure draws each policy's simulated peak as a stack of what it
// holds at that moment, in the timelines' category colours, its total and
// its change from the first policy's (none's) above each bar: what sets
// the peak, and how far checkpointing moves it.
func (r *SweepReport) peaksFigure() (figure, error) {
	var names []string
	var top int64
	for _, row := range r.Rows {
		names = append(names, row.Policy)
		top = max(top, row.SimulatedPeak)
	}
	unit, uname := binaryUnit(top)
	p := plot.New()
	p.Title.Text = "the step's peak and what it holds (simulated)"
	p.Y.Label.Text = uname + " allocated at the peak"
	leg := sideLegend()
	var segs []stackSegment
	for k, c := range cuda.Categories() {
		seg := stackSegment{name: c.String(), color: categoryColors[k%len(categoryColors)]}
		for _, row := range r.Rows {
			seg.values = append(seg.values, float64(row.AtPeak[c])/float64(unit))
		}
		segs = append(segs, seg)
	}
	if err := addStacks(p, leg, segs, vg.Points(28), false); err != nil {
		return figure{}, err
	}
	var lab plotter.XYLabels
	for i, row := range r.Rows {
		text := model.GiB(row.SimulatedPeak)
		if i > 0 {
			text += " " + pct(float64(row.SimulatedPeak)/float64(r.Rows[0].SimulatedPeak)-1)
		}
		lab.XYs = append(lab.XYs, plotter.XY{X: float64(i), Y: float64(row.SimulatedPeak)/float64(unit) + float64(top)/float64(unit)*0.02})
		lab.Labels = append(lab.Labels, text)
	}
	lb, err := plotter.NewLabels(lab)
	if err != nil {
		return figure{}, err
	}
	for i := range lb.TextStyle {
		lb.TextStyle[i].XAlign = draw.XCenter
		lb.TextStyle[i].Font.Size = vg.Points(9)
	}
	p.Add(lb)
	p.NominalX(names...)
	p.Y.Min, p.Y.Max = 0, float64(top)/float64(unit)*1.1
	width := vg.Length(math.Max(5, 1.1*float64(len(r.Rows)))) * vg.Inch
	tiles := draw.Tiles{Rows: 1, Cols: 1, PadTop: vg.Inch / 8, PadBottom: vg.Inch / 8, PadLeft: vg.Inch / 8, PadRight: vg.Inch / 8}
	return figure{plots: [][]*plot.Plot{{p}}, tiles: tiles, width: width + 1.4*vg.Inch, height: 4 * vg.Inch,
		legends: [][]*plot.Legend{{leg}}, legendWidth: 1.4 * vg.Inch}, nil
}

// sideLegend is a legend drawn beside its plot (figure.legends): from the
// strip's top left, its rows a line apart (12-point names on 10-point rows
// touched).
func sideLegend() *plot.Legend {
	leg := plot.NewLegend()
	leg.Top, leg.Left = true, true
	leg.Padding = vg.Points(2.5)
	return &leg
}

// stackSegment is one colour of stacked bars: its value in every bar.
type stackSegment struct {
	name   string
	color  color.Color
	values []float64
}

// addStacks adds the segments to p as stacked bars of width w (vertical,
// or horizontal along the x axis), each segment in leg; a segment that is
// zero in every bar is left out.
func addStacks(p *plot.Plot, leg *plot.Legend, segs []stackSegment, w vg.Length, horizontal bool) error {
	var below *plotter.BarChart
	for _, seg := range segs {
		nonzero := false
		for _, v := range seg.values {
			nonzero = nonzero || v != 0
		}
		if !nonzero {
			continue
		}
		b, err := plotter.NewBarChart(plotter.Values(seg.values), w)
		if err != nil {
			return err
		}
		b.Color, b.LineStyle.Width, b.Horizontal = seg.color, 0, horizontal
		if below != nil {
			b.StackOn(below)
		}
		below = b
		p.Add(b)
		leg.Add(seg.name, b)
	}
	return nil
}

// figure is a drawing ready to render: its plots (rows of columns) on the
// tiles of a canvas of width by height. A plot may have its legend beside
// it instead of inside its data area (legends, parallel to plots; nil
// for none): a strip of legendWidth right of the tiles holds it, so that
// no axis runs past its data to make room for one.
type figure struct {
	plots         [][]*plot.Plot
	tiles         draw.Tiles
	width, height vg.Length
	legends       [][]*plot.Legend
	legendWidth   vg.Length
}

// render draws the figure to w, as SVG or PNG.
func (f figure) render(w io.Writer, svg bool) error {
	var c interface {
		vg.CanvasSizer
		io.WriterTo
	}
	if svg {
		c = vgsvg.New(f.width, f.height)
	} else {
		c = vgimg.PngCanvas{Canvas: vgimg.New(f.width, f.height)}
	}
	dc := draw.New(c)
	area := draw.Crop(dc, 0, -f.legendWidth, 0, 0)
	canvases := plot.Align(f.plots, f.tiles, area)
	for i, row := range f.plots {
		for j, p := range row {
			p.Draw(canvases[i][j])
			if i < len(f.legends) && j < len(f.legends[i]) && f.legends[i][j] != nil {
				// The strip beside the tile, from the data area's top (below
				// the title).
				lc := canvases[i][j]
				lc.Min.X, lc.Max.X = lc.Max.X+vg.Points(8), lc.Max.X+f.legendWidth
				if p.Title.Text != "" {
					lc.Max.Y -= p.Title.TextStyle.Height(p.Title.Text) + p.Title.Padding
				}
				f.legends[i][j].Draw(lc)
			}
		}
	}
	_, err := c.WriteTo(w)
	return err
}

// write renders the figure to path, in its extension's format (.svg or
// .png), atomically.
func (f figure) write(path string) error {
	return files.WriteAtomic(path, func(out io.Writer) error {
		return f.render(out, strings.ToLower(filepath.Ext(path)) == ".svg")
	})
}
