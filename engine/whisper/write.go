package whisper

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"

	"github.com/replyd/replyd/engine/whisper/ggmlfile"
)

// ModelConfig describes a random-weight model for WriteModel.
type ModelConfig struct {
	NVocab      int // 51864 English-only, ≥ 51865 multilingual
	NAudioCtx   int // 1500 for 30 s windows
	NAudioState int
	NAudioHead  int
	NAudioLayer int
	NTextCtx    int
	NTextState  int
	NTextHead   int
	NTextLayer  int
	NMels       int
	// WeightType of the linear layers and the token embedding: "f32", "f16",
	// "q4_0", "q4_1", "q5_0", "q5_1" or "q8_0" (quantised from the
	// F16-rounded draws, as whisper.cpp's quantize tool does).
	WeightType string
	// Seed seeds the PCG generator (seed, 0x5157) that draws every weight.
	Seed uint64
	// EOTRowScale multiplies the <|endoftext|> row of the token embedding,
	// so that greedy decoding ends some windows; 0 means 1.
	EOTRowScale float64
	// Words, when set, spell the text tokens from id 256 on: " "+word, the
	// words taken in turn. Transcripts then read as words, and a language
	// model splits them into about as many tokens as real speech's (the
	// default " t<id>" spelling costs it 5-7 tokens a Whisper token).
	Words []string
}

// DemoConfig is the demo model of WriteDemoModel: English-only, d = 64,
// 2 heads, 4 layers, F16, about 9 MB.
func DemoConfig() ModelConfig {
	return ModelConfig{NVocab: 51864, NAudioCtx: 1500, NAudioState: 64, NAudioHead: 2, NAudioLayer: 4,
		NTextCtx: 448, NTextState: 64, NTextHead: 2, NTextLayer: 4, NMels: 80, WeightType: "f16", Seed: 1, EOTRowScale: 2.25}
}

// TinyENConfig has the dimensions of OpenAI's tiny.en (d = 384, 6 heads,
// 4 layers, F16), with random weights: the benchmark model.
func TinyENConfig() ModelConfig {
	return ModelConfig{NVocab: 51864, NAudioCtx: 1500, NAudioState: 384, NAudioHead: 6, NAudioLayer: 4,
		NTextCtx: 448, NTextState: 384, NTextHead: 6, NTextLayer: 4, NMels: 80, WeightType: "f16", Seed: 7, EOTRowScale: 2.25}
}

// BaseENConfig has the dimensions of OpenAI's base.en (d = 512, 8 heads,
// 6 layers) with random weights of type weightType ("f16", "q8_0", ...):
// the shape the decoder benchmarks and the side-by-side runs against
// whisper.cpp use.
func BaseENConfig(weightType string) ModelConfig {
	return ModelConfig{NVocab: 51864, NAudioCtx: 1500, NAudioState: 512, NAudioHead: 8, NAudioLayer: 6,
		NTextCtx: 448, NTextState: 512, NTextHead: 8, NTextLayer: 6, NMels: 80, WeightType: weightType, Seed: 9, EOTRowScale: 2.25}
}

// SmallENConfig has the dimensions of OpenAI's small.en (d = 768, 12 heads,
// 12 layers) with random weights of type weightType.
func SmallENConfig(weightType string) ModelConfig {
	return ModelConfig{NVocab: 51864, NAudioCtx: 1500, NAudioState: 768, NAudioHead: 12, NAudioLayer: 12,
		NTextCtx: 448, NTextState: 768, NTextHead: 12, NTextLayer: 12, NMels: 80, WeightType: weightType, Seed: 11, EOTRowScale: 2.25}
}

// Multilingual returns cfg with the vocabulary of OpenAI's multilingual
// models of its size: n_vocab 51865 (99 language tokens, from
// <|en|> = 50259 on, as tiny, base, small, medium and large-v1/v2 have),
// the text tokens ending one id later. A different seed draws other weights
// than the English-only shape's.
func Multilingual(cfg ModelConfig) ModelConfig {
	cfg.NVocab = 51865
	cfg.Seed += 100
	return cfg
}

