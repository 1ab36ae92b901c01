package testaudio

import (
	"math"
	"testing"
)

// TestMono16RoundTrip: what Mono16 writes, ReadMono16 reads back (past the
// padded LIST chunk) to within 16-bit quantisation.
func TestMono16RoundTrip(t *testing.T) {
	x := Sine(440, 16000, 1000, 0.5)
	rate, pcm, err := ReadMono16(Mono16(16000, x))
	if err != nil {
		t.Fatal(err)
	}
	if rate != 16000 || len(pcm) != len(x) {
		t.Fatalf("rate %d, %d samples; want 16000, %d", rate, len(pcm), len(x))
	}
	for i := range x {
		if d := math.Abs(float64(pcm[i] - x[i])); d > 1.0/16384 {
			t.Fatalf("sample %d: %v, want %v", i, pcm[i], x[i])
		}
	}
	for _, bad := range [][]byte{nil, []byte("RIFF\x00\x00\x00\x00WAVE"), WAV(Format{Bits: 24, Rate: 8000, Channels: 1}, [][]float32{x})} {
		if _, _, err := ReadMono16(bad); err == nil {
			t.Errorf("ReadMono16(% x…) accepted", bad[:min(len(bad), 16)])
		}
	}
}

// TestVoiced: two seconds peak at half of full scale and no half second is
// silent (the syllable envelope never closes).
func TestVoiced(t *testing.T) {
	x := Voiced(2, 16000)
	if len(x) != 32000 {
		t.Fatalf("%d samples, want 32000", len(x))
	}
	var peak float64
	var energy [4]float64
	for i, v := range x {
		peak = math.Max(peak, math.Abs(float64(v)))
		energy[i/8000] += float64(v) * float64(v)
	}
	if math.Abs(peak-0.5) > 1e-6 {
		t.Errorf("peak %v, want 0.5", peak)
	}
	for i, e := range energy {
		if e == 0 {
			t.Errorf("half-second %d is silent", i)
		}
	}
}
