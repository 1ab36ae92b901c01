// Package testaudio makes and reads the synthetic recordings of replyd's
// tests and load test: one WAV writer for every layout the decoder
// supports, one reader of 16-bit PCM WAV, and the signals (sine, a voiced
// sound) they carry. It does not import "testing" (cmd/loadtest is an
// ordinary program).
package testaudio

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// Format describes a WAV file's sample layout.
type Format struct {
	Bits       int  // 8, 16, 24, 32 or 64
	Float      bool // IEEE float (format tag 3) instead of integer PCM
	Extensible bool // WAVE_FORMAT_EXTENSIBLE fmt chunk
	Rate       int  // samples a second
	Channels   int
}

// String names the format, e.g. "int16-16000Hz-1ch" or
// "float32-ext-48000Hz-2ch".
func (f Format) String() string {
	kind := "int"
	if f.Float {
		kind = "float"
	}
	ext := ""
	if f.Extensible {
		ext = "-ext"
	}
	return fmt.Sprintf("%s%d%s-%dHz-%dch", kind, f.Bits, ext, f.Rate, f.Channels)
}

// WAV encodes chans (one slice per channel, equal lengths, samples in
// [-1, 1]) in format f. A LIST chunk with an odd size (so padded) comes
// before the data chunk, as real writers put one there.
func WAV(f Format, chans [][]float32) []byte {
	width := f.Bits / 8
	n := len(chans[0])
	tag := 1
	if f.Float {
		tag = 3
	}
	fmtBody := make([]byte, 16)
	if f.Extensible {
		fmtBody = make([]byte, 40)
		binary.LittleEndian.PutUint16(fmtBody[16:], 22)
		binary.LittleEndian.PutUint16(fmtBody[18:], uint16(f.Bits))
		binary.LittleEndian.PutUint32(fmtBody[20:], 0) // channel mask
		binary.LittleEndian.PutUint16(fmtBody[24:], uint16(tag))
		copy(fmtBody[26:], "\x00\x00\x00\x00\x10\x00\x80\x00\x00\xAA\x00\x38\x9B\x71")
		tag = 0xFFFE
	}
	binary.LittleEndian.PutUint16(fmtBody[0:], uint16(tag))
	binary.LittleEndian.PutUint16(fmtBody[2:], uint16(f.Channels))
	binary.LittleEndian.PutUint32(fmtBody[4:], uint32(f.Rate))
	binary.LittleEndian.PutUint32(fmtBody[8:], uint32(f.Rate*f.Channels*width))
	binary.LittleEndian.PutUint16(fmtBody[12:], uint16(f.Channels*width))
	binary.LittleEndian.PutUint16(fmtBody[14:], uint16(f.Bits))

	data := make([]byte, 0, n*f.Channels*width)
	for i := 0; i < n; i++ {
		for c := 0; c < f.Channels; c++ {
			v := float64(chans[c][i])
			switch {
			case f.Float && f.Bits == 32:
				data = binary.LittleEndian.AppendUint32(data, math.Float32bits(float32(v)))
			case f.Float && f.Bits == 64:
				data = binary.LittleEndian.AppendUint64(data, math.Float64bits(v))
			case f.Bits == 8:
				data = append(data, byte(math.Round(v*127)+128))
			case f.Bits == 16:
				data = binary.LittleEndian.AppendUint16(data, uint16(int16(math.Round(v*32767))))
			case f.Bits == 24:
				x := int32(math.Round(v * 8388607))
				data = append(data, byte(x), byte(x>>8), byte(x>>16))
			case f.Bits == 32:
				data = binary.LittleEndian.AppendUint32(data, uint32(int32(math.Round(v*2147483647))))
			}
		}
	}
	var b []byte
	b = append(b, "RIFF\x00\x00\x00\x00WAVE"...)
	b = appendChunk(b, "fmt ", fmtBody)
	b = appendChunk(b, "LIST", []byte("INFOISFT\x04\x00\x00\x00odd\x00x")) // odd size: padded
	b = appendChunk(b, "data", data)
	binary.LittleEndian.PutUint32(b[4:], uint32(len(b)-8))
	return b
}

