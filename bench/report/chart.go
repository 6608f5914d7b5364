package report

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/tapfwd/tapfwd/bench/stats"
)

// A Chart is drawn into NAME.png and NAME.svg by WriteCharts.
type Chart interface {
	layout() (name string, w, h vg.Length, draw func(draw.Canvas))
}

// Palette gives a label (a configuration) its colour; i is the label's
// place, for labels without their own.
type Palette map[string]color.Color

func (p Palette) color(label string, i int) color.Color {
	if c, ok := p[label]; ok {
		return c
	}
	return plotutil.Color(i)
}

// BarGrid is a grid of bar charts, one bar per label at its median with
// whiskers spanning the interval.
type BarGrid struct {
	Name   string
	Labels []string  // the bars of every panel, left to right
	Panels [][]Panel // rows of panels
	Colors Palette
}

// Panel is one chart of a BarGrid.
type Panel struct {
	Title, YLabel string
	Values        []*stats.Estimate // one per label; nil draws no bar
}

// RatioChart draws ratios on a log scale, a row per item (top to bottom),
// a marker with whiskers per series, and a dashed line at 1: intervals
// crossing it are "no significant difference".
type RatioChart struct {
	Name, Title, XLabel string
	Rows                []string
	Series              []Series
	Colors              Palette
}

// Series is one set of markers of a RatioChart.
type Series struct {
	Name   string
	Ratios []*stats.Estimate // one per row; nil (or a low end <= 0) draws none
}

// WriteCharts writes each chart into dir as NAME.png and NAME.svg.
func WriteCharts(dir string, charts ...Chart) (err error) {
	// gonum/plot panics on data it cannot draw (a log axis reaching 0);
	// a chart is not worth losing the report for.
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("chart: %v", p)
		}
	}()
	for _, c := range charts {
		name, w, h, drawFn := c.layout()
		if drawFn == nil {
			continue
		}
		if err := saveBoth(dir, name, w, h, drawFn); err != nil {
			return err
		}
	}
	return nil
}

