package bench

// The streams plot: a rank's replayed step in time (zero.Timing), one row
// a setting, each row two lanes: the compute stream (its kernels, the
// collectives that hold them, the time it waits for other ranks) and the
// communication stream (the collectives that overlap the kernels: DDP's
// and ZeRO-2's bucket reductions, ZeRO-3's prefetched gathers).

import (
	"fmt"
	"image/color"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"trainmem/zero"
)

// streamRow is one setting's replayed step.
type streamRow struct {
	name string
	t    *zero.Timing
}

// The lanes' colours: kernels grey, a collective that holds them red,
// waiting (for other ranks, or for an overlapped collective to end)
// yellow, an overlapped collective blue.
var (
	kernelColor  = color.RGBA{0xba, 0xb0, 0xab, 0xff}
	blockColor   = color.RGBA{0xe1, 0x57, 0x59, 0xff}
	waitColor    = color.RGBA{0xed, 0xc9, 0x49, 0xff}
	overlapColor = color.RGBA{0x4e, 0x79, 0xa7, 0xff}
)

// streamBar is a stretch of a lane: from x0 to x1 ms, lane y (its centre).
type streamBar struct {
	x0, x1, y float64
	c         color.Color
}

// streamBars is the plotter of every bar, each lane half a unit high.
type streamBars []streamBar

func (b streamBars) Plot(c draw.Canvas, p *plot.Plot) {
	tx, ty := p.Transforms(&c)
	for _, s := range b {
		x0, x1 := tx(s.x0), tx(s.x1)
		if x1-x0 < vg.Points(0.4) {
			x1 = x0 + vg.Points(0.4) // a collective of microseconds stays visible
		}
		y0, y1 := ty(s.y-0.22), ty(s.y+0.22)
		c.FillPolygon(s.c, c.ClipPolygonXY([]vg.Point{{X: x0, Y: y0}, {X: x1, Y: y0}, {X: x1, Y: y1}, {X: x0, Y: y1}}))
	}
}

func (b streamBars) DataRange() (xmin, xmax, ymin, ymax float64) {
	xmin, ymin, ymax = 0, -0.5, 0.5
	for _, s := range b {
		xmax, ymin, ymax = max(xmax, s.x1), min(ymin, s.y-0.5), max(ymax, s.y+0.5)
	}
	return xmin, xmax, ymin, ymax
}

// streamsFigure draws rows (the first on top) on one time axis, in ms.
func streamsFigure(title string, rows []streamRow) (figure, error) {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "time in the step (ms)"
	var bars streamBars
	var ticks []plot.Tick
	ms := func(d interface{ Seconds() float64 }) float64 { return d.Seconds() * 1e3 }
	for i, r := range rows {
		if r.t == nil {
			return figure{}, fmt.Errorf("bench: the streams of %s: no replayed step", r.name)
		}
		compute, comm := float64(2*(len(rows)-1-i))+1, float64(2*(len(rows)-1-i))
		bars = append(bars, streamBar{0, ms(r.t.Step), compute, kernelColor})
		for _, iv := range r.t.Intervals {
			b := streamBar{ms(iv.Start), ms(iv.End), compute, blockColor}
			switch iv.Stream {
			case "waited":
				b.c = waitColor
			case "communication":
				b.y, b.c = comm, overlapColor
			}
			bars = append(bars, b)
		}
		ticks = append(ticks, plot.Tick{Value: compute, Label: r.name + ": compute"}, plot.Tick{Value: comm, Label: "communication"})
	}
	p.Add(bars)
	p.Y.Tick.Marker = plot.ConstantTicks(ticks)
	p.Y.Padding = 0
	leg := sideLegend()
	for _, l := range []struct {
		name string
		c    color.Color
	}{{"kernels", kernelColor}, {"collective (blocking)", blockColor}, {"waiting", waitColor}, {"collective (overlapped)", overlapColor}} {
		thumb := &plotter.BarChart{Color: l.c}
		leg.Add(l.name, thumb)
	}
	f := figure{plots: [][]*plot.Plot{{p}}, tiles: draw.Tiles{Rows: 1, Cols: 1}, width: 7.5 * vg.Inch, height: vg.Length(1+0.6*float64(len(rows))) * vg.Inch,
		legends: [][]*plot.Legend{{leg}}, legendWidth: 2.3 * vg.Inch}
	return f, nil
}
