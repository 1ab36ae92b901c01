//go:build !race

package audio

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/replyd/replyd/internal/shareddata"
)

// formatCase is one entry of audio-formats/formats.json.
type formatCase struct {
	File           string  `json:"file"`
	MinCorrelation float64 `json:"min_correlation"`
	MaxAbsLagMS    float64 `json:"max_abs_lag_ms"`
	MaxDurationS   float64 `json:"max_duration_diff_s"`
	ResearchC      float64 `json:"research_decoder_correlation"`
	ResearchLag    int     `json:"research_decoder_lag_samples_16k"`
}

// conformanceMaxLag is the lag range of README §7: |L| ≤ 1600 samples.
const conformanceMaxLag = 1600

// TestConformanceFormats decodes the eight encodings of the reference
// sentence (shared test data, README §7) and checks each against the 16 kHz
// reference WAV: correlation c at least the file's min_correlation, the best
// lag within max_abs_lag_ms, and the duration within 0.1 s of the reference.
func TestConformanceFormats(t *testing.T) {
	dir := shareddata.Whisper(t)
	raw, err := os.ReadFile(filepath.Join(dir, "audio-formats", "formats.json"))
	if err != nil {
		t.Fatal(err)
	}
	var spec struct {
		Files []formatCase `json:"files"`
	}
	if err := json.Unmarshal(raw, &spec); err != nil {
		t.Fatal(err)
	}
	if len(spec.Files) != 8 {
		t.Fatalf("formats.json lists %d files, want 8", len(spec.Files))
	}
	ref := readRefWAV(t, filepath.Join(dir, "audio", "speech-en-us.wav"))
	refDur := float64(len(ref)) / SampleRate
	wantFormat := map[string]Format{
		".wav": FormatWAV, ".flac": FormatFLAC, ".mp3": FormatMP3,
		".ogg": FormatOggOpus, ".webm": FormatWebMOpus, ".m4a": FormatM4A,
	}
	for _, fc := range spec.Files {
		t.Run(fc.File, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join(dir, "audio-formats", fc.File))
			if err != nil {
				t.Fatal(err)
			}
			if got, want := Detect(data), wantFormat[filepath.Ext(fc.File)]; got != want {
				t.Errorf("Detect = %q, want %q", got, want)
			}
			if Detect(data) == FormatM4A && lookFFmpeg() == "" {
				t.Skip("ffmpeg is not installed; M4A/AAC cannot be decoded here")
			}
			pcm, err := Decode(data, time.Minute)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			c, lag := correlation(ref, pcm, conformanceMaxLag)
			dur := float64(len(pcm)) / SampleRate
			t.Logf("c = %.4f at lag %d (README: %.4f at lag %d; min %.3f), duration %.3f s (reference %.3f s)",
				c, lag, fc.ResearchC, fc.ResearchLag, fc.MinCorrelation, dur, refDur)
			if c < fc.MinCorrelation {
				t.Errorf("correlation %.4f < %.3f", c, fc.MinCorrelation)
			}
			if lagMS := math.Abs(float64(lag)) * 1000 / SampleRate; lagMS > fc.MaxAbsLagMS {
				t.Errorf("best lag %d samples = %.1f ms, want ≤ %.0f ms", lag, lagMS, fc.MaxAbsLagMS)
			}
			if d := math.Abs(dur - refDur); d > fc.MaxDurationS {
				t.Errorf("duration %.3f s differs from %.3f s by %.3f s > %.1f s", dur, refDur, d, fc.MaxDurationS)
			}
		})
	}
}

// readRefWAV reads a 16-bit mono WAV as int16/32768, independently of
// decodeWAV so that the reference does not depend on the code under test.
func readRefWAV(t *testing.T, path string) []float32 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for off := 12; off+8 <= len(b); {
		id := string(b[off : off+4])
		size := int(uint32(b[off+4]) | uint32(b[off+5])<<8 | uint32(b[off+6])<<16 | uint32(b[off+7])<<24)
		if id == "data" {
			d := b[off+8 : off+8+size]
			out := make([]float32, len(d)/2)
			for i := range out {
				out[i] = float32(int16(uint16(d[2*i])|uint16(d[2*i+1])<<8)) / 32768
			}
			return out
		}
		off += 8 + size + size&1
	}
	t.Fatalf("%s has no data chunk", path)
	return nil
}
