// Package f32 holds the float32 vector kernels the pure-Go signal code
// shares (engine/audio's resampler, engine/vad's Silero network).
package f32

// Dot returns Σ a[i]·b[i] over len(a) (b must be at least as long), with
// four accumulators so the additions do not wait on each other.
func Dot(a, b []float32) float32 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += a[i] * b[i]
		s1 += a[i+1] * b[i+1]
		s2 += a[i+2] * b[i+2]
		s3 += a[i+3] * b[i+3]
	}
	for ; i < len(a); i++ {
		s0 += a[i] * b[i]
	}
	return (s0 + s1) + (s2 + s3)
}
