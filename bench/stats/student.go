package stats

import (
	"math"
	"sync"
)

// StudentT is the p-quantile (0.5 <= p < 1) of Student's t distribution
// with df degrees of freedom (df >= 1): the t with P(T <= t) = p. The
// two-sided Level interval takes StudentT((1+Level)/2, df), which is
// tabled once for df up to tTableLen; other p and df are computed.
func StudentT(p float64, df int) float64 {
	if p == (1+Level)/2 && df < tTableLen {
		return tTable()[df]
	}
	return studentT(p, df)
}

const tTableLen = 256

var tTable = sync.OnceValue(func() []float64 {
	t := make([]float64, tTableLen)
	for df := 1; df < tTableLen; df++ {
		t[df] = studentT((1+Level)/2, df)
	}
	return t
})

// studentT inverts tCDF by bisection, to about 1e-12.
func studentT(p float64, df int) float64 {
	lo, hi := 0.0, 1.0
	for tCDF(hi, df) < p {
		lo, hi = hi, 2*hi
	}
	for range 100 {
		mid := (lo + hi) / 2
		if tCDF(mid, df) < p {
			lo = mid
		} else {
			hi = mid
		}
		if hi-lo < 1e-12*hi {
			break
		}
	}
	return (lo + hi) / 2
}

// tCDF is P(T <= t) for t >= 0: 1 - I_x(df/2, 1/2)/2 with x = df/(df+t^2),
// I the regularized incomplete beta function.
func tCDF(t float64, df int) float64 {
	n := float64(df)
	return 1 - regIncBeta(n/2, 0.5, n/(n+t*t))/2
}

// regIncBeta is the regularized incomplete beta function I_x(a, b), from
// its continued fraction (modified Lentz), taken directly for x below
// (a+1)/(a+b+2) and through I_x(a, b) = 1 - I_{1-x}(b, a) above, where
// the fraction converges fast.
func regIncBeta(a, b, x float64) float64 {
	switch {
	case x <= 0:
		return 0
	case x >= 1:
		return 1
	case x > (a+1)/(a+b+2):
		return 1 - regIncBeta(b, a, 1-x)
	}
	la, _ := math.Lgamma(a)
	lb, _ := math.Lgamma(b)
	lab, _ := math.Lgamma(a + b)
	front := math.Exp(lab - la - lb + a*math.Log(x) + b*math.Log1p(-x))
	return front * betaFraction(a, b, x) / a
}

// betaFraction evaluates the continued fraction of the incomplete beta
// function (Numerical Recipes, betacf).
func betaFraction(a, b, x float64) float64 {
	const tiny, eps = 1e-300, 1e-15
	c, d := 1.0, 1-(a+b)*x/(a+1)
	if math.Abs(d) < tiny {
		d = tiny
	}
	d = 1 / d
	h := d
	for m := 1; m <= 300; m++ {
		fm := float64(m)
		for _, num := range []float64{
			fm * (b - fm) * x / ((a + 2*fm - 1) * (a + 2*fm)),
			-(a + fm) * (a + b + fm) * x / ((a + 2*fm) * (a + 2*fm + 1)),
		} {
			d = 1 + num*d
			if math.Abs(d) < tiny {
				d = tiny
			}
			c = 1 + num/c
			if math.Abs(c) < tiny {
				c = tiny
			}
			d = 1 / d
			h *= d * c
		}
		if math.Abs(d*c-1) < eps {
			break
		}
	}
	return h
}