func (g BarGrid) layout() (string, vg.Length, vg.Length, func(draw.Canvas)) {
	cols := 0
	for _, row := range g.Panels {
		cols = max(cols, len(row))
	}
	if len(g.Labels) == 0 || cols == 0 {
		return g.Name, 0, 0, nil
	}
	grid := make([][]*plot.Plot, len(g.Panels))
	for i, row := range g.Panels {
		grid[i] = make([]*plot.Plot, cols)
		for j, p := range row {
			grid[i][j] = g.panel(p)
		}
	}
	w, h := vg.Length(cols)*3.4*vg.Inch, vg.Length(len(grid))*2.9*vg.Inch
	return g.Name, w, h, func(c draw.Canvas) {
		tiles := draw.Tiles{Rows: len(grid), Cols: cols, PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 4,
			PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
		cs := plot.Align(grid, tiles, c)
		for i := range grid {
			for j, p := range grid[i] {
				if p != nil {
					p.Draw(cs[i][j])
				}
			}
		}
	}
}

func (g BarGrid) panel(pn Panel) *plot.Plot {
	p := plot.New()
	p.Title.Text = pn.Title
	p.Title.TextStyle.Font.Size = vg.Points(10)
	p.Y.Label.Text = pn.YLabel
	p.Y.Min = 0
	p.NominalX(g.Labels...)
	p.X.Tick.Label.Rotation = math.Pi / 4
	p.X.Tick.Label.XAlign = draw.XRight
	p.X.Tick.Label.YAlign = draw.YCenter
	p.X.Tick.Label.Font.Size = vg.Points(8)
	var xys plotter.XYs
	var errs plotter.YErrors
	for i, label := range g.Labels {
		if i >= len(pn.Values) || pn.Values[i] == nil {
			continue
		}
		v := pn.Values[i]
		bar, err := plotter.NewBarChart(plotter.Values{v.Median}, vg.Points(14))
		if err != nil {
			continue
		}
		bar.XMin = float64(i)
		bar.Color = g.Colors.color(label, i)
		bar.LineStyle.Width = 0
		p.Add(bar)
		xys = append(xys, plotter.XY{X: float64(i), Y: v.Median})
		errs = append(errs, struct{ Low, High float64 }{v.Median - v.Low, v.High - v.Median})
	}
	if len(xys) > 0 {
		if eb, err := plotter.NewYErrorBars(errBars{xys, errs}); err == nil {
			eb.LineStyle.Width = vg.Points(1.2)
			p.Add(eb)
		}
	}
	return p
}

func (r RatioChart) layout() (string, vg.Length, vg.Length, func(draw.Canvas)) {
	if len(r.Series) == 0 || len(r.Rows) == 0 {
		return r.Name, 0, 0, nil
	}
	p := plot.New()
	p.Title.Text = r.Title
	n := len(r.Rows)
	names := make([]string, n)
	for i, row := range r.Rows {
		names[n-1-i] = row // top to bottom in the given order
	}
	p.NominalY(names...)
	p.Y.Tick.Label.Font.Size = vg.Points(8)
	p.X.Label.Text = r.XLabel
	p.X.Scale = plot.LogScale{}
	lo, hi := 1.0, 1.0
	for _, s := range r.Series {
		for _, e := range s.Ratios {
			if e != nil && e.Low > 0 {
				lo, hi = math.Min(lo, e.Low), math.Max(hi, e.High)
			}
		}
	}
	p.X.Min, p.X.Max = lo/1.1, hi*1.1
	p.X.Tick.Marker = ratioTicks{}
	p.Legend.Top = true
	p.Legend.TextStyle.Font.Size = vg.Points(9)
	p.Y.Max = float64(n) + 1 // room for the legend above the first row
	if one, err := plotter.NewLine(plotter.XYs{{X: 1, Y: -0.5}, {X: 1, Y: float64(n) - 0.5}}); err == nil {
		one.LineStyle.Dashes = []vg.Length{vg.Points(3), vg.Points(3)}
		p.Add(one)
	}
	for k, s := range r.Series {
		r.addSeries(p, k, s)
	}
	h := vg.Length(n+2)*0.32*vg.Inch + 1.4*vg.Inch
	return r.Name, 8 * vg.Inch, h, p.Draw
}

func (r RatioChart) addSeries(p *plot.Plot, k int, s Series) {
	n := len(r.Rows)
	var xys plotter.XYs
	var errs plotter.XErrors
	for i, e := range s.Ratios {
		if e == nil || e.Low <= 0 || i >= n {
			continue
		}
		y := float64(n-1-i) + 0.22*float64(1-k)
		xys = append(xys, plotter.XY{X: e.Median, Y: y})
		errs = append(errs, struct{ Low, High float64 }{e.Median - e.Low, e.High - e.Median})
	}
	if len(xys) == 0 {
		return
	}
	sc, err := plotter.NewScatter(xys)
	if err != nil {
		return
	}
	c := r.Colors.color(s.Name, k)
	sc.GlyphStyle.Color = c
	sc.GlyphStyle.Radius = vg.Points(2.5)
	sc.GlyphStyle.Shape = draw.CircleGlyph{}
	eb, err := plotter.NewXErrorBars(xErrBars{xys, errs})
	if err != nil {
		return
	}
	eb.LineStyle.Color = c
	eb.CapWidth = vg.Points(3)
	p.Add(eb, sc)
	p.Legend.Add(s.Name, sc)
}

type errBars struct {
	plotter.XYs
	plotter.YErrors
}

type xErrBars struct {
	plotter.XYs
	plotter.XErrors
}

// ratioTicks marks powers of two (and 0.75 to 1.5 on narrow ranges) with
// labels like "x2" and "x0.5".
type ratioTicks struct{}

func (ratioTicks) Ticks(min, max float64) []plot.Tick {
	var t []plot.Tick
	for e := -10; e <= 10; e++ {
		v := math.Pow(2, float64(e))
		if v >= min && v <= max {
			t = append(t, plot.Tick{Value: v, Label: "x" + strconv.FormatFloat(v, 'g', 3, 64)})
		}
	}
	if max/min < 4 {
		for _, v := range []float64{0.75, 0.9, 1.1, 1.25, 1.5} {
			if v >= min && v <= max {
				t = append(t, plot.Tick{Value: v, Label: "x" + strconv.FormatFloat(v, 'g', 3, 64)})
			}
		}
	}
	return t
}

// saveBoth draws into a PNG and an SVG canvas of w x h and writes
// dir/name.png and dir/name.svg.
func saveBoth(dir, name string, w, h vg.Length, drawFn func(draw.Canvas)) error {
	img := vgimg.NewWith(vgimg.UseWH(w, h), vgimg.UseDPI(110))
	fillWhite(img, w, h)
	drawFn(draw.New(img))
	if err := save(filepath.Join(dir, name+".png"), vgimg.PngCanvas{Canvas: img}); err != nil {
		return err
	}
	svg := vgsvg.New(w, h)
	fillWhite(svg, w, h)
	drawFn(draw.New(svg))
	return save(filepath.Join(dir, name+".svg"), svg)
}

func fillWhite(c vg.Canvas, w, h vg.Length) {
	c.SetColor(color.White)
	c.Fill(vg.Path{{Type: vg.MoveComp, Pos: vg.Point{}}, {Type: vg.LineComp, Pos: vg.Point{X: w}},
		{Type: vg.LineComp, Pos: vg.Point{X: w, Y: h}}, {Type: vg.LineComp, Pos: vg.Point{Y: h}}, {Type: vg.CloseComp}})
}

func save(path string, wt io.WriterTo) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("chart: %w", err)
	}
	if _, err := wt.WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("chart: writing %s: %w", path, err)
	}
	return f.Close()
}
