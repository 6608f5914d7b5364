package stats

import (
	"math"
	"math/bits"
	"time"
)

// Histogram records durations in a log-linear (HDR-style) layout of fixed
// size: values below 2^histSubBits ns (2.048 us) are counted exactly, to the
// nanosecond; above, every power-of-two range is cut into 1024 equal
// buckets, so a bucket is at most 1/1024 of its value wide: 64 ns up to
// 131 us, 128 ns up to 262 us. Values from 2^histMaxExp ns (about 18
// minutes) up are counted in the last bucket. Record does not allocate; a
// Histogram is about 250 KiB, so keep it behind a pointer.
//
// The zero value is an empty histogram. It is not safe for concurrent use.
type Histogram struct {
	counts   [histBuckets]uint64
	n        uint64
	min, max int64
	sum      float64
}

const (
	histSubBits = 11
	histSub     = 1 << histSubBits // exact buckets below 2^histSubBits ns
	histHalf    = histSub / 2      // buckets per power of two above
	histMaxExp  = 40
	histBuckets = histSub + (histMaxExp-histSubBits)*histHalf
	histMax     = 1<<histMaxExp - 1 // largest value with its own bucket
)

// histIndex is the bucket of v (0 <= v <= histMax).
func histIndex(v int64) int {
	if v < histSub {
		return int(v)
	}
	e := bits.Len64(uint64(v)) - 1 // 2^e <= v < 2^(e+1), e >= histSubBits
	shift := e - (histSubBits - 1)
	return histSub + (e-histSubBits)*histHalf + int(v>>shift) - histHalf
}

// histBounds returns the smallest value of bucket i and the bucket's width.
func histBounds(i int) (lo, width int64) {
	if i < histSub {
		return int64(i), 1
	}
	k := i - histSub
	shift := k/histHalf + 1
	return int64(k%histHalf+histHalf) << shift, 1 << shift
}

// Record counts one duration. Negative durations count as 0, durations
// beyond about 18 minutes in the last bucket (a quantile that falls there is
// given as Max).
func (h *Histogram) Record(d time.Duration) {
	v := max(int64(d), 0)
	if h.n == 0 || v < h.min {
		h.min = v
	}
	if v > h.max {
		h.max = v
	}
	h.n++
	h.sum += float64(v)
	h.counts[histIndex(min(v, histMax))]++
}

// Count is the number of values recorded.
func (h *Histogram) Count() uint64 { return h.n }

// Min and Max are the smallest and largest values recorded, exactly; 0 for
// an empty histogram.
func (h *Histogram) Min() time.Duration { return time.Duration(h.min) }

// Max: see Min.
func (h *Histogram) Max() time.Duration { return time.Duration(h.max) }

// Mean is the exact mean of the values recorded; 0 for an empty histogram.
func (h *Histogram) Mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return time.Duration(h.sum / float64(h.n))
}

// Quantile returns the q-quantile (0 <= q <= 1) by nearest rank: the
// smallest recorded value v such that at least q of all values are <= v,
// given as the middle of v's bucket (so exact below 2.048 us, within half a
// bucket above) and kept within [Min, Max]. Quantile(0) is Min and
// Quantile(1) is Max. An empty histogram gives 0.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	if q <= 0 {
		return h.Min()
	}
	if q >= 1 {
		return h.Max()
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	rank = max(rank, 1)
	var seen uint64
	for i, c := range h.counts {
		if seen += c; seen >= rank {
			if i == histBuckets-1 {
				return h.Max() // it holds everything past the range
			}
			lo, w := histBounds(i)
			v := lo + (w-1)/2
			return time.Duration(min(max(v, h.min), h.max))
		}
	}
	return h.Max()
}

// Resolution is the width of the bucket that holds d: how far apart two
// durations near d can be and still share a bucket.
func Resolution(d time.Duration) time.Duration {
	_, w := histBounds(histIndex(min(max(int64(d), 0), histMax)))
	return time.Duration(w)
}

// Merge adds every value of o to h.
func (h *Histogram) Merge(o *Histogram) {
	if o.n == 0 {
		return
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	h.max = max(h.max, o.max)
	h.n += o.n
	h.sum += o.sum
	for i, c := range o.counts {
		h.counts[i] += c
	}
}

// Reset empties h.
func (h *Histogram) Reset() { *h = Histogram{} }
