package stats

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestHistogramBuckets(t *testing.T) {
	// Every bucket's bounds map back to it, buckets tile the range without
	// gaps, and the width stays within 1/1024 of the value above 2 us.
	next := int64(0)
	for i := range histBuckets {
		lo, w := histBounds(i)
		if lo != next {
			t.Fatalf("bucket %d starts at %d, want %d", i, lo, next)
		}
		if histIndex(lo) != i || histIndex(lo+w-1) != i {
			t.Fatalf("bucket %d [%d, %d]: index of its ends %d, %d", i, lo, lo+w-1, histIndex(lo), histIndex(lo+w-1))
		}
		if lo >= histSub && w*histHalf > lo {
			t.Fatalf("bucket %d at %d is %d wide: more than 1/%d", i, lo, w, histHalf)
		}
		next = lo + w
	}
	if next != histMax+1 {
		t.Fatalf("buckets end at %d, want %d", next, int64(histMax+1))
	}
	for _, tc := range []struct{ d, res time.Duration }{
		{0, 1}, {2047, 1}, {2048, 2}, {13 * time.Microsecond, 8},
		{100 * time.Microsecond, 64}, {131071, 64}, {131072, 128},
	} {
		if got := Resolution(tc.d); got != tc.res {
			t.Errorf("Resolution(%d ns) = %d ns, want %d", tc.d, got, tc.res)
		}
	}
}

// nearestRank is the exact nearest-rank quantile of sorted s.
func nearestRank(s []time.Duration, q float64) time.Duration {
	r := int(math.Ceil(q * float64(len(s))))
	return s[max(r, 1)-1]
}

func TestHistogramQuantiles(t *testing.T) {
	var h Histogram
	// Exact below 2 us: 1..1000 ns.
	for v := 1000; v >= 1; v-- {
		h.Record(time.Duration(v))
	}
	for _, tc := range []struct {
		q    float64
		want time.Duration
	}{
		{0, 1}, {0.05, 50}, {0.5, 500}, {0.95, 950}, {0.99, 990}, {0.999, 999}, {1, 1000}, {0.0001, 1},
	} {
		if got := h.Quantile(tc.q); got != tc.want {
			t.Errorf("1..1000 ns: Quantile(%v) = %d, want %d", tc.q, got, tc.want)
		}
	}
	if h.Count() != 1000 || h.Min() != 1 || h.Max() != 1000 || h.Mean() != 500 {
		t.Errorf("count %d min %v max %v mean %v", h.Count(), h.Min(), h.Max(), h.Mean())
	}

	// Round-trip-like samples: 5 us to 2 ms, log-normal around 40 us with a
	// tail. Every quantile must be within half a bucket of the exact one,
	// and within 100 ns below 131 us.
	r := rand.New(rand.NewPCG(1, 2))
	h.Reset()
	var s []time.Duration
	for range 200000 {
		d := time.Duration(math.Exp(math.Log(40e3)+0.5*r.NormFloat64())) + 5*time.Microsecond
		d = min(d, 2*time.Millisecond)
		s = append(s, d)
		h.Record(d)
	}
	slices.Sort(s)
	for _, q := range []float64{0, 0.05, 0.5, 0.95, 0.99, 0.999, 1} {
		want, got := nearestRank(s, q), h.Quantile(q)
		diff := got - want
		if diff < 0 {
			diff = -diff
		}
		if diff > Resolution(want)/2 {
			t.Errorf("Quantile(%v) = %v, exact %v: off by %v, more than half the resolution %v", q, got, want, diff, Resolution(want))
		}
		if want < 131*time.Microsecond && diff > 100 {
			t.Errorf("Quantile(%v) = %v, exact %v: off by more than 100 ns", q, got, want)
		}
	}
	if h.Min() != s[0] || h.Max() != s[len(s)-1] {
		t.Errorf("min %v max %v, want %v %v", h.Min(), h.Max(), s[0], s[len(s)-1])
	}
}

func TestHistogramEdges(t *testing.T) {
	var h Histogram
	if h.Quantile(0.5) != 0 || h.Min() != 0 || h.Max() != 0 || h.Mean() != 0 {
		t.Error("empty histogram: want zeros")
	}
	h.Record(-5)
	h.Record(time.Hour)
	if h.Min() != 0 || h.Max() != time.Hour || h.Count() != 2 {
		t.Errorf("min %v max %v count %d", h.Min(), h.Max(), h.Count())
	}
	if got := h.Quantile(0.99); got != time.Hour {
		t.Errorf("a value past the range: Quantile(0.99) = %v, want it clamped to Max 1h", got)
	}
	var a, b Histogram
	for v := 1; v <= 10; v++ {
		a.Record(time.Duration(v))
		b.Record(time.Duration(10 + v))
	}
	a.Merge(&b)
	var empty Histogram
	a.Merge(&empty)
	if a.Count() != 20 || a.Min() != 1 || a.Max() != 20 || a.Quantile(0.5) != 10 {
		t.Errorf("merged: count %d min %v max %v p50 %v", a.Count(), a.Min(), a.Max(), a.Quantile(0.5))
	}
	empty.Merge(&b)
	if empty.Min() != 11 {
		t.Errorf("merge into empty: min %v, want 11", empty.Min())
	}
}

func TestHistogramRecordAllocs(t *testing.T) {
	h := new(Histogram)
	d := time.Duration(0)
	if n := testing.AllocsPerRun(10000, func() {
		d += 997
		h.Record(d)
	}); n != 0 {
		t.Errorf("Record allocates %v times per call", n)
	}
}

func BenchmarkHistogramRecord(b *testing.B) {
	h := new(Histogram)
	b.ReportAllocs()
	d := time.Duration(0)
	for b.Loop() {
		d = (d + 7919) % (10 * time.Millisecond)
		h.Record(d)
	}
}
