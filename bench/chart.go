package bench

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
)

// WriteCharts writes throughput.png and throughput.svg (one panel per
// workload: a bar per configuration at its median, whiskers spanning the
// 95% interval) and, when the report has comparisons, napi.png and napi.svg
// (each TAP NAPI mode's change against IFF_NAPI off, in percent, with its
// interval) into dir.
func WriteCharts(r *Report, dir string) (err error) {
	// gonum/plot panics on data it cannot draw (a log axis reaching 0);
	// a chart is not worth losing the report for.
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("chart: %v", p)
		}
	}()
	grid, cols := r.throughputPanels()
	if len(grid) > 0 {
		w, h := vg.Length(cols)*3.4*vg.Inch, vg.Length(len(grid))*2.9*vg.Inch
		if err := saveBoth(dir, "throughput", w, h, func(c draw.Canvas) {
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
		}); err != nil {
			return err
		}
	}
	if p := r.napiPlot(); p != nil {
		h := vg.Length(len(r.Workloads)+2)*0.32*vg.Inch + 1.4*vg.Inch
		if err := saveBoth(dir, "napi", 8*vg.Inch, h, p.Draw); err != nil {
			return err
		}
	}
	return nil
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

// throughputPanels lays out one plot per workload: a row per group, a
// column per size.
func (r *Report) throughputPanels() ([][]*plot.Plot, int) {
	var ran []Config
	for _, c := range r.Configs {
		if c.Skipped == "" {
			ran = append(ran, c)
		}
	}
	if len(ran) == 0 {
		return nil, 0
	}
	names := make([]string, len(ran))
	for i, c := range ran {
		names[i] = c.Name
	}
	var grid [][]*plot.Plot
	cols := 0
	for _, g := range r.groups() {
		var row []*plot.Plot
		for _, w := range g.Workloads {
			p := plot.New()
			p.Title.Text = panelTitle(g, w)
			p.Title.TextStyle.Font.Size = vg.Points(10)
			p.Y.Label.Text = w.Unit + " (median, 95% CI)"
			p.Y.Min = 0
			p.NominalX(names...)
			p.X.Tick.Label.Rotation = math.Pi / 4
			p.X.Tick.Label.XAlign = draw.XRight
			p.X.Tick.Label.YAlign = draw.YCenter
			p.X.Tick.Label.Font.Size = vg.Points(8)
			var xys plotter.XYs
			var errs plotter.YErrors
			for i, c := range ran {
				cell := r.Cell(c.Name, w.Name)
				if cell == nil || cell.Value == nil {
					continue
				}
				v := plotter.Values{cell.Value.Median}
				bar, err := plotter.NewBarChart(v, vg.Points(14))
				if err != nil {
					continue
				}
				bar.XMin = float64(i)
				bar.Color = configColor(c.Name, i)
				bar.LineStyle.Width = 0
				p.Add(bar)
				xys = append(xys, plotter.XY{X: float64(i), Y: cell.Value.Median})
				errs = append(errs, struct{ Low, High float64 }{cell.Value.Median - cell.Value.Low, cell.Value.High - cell.Value.Median})
			}
			if len(xys) > 0 {
				eb, err := plotter.NewYErrorBars(errBars{xys, errs})
				if err == nil {
					eb.LineStyle.Width = vg.Points(1.2)
					p.Add(eb)
				}
			}
			row = append(row, p)
		}
		cols = max(cols, len(row))
		grid = append(grid, row)
	}
	for i := range grid {
		for len(grid[i]) < cols {
			grid[i] = append(grid[i], nil)
		}
	}
	return grid, cols
}

func panelTitle(g group, w Workload) string {
	if g.Proto == "udp" {
		return fmt.Sprintf("UDP %s %s, delivered", SizeName(w.Len), g.Direction)
	}
	return fmt.Sprintf("TCP %s -P %d -l %s", g.Direction, g.Streams, SizeName(w.Len))
}

type errBars struct {
	plotter.XYs
	plotter.YErrors
}

type xErrBars struct {
	plotter.XYs
	plotter.XErrors
}