// LargeV3TurboConfig has the dimensions of OpenAI's large-v3-turbo
// (d = 1280, 20 heads, 32 encoder layers and 4 decoder layers, 128 mel
// bands, n_vocab 51866 with 100 language tokens, <|yue|> the last) with
// random weights of type weightType.
func LargeV3TurboConfig(weightType string) ModelConfig {
	return ModelConfig{NVocab: 51866, NAudioCtx: 1500, NAudioState: 1280, NAudioHead: 20, NAudioLayer: 32,
		NTextCtx: 448, NTextState: 1280, NTextHead: 20, NTextLayer: 4, NMels: 128, WeightType: weightType, Seed: 13, EOTRowScale: 2.25}
}

// WriteModel writes a whisper.cpp ggml model with deterministic random
// weights drawn as the conformance data's generator draws them: linear
// weights N(0, 1/in), biases N(0, 0.02²), layer norms 1+N(0, 0.05²) and
// N(0, 0.02²), conv kernels with std 1/sqrt(3·in), positional embeddings
// with std 0.1 (encoder) and 2 (decoder), token embedding std 0.25. The
// vocabulary is synthetic: ids below 256 are single bytes, the others
// " t<id>". The file is written to path.tmp and renamed into place.
func WriteModel(path string, cfg ModelConfig) error {
	hp := HParams{NVocab: cfg.NVocab, NAudioCtx: cfg.NAudioCtx, NAudioState: cfg.NAudioState, NAudioHead: cfg.NAudioHead,
		NAudioLayer: cfg.NAudioLayer, NTextCtx: cfg.NTextCtx, NTextState: cfg.NTextState, NTextHead: cfg.NTextHead,
		NTextLayer: cfg.NTextLayer, NMels: cfg.NMels}
	wt := typeF16
	switch cfg.WeightType {
	case "f32":
		wt, hp.FType = typeF32, 0
	case "f16", "":
		hp.FType = 1
	case "q4_0":
		wt, hp.FType = typeQ4_0, 2002
	case "q4_1":
		wt, hp.FType = typeQ4_1, 2003
	case "q5_0":
		wt, hp.FType = typeQ5_0, 2008
	case "q5_1":
		wt, hp.FType = typeQ5_1, 2009
	case "q8_0":
		wt, hp.FType = typeQ8_0, 2007
	default:
		return fmt.Errorf("whisper: WriteModel: unknown weight type %q", cfg.WeightType)
	}
	if wt != typeF32 && wt != typeF16 && (hp.NAudioState%32 != 0 || hp.NTextState%32 != 0) {
		return fmt.Errorf("whisper: WriteModel: quantised weights need a state width that is a multiple of 32")
	}
	if err := hp.Validate(); err != nil {
		return fmt.Errorf("whisper: WriteModel: %w", err)
	}
	ml := hp.NVocab >= 51865
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	w := &modelWriter{w: bufio.NewWriterSize(f, 1<<20), rng: rand.New(rand.NewPCG(cfg.Seed, 0x5157))}
	w.i32(ggmlfile.Magic)
	for _, v := range []int{hp.NVocab, hp.NAudioCtx, hp.NAudioState, hp.NAudioHead, hp.NAudioLayer, hp.NTextCtx,
		hp.NTextState, hp.NTextHead, hp.NTextLayer, hp.NMels, hp.FType} {
		w.i32(v)
	}
	filters := slaneyMelFilters(SampleRate, nFFT, hp.NMels)
	w.i32(hp.NMels)
	w.i32(nFFT/2 + 1)
	for _, v := range filters {
		w.f32(v)
	}
	nTok := 50256
	if ml {
		nTok = 50257
	}
	w.i32(nTok)
	for id := 0; id < nTok; id++ {
		var s []byte
		if id < 256 {
			s = []byte{byte(id)}
		} else if len(cfg.Words) > 0 {
			s = []byte(" " + cfg.Words[(id-256)%len(cfg.Words)])
		} else {
			s = []byte(" t" + strconv.Itoa(id))
		}
		w.i32(len(s))
		w.w.Write(s)
	}
	convType := typeF16
	if wt == typeF32 {
		convType = typeF32
	}
	d, dt := hp.NAudioState, hp.NTextState
	eot := 50256
	if ml {
		eot = 50257
	}
	scale := cfg.EOTRowScale
	if scale == 0 {
		scale = 1
	}
	w.tensor("encoder.positional_embedding", typeF32, []int{d, hp.NAudioCtx}, 0.1, 0, nil)
	w.tensor("encoder.conv1.weight", convType, []int{3, hp.NMels, d}, 1/math.Sqrt(3*float64(hp.NMels)), 0, nil)
	w.tensor("encoder.conv1.bias", typeF32, []int{1, d}, 0.02, 0, nil)
	w.tensor("encoder.conv2.weight", convType, []int{3, d, d}, 1/math.Sqrt(3*float64(d)), 0, nil)
	w.tensor("encoder.conv2.bias", typeF32, []int{1, d}, 0.02, 0, nil)
	block := func(p string, n int, cross bool) {
		lin := func(name string, in, out int, bias bool) {
			w.tensor(name+".weight", wt, []int{in, out}, 1/math.Sqrt(float64(in)), 0, nil)
			if bias {
				w.tensor(name+".bias", typeF32, []int{out}, 0.02, 0, nil)
			}
		}
		ln := func(name string) {
			w.tensor(name+".weight", typeF32, []int{n}, 0.05, 1, nil)
			w.tensor(name+".bias", typeF32, []int{n}, 0.02, 0, nil)
		}
		att := func(a string) {
			lin(a+".query", n, n, true)
			lin(a+".key", n, n, false)
			lin(a+".value", n, n, true)
			lin(a+".out", n, n, true)
		}
		ln(p + ".attn_ln")
		att(p + ".attn")
		if cross {
			ln(p + ".cross_attn_ln")
			att(p + ".cross_attn")
		}
		ln(p + ".mlp_ln")
		lin(p+".mlp.0", n, 4*n, true)
		lin(p+".mlp.2", 4*n, n, true)
	}
	for l := 0; l < hp.NAudioLayer; l++ {
		block(fmt.Sprintf("encoder.blocks.%d", l), d, false)
	}
	w.tensor("encoder.ln_post.weight", typeF32, []int{d}, 0.05, 1, nil)
	w.tensor("encoder.ln_post.bias", typeF32, []int{d}, 0.02, 0, nil)
	w.tensor("decoder.positional_embedding", typeF32, []int{dt, hp.NTextCtx}, 2, 0, nil)
	w.tensor("decoder.token_embedding.weight", wt, []int{dt, hp.NVocab}, 0.25, 0, func(row int) float64 {
		if row == eot {
			return scale
		}
		return 1
	})
	for l := 0; l < hp.NTextLayer; l++ {
		block(fmt.Sprintf("decoder.blocks.%d", l), dt, true)
	}
	w.tensor("decoder.ln.weight", typeF32, []int{dt}, 0.05, 1, nil)
	w.tensor("decoder.ln.bias", typeF32, []int{dt}, 0.02, 0, nil)
	if w.err == nil {
		w.err = w.w.Flush()
	}
	if err := f.Close(); w.err == nil {
		w.err = err
	}
	if w.err != nil {
		os.Remove(tmp)
		return fmt.Errorf("whisper: WriteModel %s: %w", path, w.err)
	}
	return os.Rename(tmp, path)
}

