package main

import (
	"bytes"
	"encoding/binary"
	"math"
)

// voicedWAV returns a 16-bit mono PCM WAV of a synthetic voiced sound: a
// glottal-like pulse train at a gliding pitch (110-160 Hz) shaped by three
// formant resonances that move between vowel-like positions, with syllable-
// rate amplitude modulation. It is not speech, but it has speech's spectral
// shape and envelope, so the recording exercises decoding, resampling and
// the Whisper encoder as a real utterance of that length would.
func voicedWAV(seconds float64, rate int) []byte {
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
	// Normalize to half of full scale.
	peak := 0.0
	for _, v := range samples {
		peak = math.Max(peak, math.Abs(v))
	}
	pcm := make([]int16, n)
	for i, v := range samples {
		if peak > 0 {
			pcm[i] = int16(math.Round(v / peak * 16383))
		}
	}
	var b bytes.Buffer
	dataLen := uint32(2 * n)
	b.WriteString("RIFF")
	_ = binary.Write(&b, binary.LittleEndian, 36+dataLen)
	b.WriteString("WAVEfmt ")
	_ = binary.Write(&b, binary.LittleEndian, uint32(16))
	_ = binary.Write(&b, binary.LittleEndian, uint16(1)) // PCM
	_ = binary.Write(&b, binary.LittleEndian, uint16(1)) // mono
	_ = binary.Write(&b, binary.LittleEndian, uint32(rate))
	_ = binary.Write(&b, binary.LittleEndian, uint32(2*rate))
	_ = binary.Write(&b, binary.LittleEndian, uint16(2))
	_ = binary.Write(&b, binary.LittleEndian, uint16(16))
	b.WriteString("data")
	_ = binary.Write(&b, binary.LittleEndian, dataLen)
	_ = binary.Write(&b, binary.LittleEndian, pcm)
	return b.Bytes()
}