// napiPlot draws each TAP NAPI mode's median against NAPIOff's per
// workload as a ratio on a log scale, with its interval, and a line at 1:
// intervals crossing it are "no significant difference".
func (r *Report) napiPlot() *plot.Plot {
	if len(r.Comparisons) == 0 {
		return nil
	}
	p := plot.New()
	p.Title.Text = "TAP NAPI modes against " + NAPIOff + ": ratio of medians (95% CI)"
	n := len(r.Workloads)
	names := make([]string, n)
	// Workloads top to bottom in report order.
	for i, w := range r.Workloads {
		names[n-1-i] = w.Name
	}
	p.NominalY(names...)
	p.Y.Tick.Label.Font.Size = vg.Points(8)
	p.X.Label.Text = "median / median of " + NAPIOff + " (log scale; right of 1 is faster)"
	p.X.Scale = plot.LogScale{}
	lo, hi := 1.0, 1.0
	for _, c := range r.Comparisons {
		if c.Ratio.Low > 0 {
			lo, hi = math.Min(lo, c.Ratio.Low), math.Max(hi, c.Ratio.High)
		}
	}
	p.X.Min, p.X.Max = lo/1.1, hi*1.1
	p.X.Tick.Marker = ratioTicks{}
	p.Legend.Top = true
	p.Legend.TextStyle.Font.Size = vg.Points(9)
	p.Y.Max = float64(n) + 1 // room for the legend above the first workload
	zero, err := plotter.NewLine(plotter.XYs{{X: 1, Y: -0.5}, {X: 1, Y: float64(n) - 0.5}})
	if err == nil {
		zero.LineStyle.Dashes = []vg.Length{vg.Points(3), vg.Points(3)}
		p.Add(zero)
	}
	for k, ab := range comparisons {
		var xys plotter.XYs
		var errs plotter.XErrors
		for i, w := range r.Workloads {
			c := r.Comparison(ab[0], ab[1], w.Name)
			if c == nil || c.Ratio.Low <= 0 {
				continue
			}
			y := float64(n-1-i) + 0.22*float64(1-k)
			xys = append(xys, plotter.XY{X: c.Ratio.Median, Y: y})
			errs = append(errs, struct{ Low, High float64 }{c.Ratio.Median - c.Ratio.Low, c.Ratio.High - c.Ratio.Median})
		}
		if len(xys) == 0 {
			continue
		}
		sc, err := plotter.NewScatter(xys)
		if err != nil {
			continue
		}
		sc.GlyphStyle.Color = configColor(ab[0], k)
		sc.GlyphStyle.Radius = vg.Points(2.5)
		sc.GlyphStyle.Shape = draw.CircleGlyph{}
		eb, err := plotter.NewXErrorBars(xErrBars{xys, errs})
		if err != nil {
			continue
		}
		eb.LineStyle.Color = configColor(ab[0], k)
		eb.CapWidth = vg.Points(3)
		p.Add(eb, sc)
		p.Legend.Add(ab[0], sc)
	}
	return p
}

// ratioTicks marks powers of two (and 1.5, 0.75 on narrow ranges) with
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

// palette gives every known configuration its colour: the tapfwd variants
// bright, the naive baseline brown, the kernel baselines grey.
var palette = map[string]color.Color{
	NAPIOff:      color.RGBA{0xd6, 0x27, 0x28, 0xff},
	NAPIOn:       color.RGBA{0x2c, 0xa0, 0x2c, 0xff},
	NAPIThreaded: color.RGBA{0x1f, 0x77, 0xb4, 0xff},
	NAPIGRO:      color.RGBA{0xff, 0x7f, 0x0e, 0xff},
	VnetOff:      color.RGBA{0x94, 0x67, 0xbd, 0xff},
	Queues2:      color.RGBA{0x17, 0xbe, 0xcf, 0xff},
	Naive:        color.RGBA{0x8c, 0x56, 0x4b, 0xff},
	Bridge:       color.RGBA{0x55, 0x55, 0x55, 0xff},
	Direct:       color.RGBA{0xaa, 0xaa, 0xaa, 0xff},
}

func configColor(name string, i int) color.Color {
	if c, ok := palette[name]; ok {
		return c
	}
	return plotutil.Color(i)
}
