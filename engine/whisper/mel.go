package whisper

import "math"

// Audio framing constants of Whisper.
const (
	SampleRate    = 16000 // samples per second of the input PCM
	nFFT          = 400   // window length of the STFT
	hopLength     = 160   // 10 ms per mel frame
	chunkSamples  = 30 * SampleRate
	windowFrames  = chunkSamples / hopLength // 3000 mel frames per 30 s window
	melPadFront   = nFFT / 2
	minLogMelBase = 1e-10
)

// melSpec is a log-mel spectrogram laid out [n_mel][n_len].
type melSpec struct {
	nMel, nLen, nLenOrg int
	data                []float32
}

// fftPlan holds the twiddle factors for the FFT of one length.
type fftPlan struct {
	n   int
	tw  []complex128 // exp(-2πi k/n), k < n
	buf []complex128 // scratch
}

func newFFTPlan(n int) *fftPlan {
	p := &fftPlan{n: n, tw: make([]complex128, n), buf: make([]complex128, 4*n)}
	for k := range p.tw {
		s, c := math.Sincos(-2 * math.Pi * float64(k) / float64(n))
		p.tw[k] = complex(c, s)
	}
	return p
}

// transform writes the DFT of x (stride 1, length n) to out.
func (p *fftPlan) transform(x, out []complex128) {
	p.rec(x, 1, out, len(x), p.buf)
}

// rec computes the DFT of the n values x[0], x[s], x[2s], ... into out
// (mixed radix: radix 2 butterflies, other small factors by direct sums
// over the sub-transforms, prime lengths directly). scratch holds 2n.
func (p *fftPlan) rec(x []complex128, s int, out []complex128, n int, scratch []complex128) {
	if n == 1 {
		out[0] = x[0]
		return
	}
	step := p.n / n // twiddle stride for this length
	if n%2 == 0 {
		h := n / 2
		even, odd := scratch[:h], scratch[h:n]
		p.rec(x, 2*s, even, h, scratch[n:])
		p.rec(x[s:], 2*s, odd, h, scratch[n:])
		for k := 0; k < h; k++ {
			t := p.tw[k*step] * odd[k]
			out[k] = even[k] + t
			out[k+h] = even[k] - t
		}
		return
	}
	f := 3
	for n%f != 0 && f*f <= n {
		f += 2
	}
	if n%f != 0 {
		f = n // prime: a direct DFT
	}
	if f == n {
		for k := 0; k < n; k++ {
			var sum complex128
			idx := 0
			for j := 0; j < n; j++ {
				sum += x[j*s] * p.tw[idx*step]
				if idx += k; idx >= n {
					idx -= n
				}
			}
			out[k] = sum
		}
		return
	}
	m := n / f
	sub := scratch[:n]
	for r := 0; r < f; r++ {
		p.rec(x[r*s:], f*s, sub[r*m:(r+1)*m], m, scratch[n:])
	}
	for k := 0; k < n; k++ {
		kk := k % m
		var sum complex128
		idx := 0 // r·k mod n
		for r := 0; r < f; r++ {
			sum += p.tw[idx*step] * sub[r*m+kk]
			if idx += k; idx >= n {
				idx -= n
			}
		}
		out[k] = sum
	}
}

// logMel computes whisper.cpp's log-mel spectrogram of 16 kHz samples with
// the model's filter bank (see the package's conformance README §4.1).
func (m *Model) logMel(pcm []float32) *melSpec {
	return computeLogMel(pcm, m.filters, m.hp.NMels, m.nFilter, m.threads)
}

func computeLogMel(pcm []float32, filters []float32, nMel, nBins, threads int) *melSpec {
	n := len(pcm)
	nLen := (n + chunkSamples) / hopLength
	nLenOrg := 1 + (n+melPadFront-nFFT)/hopLength
	// The padded signal is 200 reflected samples (p[199-i] = x[1+i]), the
	// audio, then zeros; sample returns p[j] without building it.
	sample := func(j int) float64 {
		if j < melPadFront {
			if k := melPadFront - j; k < n {
				return float64(pcm[k])
			}
			return 0
		}
		if k := j - melPadFront; k < n {
			return float64(pcm[k])
		}
		return 0
	}
	hann := make([]float64, nFFT)
	for k := range hann {
		hann[k] = 0.5 * (1 - math.Cos(2*math.Pi*float64(k)/nFFT))
	}
	out := &melSpec{nMel: nMel, nLen: nLen, nLenOrg: nLenOrg, data: make([]float32, nMel*nLen)}
	nReal := (n+melPadFront)/hopLength + 1 // frames whisper.cpp transforms
	if nReal > nLen {
		nReal = nLen
	}
	floor := float32(math.Log10(minLogMelBase))
	// Each filter is non-zero on a short run of bins: sum over that run.
	fLo, fHi := make([]int, nMel), make([]int, nMel)
	for j := 0; j < nMel; j++ {
		for k, v := range filters[j*nBins : (j+1)*nBins] {
			if v != 0 {
				if fHi[j] == 0 {
					fLo[j] = k
				}
				fHi[j] = k + 1
			}
		}
	}
	maxes := make([]float64, max(threads, 1))
	for i := range maxes {
		maxes[i] = math.Inf(-1)
	}
	nThreads := max(threads, 1)
	parallel(nThreads, nThreads, func(t0, t1 int) {
		for t := t0; t < t1; t++ {
			lo, hi := t*nLen/nThreads, (t+1)*nLen/nThreads
			plan := newFFTPlan(nFFT)
			frame := make([]complex128, nFFT)
			spec := make([]complex128, nFFT)
			power := make([]float64, nBins)
			mx := math.Inf(-1)
			for i := lo; i < hi; i++ {
				if i >= nReal {
					for j := 0; j < nMel; j++ {
						out.data[j*nLen+i] = floor
					}
					mx = math.Max(mx, float64(floor))
					continue
				}
				off := i * hopLength
				for k := 0; k < nFFT; k++ {
					frame[k] = complex(sample(off+k)*hann[k], 0)
				}
				plan.transform(frame, spec)
				for k := 0; k < nBins; k++ {
					re, im := real(spec[k]), imag(spec[k])
					power[k] = re*re + im*im
				}
				for j := 0; j < nMel; j++ {
					f := filters[j*nBins : (j+1)*nBins]
					var s float64
					for k := fLo[j]; k < fHi[j]; k++ {
						s += float64(f[k]) * power[k]
					}
					l := math.Log10(math.Max(s, minLogMelBase))
					out.data[j*nLen+i] = float32(l)
					mx = math.Max(mx, l)
				}
			}
			maxes[t] = mx
		}
	})
	mx := math.Inf(-1)
	for _, v := range maxes {
		mx = math.Max(mx, v)
	}
	clamp := float32(mx - 8)
	for i, v := range out.data {
		if v < clamp {
			v = clamp
		}
		out.data[i] = (v + 4) / 4
	}
	return out
}

// window copies the encoder input for the window starting at frame seek:
// frames seek..seek+3000, with 0 past the end of the spectrogram.
func (s *melSpec) window(seek int, dst []float32) {
	for j := 0; j < s.nMel; j++ {
		row := dst[j*windowFrames : (j+1)*windowFrames]
		for i := range row {
			row[i] = 0
		}
		if seek < s.nLen {
			copy(row, s.data[j*s.nLen+seek:(j+1)*s.nLen])
		}
	}
}
