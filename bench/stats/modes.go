package stats

import (
	"math"
	"slices"
)

// TwoModes reports whether x (positive figures) falls in two clusters,
// and the value between them: sorted, x has a gap between two
// neighbours, with at least 2 values each side, that is a factor 1.2 or
// more and twice as wide (in the logarithm) as either side's own range.
// Runs that land in one of two states of a machine (the 128 B runs
// through tapfwd at about 0.36 or 0.58 Gbit/s) look like that; one
// outlier or a spread-out sample does not. Of several such gaps the
// widest counts; split is the geometric mean of its ends. False with
// fewer than 5 values, or any not positive.
func TwoModes(x []float64) (split float64, ok bool) {
	if len(x) < 5 {
		return 0, false
	}
	l := make([]float64, len(x))
	for i, v := range x {
		if !(v > 0) {
			return 0, false
		}
		l[i] = math.Log(v)
	}
	slices.Sort(l)
	n, best := len(l), 0.0
	for i := 2; i <= n-2; i++ {
		gap := l[i] - l[i-1]
		if gap >= math.Log(1.2) && gap >= 2*max(l[i-1]-l[0], l[n-1]-l[i]) && gap > best {
			best, split = gap, math.Exp((l[i]+l[i-1])/2)
		}
	}
	return split, best > 0
}