type modelWriter struct {
	w   *bufio.Writer
	rng *rand.Rand
	buf [8]byte
	err error
}

func (w *modelWriter) i32(v int) {
	binary.LittleEndian.PutUint32(w.buf[:4], uint32(int32(v)))
	if _, err := w.w.Write(w.buf[:4]); err != nil && w.err == nil {
		w.err = err
	}
}

func (w *modelWriter) f32(v float32) {
	binary.LittleEndian.PutUint32(w.buf[:4], math.Float32bits(v))
	if _, err := w.w.Write(w.buf[:4]); err != nil && w.err == nil {
		w.err = err
	}
}

// tensor writes one tensor of N(mean, std²) draws stored as typ, drawn
// and written one row (ne[0] values) at a time; rowScale, when not nil,
// multiplies the values of each row.
func (w *modelWriter) tensor(name string, typ ggmlType, ne []int, std, mean float64, rowScale func(row int) float64) {
	w.i32(len(ne))
	w.i32(len(name))
	w.i32(int(typ))
	n := 1
	for _, v := range ne {
		w.i32(v)
		n *= v
	}
	w.w.WriteString(name)
	rowLen := ne[0]
	out := make([]byte, 0, 4*rowLen)
	row := make([]float32, rowLen)
	for r := 0; r < n/rowLen; r++ {
		sc := 1.0
		if rowScale != nil {
			sc = rowScale(r)
		}
		out = out[:0]
		for i := range row {
			row[i] = float32(mean + std*w.rng.NormFloat64())
			if sc != 1 {
				row[i] *= float32(sc)
			}
		}
		switch typ {
		case typeF32:
			for _, v := range row {
				out = binary.LittleEndian.AppendUint32(out, math.Float32bits(v))
			}
		case typeF16:
			for _, v := range row {
				out = binary.LittleEndian.AppendUint16(out, f32ToF16(v))
			}
		default:
			for i, v := range row {
				row[i] = halfBits(f32ToF16(v))
			}
			out = quantizeRow(out, typ, row)
		}
		if _, err := w.w.Write(out); err != nil && w.err == nil {
			w.err = err
		}
	}
}

