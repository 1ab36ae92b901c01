package audio

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/replyd/replyd/internal/shareddata"
	"github.com/replyd/replyd/internal/testaudio"
)

// BenchmarkDecode decodes each shared format file (5.5 s of speech) and
// reports the cost per second of audio as ns/audio-s.
func BenchmarkDecode(b *testing.B) {
	dir := filepath.Join(shareddata.Whisper(b), "audio-formats")
	files, err := filepath.Glob(filepath.Join(dir, "speech.*"))
	if err != nil || len(files) == 0 {
		b.Fatalf("no format files in %s", dir)
	}
	for _, path := range files {
		data, err := os.ReadFile(path)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(string(Detect(data))+"/"+filepath.Base(path), func(b *testing.B) {
			if Detect(data) == FormatM4A && lookFFmpeg() == "" {
				b.Skip("ffmpeg is not installed")
			}
			var seconds float64
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				pcm, err := Decode(data, time.Minute)
				if err != nil {
					b.Fatal(err)
				}
				seconds = float64(len(pcm)) / SampleRate
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/seconds, "ns/audio-s")
		})
	}
}

// BenchmarkResample resamples one second of 44.1 kHz audio to 16 kHz.
func BenchmarkResample(b *testing.B) {
	in := testaudio.Sine(440, 44100, 44100, 0.5)
	for b.Loop() {
		Resample(in, 44100, SampleRate)
	}
}