// Mono16 encodes x as a 16-bit PCM mono WAV at rate.
func Mono16(rate int, x []float32) []byte {
	return WAV(Format{Bits: 16, Rate: rate, Channels: 1}, [][]float32{x})
}

func appendChunk(b []byte, id string, body []byte) []byte {
	b = append(b, id...)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(body)))
	b = append(b, body...)
	if len(body)%2 == 1 {
		b = append(b, 0)
	}
	return b
}

// ReadMono16 reads a 16-bit PCM mono WAV and returns its rate and its
// samples as int16/32768 (whisper.cpp's conversion).
func ReadMono16(b []byte) (rate int, pcm []float32, err error) {
	if len(b) < 12 || string(b[:4]) != "RIFF" || string(b[8:12]) != "WAVE" {
		return 0, nil, errors.New("not a RIFF/WAVE file")
	}
	for off := 12; off+8 <= len(b); {
		id, size := string(b[off:off+4]), int(binary.LittleEndian.Uint32(b[off+4:]))
		body := b[off+8 : min(off+8+size, len(b))]
		switch id {
		case "fmt ":
			if len(body) < 16 || binary.LittleEndian.Uint16(body) != 1 || binary.LittleEndian.Uint16(body[2:]) != 1 ||
				binary.LittleEndian.Uint16(body[14:]) != 16 {
				return 0, nil, errors.New("not mono 16-bit PCM")
			}
			rate = int(binary.LittleEndian.Uint32(body[4:]))
		case "data":
			if rate == 0 {
				return 0, nil, errors.New("data chunk before the fmt chunk")
			}
			pcm = make([]float32, len(body)/2)
			for i := range pcm {
				pcm[i] = float32(int16(binary.LittleEndian.Uint16(body[2*i:]))) / 32768
			}
			return rate, pcm, nil
		}
		off += 8 + size + size&1
	}
	return 0, nil, errors.New("no data chunk")
}

// Sine returns n samples of amp·sin(2π·freq·t) at rate.
func Sine(freq float64, rate, n int, amp float64) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(amp * math.Sin(2*math.Pi*freq*float64(i)/float64(rate)))
	}
	return out
}

// Voiced returns seconds of a synthetic voiced sound at rate, peaking at
// half of full scale: a glottal-like pulse train at a gliding pitch
// (110-160 Hz) shaped by three formant resonances that move between
// vowel-like positions, with syllable-rate amplitude modulation. It is not
// speech, but it has speech's spectral shape and envelope, so a recording of
// it exercises decoding, resampling and the Whisper encoder as a real
// utterance of that length would.
func Voiced(seconds float64, rate int) []float32 {
	n := int(seconds * float64(rate))
	samples := make([]float64, n)
	// Formant resonators (two-pole), state per formant.
	type res struct{ y1, y2 float64 }
	var rs [3]res
	phase := 0.0
	for i := 0; i < n; i++ {
		t := float64(i) / float64(rate)
		f0 := 135 + 25*math.Sin(2*math.Pi*0.7*t)
		phase += f0 / float64(rate)
		src := 0.0
		if phase >= 1 {
			phase -= 1
			src = 1 // one pulse per pitch period
		}
		// Vowel positions glide between /a/ and /i/ four times a second.
		mix := 0.5 + 0.5*math.Sin(2*math.Pi*2*t)
		formants := [3]float64{700 - 430*mix, 1220 + 1070*mix, 2600 + 410*mix}
		bw := [3]float64{90, 110, 160}
		out := 0.0
		for k := range rs {
			r := math.Exp(-math.Pi * bw[k] / float64(rate))
			theta := 2 * math.Pi * formants[k] / float64(rate)
			y := src + 2*r*math.Cos(theta)*rs[k].y1 - r*r*rs[k].y2
			rs[k].y2, rs[k].y1 = rs[k].y1, y
			out += y / float64(k+1)
		}
		// Syllables: 4 Hz envelope, never fully silent.
		env := 0.25 + 0.75*math.Pow(math.Sin(math.Pi*4*t), 2)
		samples[i] = out * env
	}
	peak := 0.0
	for _, v := range samples {
		peak = math.Max(peak, math.Abs(v))
	}
	pcm := make([]float32, n)
	for i, v := range samples {
		if peak > 0 {
			pcm[i] = float32(v / peak * 0.5)
		}
	}
	return pcm
}