// halfBits returns the float32 value of an IEEE half.
func halfBits(h uint16) float32 {
	var b [2]byte
	var f [1]float32
	binary.LittleEndian.PutUint16(b[:], h)
	f16ToF32(b[:], f[:])
	return f[0]
}

// f32ToF16 rounds a float32 to the nearest IEEE half (ties to even).
func f32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int((b >> 23) & 0xff)
	man := b & 0x7fffff
	switch {
	case exp == 0xff: // Inf or NaN
		if man != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	case exp-127 > 15: // overflow
		return sign | 0x7c00
	case exp-127 >= -14: // normal half
		e := uint32(exp-127+15) << 10
		m := man >> 13
		rest := man & 0x1fff
		h := e | m
		if rest > 0x1000 || (rest == 0x1000 && h&1 == 1) {
			h++ // may carry into the exponent, which is correct rounding
		}
		return sign | uint16(h)
	case exp-127 >= -25: // subnormal half
		m := man | 0x800000
		shift := uint32(-(exp - 127) - 14 + 13)
		h := m >> shift
		rest := m & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rest > half || (rest == half && h&1 == 1) {
			h++
		}
		return sign | uint16(h)
	}
	return sign
}

// slaneyMelFilters returns the [nMels][nFFT/2+1] filter bank librosa's
// filters.mel(sr, n_fft, n_mels) computes by default: Slaney mel scale,
// area-normalised triangles from 0 Hz to sr/2.
func slaneyMelFilters(sr, nfft, nMels int) []float32 {
	nBins := nfft/2 + 1
	const fsp = 200.0 / 3
	const minLogHz = 1000.0
	minLogMel := minLogHz / fsp
	logstep := math.Log(6.4) / 27
	hzToMel := func(f float64) float64 {
		if f < minLogHz {
			return f / fsp
		}
		return minLogMel + math.Log(f/minLogHz)/logstep
	}
	melToHz := func(m float64) float64 {
		if m < minLogMel {
			return m * fsp
		}
		return minLogHz * math.Exp(logstep*(m-minLogMel))
	}
	lo, hi := hzToMel(0), hzToMel(float64(sr)/2)
	melF := make([]float64, nMels+2)
	for i := range melF {
		melF[i] = melToHz(lo + (hi-lo)*float64(i)/float64(nMels+1))
	}
	out := make([]float32, nMels*nBins)
	for i := 0; i < nMels; i++ {
		enorm := 2 / (melF[i+2] - melF[i])
		for k := 0; k < nBins; k++ {
			f := float64(sr) / 2 * float64(k) / float64(nBins-1)
			lower := (f - melF[i]) / (melF[i+1] - melF[i])
			upper := (melF[i+2] - f) / (melF[i+2] - melF[i+1])
			v := math.Max(0, math.Min(lower, upper))
			out[i*nBins+k] = float32(v * enorm)
		}
	}
	return out
}
