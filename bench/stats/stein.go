package stats

import "math"

// steinInterval is Stein's two-stage interval of a mean (stein): the
// mean of the first N estimates, its standard error SE = s1 / sqrt(N)
// and the interval's half-width Half = t(k-1) * s1 / sqrt(N), all in
// the estimates' unit; Need is how many estimates the rule asked for.
type steinInterval struct {
	Mean, SE, Half float64
	N, Need        int
}

// stein is Stein's two-stage interval of the mean of d, whose first k
// estimates (at least 2) are the first stage: their standard deviation s1
// fixes how many estimates the interval needs (steinNeeded), and the
// interval is over the first N = min(Need, len(d)) of them. Paired and
// ABInterval say why.
func stein(d []float64, k, floor int, target float64) steinInterval {
	_, s1 := meanSD(d[:k])
	need := steinNeeded(k, s1, floor, target)
	n := min(need, len(d))
	m, _ := meanSD(d[:n])
	sqrtN := math.Sqrt(float64(n))
	return steinInterval{Mean: m, SE: s1 / sqrtN, Half: StudentT((1+Level)/2, k-1) * s1 / sqrtN, N: n, Need: need}
}

// steinNeeded is how many estimates Stein's rule asks for after a first
// stage of k with standard deviation s1, for a half-width of target
// percent on the ratio scale: (t(k-1) * s1 / log(1 + target/100))^2
// rounded up, and at least floor and k; floor and k alone when target
// is not positive.
func steinNeeded(k int, s1 float64, floor int, target float64) int {
	n := max(k, floor)
	if target <= 0 {
		return n
	}
	q := StudentT((1+Level)/2, k-1) * s1 / math.Log1p(target/100)
	if need := math.Ceil(q * q); need > float64(n) {
		return int(min(need, math.MaxInt32))
	}
	return n
}
