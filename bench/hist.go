package bench

import (
	"bufio"
	"fmt"
	"html"
	"image"
	"image/color"
	"image/png"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Bin is one bar of a latency histogram: the latencies in [Lo, Hi) ms.
type Bin struct {
	Lo, Hi float64
	Count  int
}

// minLatency is the floor of the log scale (1 µs): a 0 ms sample counts here.
const minLatency = 0.001

// Histogram puts latencies (ms) into log-spaced bins, binsPerDecade to a
// power of ten, from the bin of the smallest to the bin of the largest
// (empty bins in between included). Bin edges are powers of ten apart by
// 1/binsPerDecade, so they line up across runs.
func Histogram(ms []float64, binsPerDecade int) []Bin {
	if len(ms) == 0 {
		return nil
	}
	binsPerDecade = max(1, binsPerDecade)
	bpd := float64(binsPerDecade)
	idx := func(v float64) int { return int(math.Floor(math.Log10(max(v, minLatency))*bpd + 1e-9)) }
	lo, hi := idx(slices.Min(ms)), idx(slices.Max(ms))
	bins := make([]Bin, hi-lo+1)
	for i := range bins {
		bins[i] = Bin{Lo: math.Pow(10, float64(lo+i)/bpd), Hi: math.Pow(10, float64(lo+i+1)/bpd)}
	}
	for _, v := range ms {
		i := min(max(idx(v)-lo, 0), len(bins)-1)
		bins[i].Count++
	}
	return bins
}

// WriteHistogramFile writes the histogram of r's latencies as a picture:
// SVG when path ends in .svg, PNG when it ends in .png.
func WriteHistogramFile(path, title string, r *Report) error {
	ext := strings.ToLower(filepath.Ext(path))
	if ext != ".svg" && ext != ".png" {
		return fmt.Errorf("bench: histogram file %q must end in .svg or .png", path)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	bw := bufio.NewWriter(f)
	if ext == ".svg" {
		err = WriteHistogramSVG(bw, title, r.Latencies)
	} else {
		err = WriteHistogramPNG(bw, title, r.Latencies)
	}
	if err == nil {
		err = bw.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// WriteHistogramSVG draws the latency histogram (ms, log-scale x axis,
// one <rect class="bar"> per non-empty bin, p50/p90/p99/max marked) as a
// standalone SVG document.
func WriteHistogramSVG(w io.Writer, title string, ms []float64) error {
	c := &svgCanvas{}
	drawHistogram(c, title, ms)
	var b strings.Builder
	fmt.Fprintf(&b, `<?xml version="1.0" encoding="UTF-8"?>`+"\n")
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif">`+"\n", histW, histH, histW, histH)
	fmt.Fprintf(&b, `<rect x="0" y="0" width="%d" height="%d" fill="#ffffff"/>`+"\n", histW, histH)
	b.WriteString(c.b.String())
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteHistogramPNG draws the same picture as WriteHistogramSVG as a PNG
// (with a small built-in bitmap font).
func WriteHistogramPNG(w io.Writer, title string, ms []float64) error {
	img := image.NewRGBA(image.Rect(0, 0, histW, histH))
	for i := range img.Pix {
		img.Pix[i] = 0xff
	}
	drawHistogram(&pngCanvas{img}, title, ms)
	return png.Encode(w, img)
}

const (
	histW, histH                    = 900, 460
	marginL, marginR, marginT, marg = 70, 30, 50, 60
)

var (
	colBar  = color.RGBA{0x4c, 0x78, 0xa8, 0xff}
	colAxis = color.RGBA{0x33, 0x33, 0x33, 0xff}
	colGrid = color.RGBA{0xdd, 0xdd, 0xdd, 0xff}
	colMark = color.RGBA{0xd6, 0x27, 0x28, 0xff}
	colText = color.RGBA{0x22, 0x22, 0x22, 0xff}
)

type anchor int

const (
	anchorStart anchor = iota
	anchorMiddle
	anchorEnd
)

// canvas is what drawHistogram needs from a picture format.
type canvas interface {
	rect(x, y, w, h float64, c color.RGBA, class string)
	line(x1, y1, x2, y2 float64, c color.RGBA, dashed bool)
	text(x, y float64, s string, a anchor, c color.RGBA)
}

func drawHistogram(c canvas, title string, ms []float64) {
	plotL, plotR := float64(marginL), float64(histW-marginR)
	plotT, plotB := float64(marginT), float64(histH-marg)
	c.text(plotL, 28, title, anchorStart, colText)
	sorted := slices.Clone(ms)
	slices.Sort(sorted)
	bins := Histogram(sorted, 10)
	if len(bins) == 0 {
		c.text((plotL+plotR)/2, (plotT+plotB)/2, "no samples", anchorMiddle, colText)
		return
	}
	// x: whole decades around the data, log scale.
	dLo := math.Floor(math.Log10(bins[0].Lo) + 1e-9)
	dHi := math.Ceil(math.Log10(bins[len(bins)-1].Hi) - 1e-9)
	if dHi <= dLo {
		dHi = dLo + 1
	}
	x := func(v float64) float64 {
		return plotL + (math.Log10(max(v, minLatency))-dLo)/(dHi-dLo)*(plotR-plotL)
	}
	maxCount := 0
	for _, b := range bins {
		maxCount = max(maxCount, b.Count)
	}
	yStep := niceStep(float64(maxCount) / 5)
	yTop := math.Ceil(float64(maxCount)/yStep) * yStep
	y := func(n float64) float64 { return plotB - n/yTop*(plotB-plotT) }
	// grid and y labels
	for v := 0.0; v <= yTop+yStep/2; v += yStep {
		c.line(plotL, y(v), plotR, y(v), colGrid, false)
		c.text(plotL-6, y(v)+4, strconv.FormatFloat(v, 'f', -1, 64), anchorEnd, colText)
	}
	// x ticks: 1, 2, 5 of every decade
	for d := dLo; d <= dHi; d++ {
		for _, m := range []float64{1, 2, 5} {
			v := m * math.Pow(10, d)
			if math.Log10(v) > dHi+1e-9 {
				break
			}
			xv := x(v)
			if m == 1 {
				c.line(xv, plotT, xv, plotB, colGrid, false)
			}
			c.line(xv, plotB, xv, plotB+5, colAxis, false)
			c.text(xv, plotB+18, fmtMS(v), anchorMiddle, colText)
		}
	}
	for _, b := range bins {
		if b.Count == 0 {
			continue
		}
		x0, x1 := x(b.Lo), x(b.Hi)
		c.rect(x0+0.5, y(float64(b.Count)), max(x1-x0-1, 1), plotB-y(float64(b.Count)), colBar, "bar")
	}
	c.line(plotL, plotB, plotR, plotB, colAxis, false)
	c.line(plotL, plotT, plotL, plotB, colAxis, false)
	// percentile marks
	marks := []struct {
		name string
		v    float64
	}{{"p50", percentile(sorted, 0.5)}, {"p90", percentile(sorted, 0.9)}, {"p99", percentile(sorted, 0.99)}, {"max", sorted[len(sorted)-1]}}
	for i, m := range marks {
		xv := x(m.v)
		c.line(xv, plotT, xv, plotB, colMark, true)
		c.text(xv+3, plotT+12+float64(i)*14, m.name+" "+fmtMS(m.v)+"ms", anchorStart, colMark)
	}
	c.text((plotL+plotR)/2, float64(histH)-14, "latency (ms, log scale), "+strconv.Itoa(len(sorted))+" operations", anchorMiddle, colText)
	c.text(14, plotT-10, "count", anchorStart, colText)
}

// niceStep rounds s up to 1, 2 or 5 times a power of ten (at least 1).
func niceStep(s float64) float64 {
	if s <= 1 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(s)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= s {
			return m * p
		}
	}
	return 10 * p
}

func fmtMS(v float64) string {
	switch {
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 10:
		return strconv.FormatFloat(math.Round(v*10)/10, 'f', -1, 64)
	case v >= 1:
		return strconv.FormatFloat(math.Round(v*100)/100, 'f', -1, 64)
	default:
		return strconv.FormatFloat(v, 'g', 3, 64)
	}
}

type svgCanvas struct{ b strings.Builder }

func hex(c color.RGBA) string { return fmt.Sprintf("#%02x%02x%02x", c.R, c.G, c.B) }

func (s *svgCanvas) rect(x, y, w, h float64, c color.RGBA, class string) {
	fmt.Fprintf(&s.b, `<rect class="%s" x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>`+"\n", class, x, y, w, h, hex(c))
}

func (s *svgCanvas) line(x1, y1, x2, y2 float64, c color.RGBA, dashed bool) {
	dash := ""
	if dashed {
		dash = ` stroke-dasharray="4 3"`
	}
	fmt.Fprintf(&s.b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="1"%s/>`+"\n", x1, y1, x2, y2, hex(c), dash)
}

func (s *svgCanvas) text(x, y float64, str string, a anchor, c color.RGBA) {
	anc := [...]string{"start", "middle", "end"}[a]
	fmt.Fprintf(&s.b, `<text x="%.1f" y="%.1f" font-size="12" text-anchor="%s" fill="%s">%s</text>`+"\n", x, y, anc, hex(c), html.EscapeString(str))
}

type pngCanvas struct{ img *image.RGBA }

func (p *pngCanvas) rect(x, y, w, h float64, c color.RGBA, _ string) {
	r := image.Rect(int(math.Round(x)), int(math.Round(y)), int(math.Round(x+w)), int(math.Round(y+h))).Intersect(p.img.Bounds())
	for yy := r.Min.Y; yy < r.Max.Y; yy++ {
		for xx := r.Min.X; xx < r.Max.X; xx++ {
			p.img.SetRGBA(xx, yy, c)
		}
	}
}

func (p *pngCanvas) line(x1, y1, x2, y2 float64, c color.RGBA, dashed bool) {
	n := int(math.Max(math.Abs(x2-x1), math.Abs(y2-y1))) + 1
	for i := 0; i <= n; i++ {
		if dashed && i%7 >= 4 {
			continue
		}
		t := float64(i) / float64(n)
		p.img.SetRGBA(int(math.Round(x1+(x2-x1)*t)), int(math.Round(y1+(y2-y1)*t)), c)
	}
}

// text draws s with the 5x7 font, one pixel per dot, 6 pixels a character;
// y is the baseline as in SVG.
func (p *pngCanvas) text(x, y float64, s string, a anchor, c color.RGBA) {
	s = strings.ToLower(s)
	w := float64(6 * len([]rune(s)))
	switch a {
	case anchorMiddle:
		x -= w / 2
	case anchorEnd:
		x -= w
	}
	x0, y0 := int(math.Round(x)), int(math.Round(y))-7
	for i, r := range []rune(s) {
		g, ok := font5x7[r]
		if !ok {
			g = font5x7['?']
		}
		for row, bits := range g {
			for col := 0; col < 5; col++ {
				if bits[col] == '#' {
					p.img.SetRGBA(x0+6*i+col, y0+row, c)
				}
			}
		}
	}
}

// font5x7 is a minimal bitmap font for the PNG's labels.
var font5x7 = map[rune][7]string{
	' ': {".....", ".....", ".....", ".....", ".....", ".....", "....."},
	'0': {".###.", "#...#", "#..##", "#.#.#", "##..#", "#...#", ".###."},
	'1': {"..#..", ".##..", "..#..", "..#..", "..#..", "..#..", ".###."},
	'2': {".###.", "#...#", "....#", "...#.", "..#..", ".#...", "#####"},
	'3': {"#####", "...#.", "..#..", "...#.", "....#", "#...#", ".###."},
	'4': {"...#.", "..##.", ".#.#.", "#..#.", "#####", "...#.", "...#."},
	'5': {"#####", "#....", "####.", "....#", "....#", "#...#", ".###."},
	'6': {"..##.", ".#...", "#....", "####.", "#...#", "#...#", ".###."},
	'7': {"#####", "....#", "...#.", "..#..", ".#...", ".#...", ".#..."},
	'8': {".###.", "#...#", "#...#", ".###.", "#...#", "#...#", ".###."},
	'9': {".###.", "#...#", "#...#", ".####", "....#", "...#.", ".##.."},
	'.': {".....", ".....", ".....", ".....", ".....", ".##..", ".##.."},
	',': {".....", ".....", ".....", ".....", ".##..", "..#..", ".#..."},
	':': {".....", ".##..", ".##..", ".....", ".##..", ".##..", "....."},
	'=': {".....", ".....", "#####", ".....", "#####", ".....", "....."},
	'-': {".....", ".....", ".....", "#####", ".....", ".....", "....."},
	'+': {".....", "..#..", "..#..", "#####", "..#..", "..#..", "....."},
	'/': {".....", "....#", "...#.", "..#..", ".#...", "#....", "....."},
	'(': {"...#.", "..#..", ".#...", ".#...", ".#...", "..#..", "...#."},
	')': {".#...", "..#..", "...#.", "...#.", "...#.", "..#..", ".#..."},
	'%': {"##...", "##..#", "...#.", "..#..", ".#...", "#..##", "...##"},
	'?': {".###.", "#...#", "....#", "...#.", "..#..", ".....", "..#.."},
	'_': {".....", ".....", ".....", ".....", ".....", ".....", "#####"},
	'a': {".....", ".....", ".###.", "....#", ".####", "#...#", ".####"},
	'b': {"#....", "#....", "#.##.", "##..#", "#...#", "#...#", "####."},
	'c': {".....", ".....", ".###.", "#....", "#....", "#...#", ".###."},
	'd': {"....#", "....#", ".##.#", "#..##", "#...#", "#...#", ".####"},
	'e': {".....", ".....", ".###.", "#...#", "#####", "#....", ".###."},
	'f': {"..##.", ".#..#", ".#...", "###..", ".#...", ".#...", ".#..."},
	'g': {".....", ".####", "#...#", "#...#", ".####", "....#", ".###."},
	'h': {"#....", "#....", "#.##.", "##..#", "#...#", "#...#", "#...#"},
	'i': {"..#..", ".....", ".##..", "..#..", "..#..", "..#..", ".###."},
	'j': {"...#.", ".....", "..##.", "...#.", "...#.", "#..#.", ".##.."},
	'k': {"#....", "#....", "#..#.", "#.#..", "##...", "#.#..", "#..#."},
	'l': {".##..", "..#..", "..#..", "..#..", "..#..", "..#..", ".###."},
	'm': {".....", ".....", "##.#.", "#.#.#", "#.#.#", "#...#", "#...#"},
	'n': {".....", ".....", "#.##.", "##..#", "#...#", "#...#", "#...#"},
	'o': {".....", ".....", ".###.", "#...#", "#...#", "#...#", ".###."},
	'p': {".....", ".....", "####.", "#...#", "####.", "#....", "#...."},
	'q': {".....", ".....", ".##.#", "#..##", ".####", "....#", "....#"},
	'r': {".....", ".....", "#.##.", "##..#", "#....", "#....", "#...."},
	's': {".....", ".....", ".###.", "#....", ".###.", "....#", "####."},
	't': {".#...", ".#...", "###..", ".#...", ".#...", ".#..#", "..##."},
	'u': {".....", ".....", "#...#", "#...#", "#...#", "#..##", ".##.#"},
	'v': {".....", ".....", "#...#", "#...#", "#...#", ".#.#.", "..#.."},
	'w': {".....", ".....", "#...#", "#...#", "#.#.#", "#.#.#", ".#.#."},
	'x': {".....", ".....", "#...#", ".#.#.", "..#..", ".#.#.", "#...#"},
	'y': {".....", ".....", "#...#", "#...#", ".####", "....#", ".###."},
	'z': {".....", ".....", "#####", "...#.", "..#..", ".#...", "#####"},
}
