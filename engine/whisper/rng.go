package whisper

import "math"

// whisper.cpp samples at temperatures above 0 with std::discrete_distribution
// over the token probabilities, drawing from one std::mt19937 per decoder:
// decoder 0's generator has the default seed (5489), decoder j's is seeded
// with j (whisper_full_with_state, "TAGS: WHISPER_DECODER_INIT"). This file
// reproduces both as libstdc++ implements them, so sampling is repeatable and
// draws what whisper.cpp draws from the same probabilities.

// mt19937 is the 32-bit Mersenne Twister (std::mt19937).
type mt19937 struct {
	mt  [624]uint32
	idx int
}

func newMT19937(seed uint32) *mt19937 {
	r := &mt19937{idx: 624}
	r.mt[0] = seed
	for i := 1; i < 624; i++ {
		r.mt[i] = 1812433253*(r.mt[i-1]^(r.mt[i-1]>>30)) + uint32(i)
	}
	return r
}

func (r *mt19937) next() uint32 {
	if r.idx >= 624 {
		for i := range 624 {
			y := (r.mt[i] & 0x80000000) | (r.mt[(i+1)%624] & 0x7fffffff)
			v := r.mt[(i+397)%624] ^ (y >> 1)
			if y&1 != 0 {
				v ^= 0x9908b0df
			}
			r.mt[i] = v
		}
		r.idx = 0
	}
	y := r.mt[r.idx]
	r.idx++
	y ^= y >> 11
	y ^= (y << 7) & 0x9d2c5680
	y ^= (y << 15) & 0xefc60000
	y ^= y >> 18
	return y
}

// canonical is std::generate_canonical<double, 53> on mt19937: two draws,
// (a + b·2³²) / 2⁶⁴, kept below 1.
func (r *mt19937) canonical() float64 {
	a := float64(r.next())
	b := float64(r.next())
	v := (a + b*4294967296.0) / 18446744073709551616.0
	if v >= 1 {
		v = math.Nextafter(1, 0)
	}
	return v
}

// discrete draws an index with probability proportional to w, as
// std::discrete_distribution does: cumulative sums of the normalised
// weights (the last one set to 1), and the first one above a canonical
// draw. All-zero weights draw uniformly.
func (r *mt19937) discrete(w []float32) int {
	var sum float64
	for _, v := range w {
		sum += float64(v)
	}
	p := r.canonical()
	if sum == 0 {
		return min(int(p*float64(len(w))), len(w)-1)
	}
	var cp float64
	for i, v := range w {
		cp += float64(v) / sum
		if i == len(w)-1 {
			cp = 1
		}
		if cp > p {
			return i
		}
	}
	return len(w) - 1
}
