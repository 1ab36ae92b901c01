package audio

import "math"

// correlation computes README §7's c: the maximum over integer lags
// |L| ≤ maxLag of Σ a[i]·b[i+L] / sqrt(Σ a[i]² · Σ b[i+L]²), each sum over
// the i where both a[i] and b[i+L] exist, without mean removal. It returns c
// and the lag where it is reached.
func correlation(a, b []float32, maxLag int) (c float64, lag int) {
	c = math.Inf(-1)
	for l := -maxLag; l <= maxLag; l++ {
		lo := max(0, -l)
		hi := min(len(a), len(b)-l)
		if hi <= lo {
			continue
		}
		var ab, aa, bb float64
		for i := lo; i < hi; i++ {
			x, y := float64(a[i]), float64(b[i+l])
			ab += x * y
			aa += x * x
			bb += y * y
		}
		if aa == 0 || bb == 0 {
			continue
		}
		if v := ab / math.Sqrt(aa*bb); v > c {
			c, lag = v, l
		}
	}
	return c, lag
}
