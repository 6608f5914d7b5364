package report

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/tapfwd/tapfwd/bench/stats"
)

// Num formats a figure with three significant digits, as the reference
// table does: 0.593, 1.00, 17.6, 308.
func Num(v float64) string {
	a := math.Abs(v)
	switch {
	case math.IsNaN(v):
		return "-"
	case a == 0:
		return "0"
	case a < 1:
		return strconv.FormatFloat(v, 'f', 3, 64)
	case a < 10:
		return strconv.FormatFloat(v, 'f', 2, 64)
	case a < 100:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 0, 64)
}

// Signed is Num with a sign: +1.00, -0.593.
func Signed(v float64) string {
	if v > 0 || (v == 0 && !math.Signbit(v)) {
		return "+" + Num(v)
	}
	return Num(v)
}

// Pct writes a change in percent: one decimal below 10%, none above.
func Pct(v float64) string {
	if math.Abs(v) < 9.95 {
		return fmt.Sprintf("%+.1f%%", v)
	}
	return fmt.Sprintf("%+.0f%%", v)
}

// PctAbs writes a positive percentage without its sign: 7.5%, 11%.
func PctAbs(v float64) string { return strings.TrimPrefix(Pct(v), "+") }

// Est formats "median [low, high]"; "-" for nil.
func Est(e *stats.Estimate) string {
	if e == nil {
		return "-"
	}
	return fmt.Sprintf("%s [%s, %s]", Num(e.Median), Num(e.Low), Num(e.High))
}

// DiffEst formats a difference "+median [+low, +high] (+change%)", each
// figure divided by scale (1e3: ns as us).
func DiffEst(d stats.Difference, scale float64) string {
	return fmt.Sprintf("%s [%s, %s] (%s)", Signed(d.Diff.Median/scale), Signed(d.Diff.Low/scale), Signed(d.Diff.High/scale), Pct(d.Percent.Median))
}

// Ratio formats a ratio's median with two decimals; "-" for nil.
func Ratio(e *stats.Estimate) string {
	if e == nil {
		return "-"
	}
	return strconv.FormatFloat(e.Median, 'f', 2, 64)
}

// Plural returns one when n is 1, else many.
func Plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
