package whisper

import (
	"context"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/replyd/replyd/engine"
	"github.com/replyd/replyd/internal/shareddata"
)

// BenchmarkComputePaths sets the two compute paths side by side on the same
// model file and control loop, alternating within each op: the BLAS path
// (today's; run it with the best OPENBLAS_CORETYPE forced) and the ggml
// graphs on ggml's CPU backend. Rows: tiny.en and base.en shapes (random
// weights, written at bench time or taken from $REPLYD_BENCH_MODELS), q8_0
// and f16, 1 and 2 threads, jfk.wav (11 s) and its first 4 s (a short
// question); greedy, no fallback, 28 tokens a window at most (about what
// real tiny.en gives for jfk). Metrics per path: wall ms of the whole
// transcription, encoder ms (with the cross K/V), decoder ms per token, and
// the ratio ggml/blas of the wall time.
func BenchmarkComputePaths(b *testing.B) {
	dir := shareddata.Whisper(b)
	jfk := readWAV(b, filepath.Join(dir, "audio", "jfk.wav"))
	clips := []struct {
		name string
		pcm  []float32
	}{{"jfk11s", jfk}, {"question4s", jfk[:4*SampleRate]}}
	shapes := []struct {
		name string
		cfg  func(string) ModelConfig
	}{{"tiny-en", func(t string) ModelConfig { c := TinyENConfig(); c.WeightType = t; return c }}, {"base-en", BaseENConfig}}
	for _, shape := range shapes {
		for _, typ := range []string{"q8_0", "f16"} {
			path := benchModel(b, shape.name+"-"+typ+".bin", shape.cfg(typ))
			for _, threads := range []int{1, 2} {
				load := func(compute string) *Model {
					m, err := Load(path, Options{Threads: threads, MaxTokensPerWindow: 28, NoFallback: true, Compute: compute, Logger: quiet})
					if err != nil {
						b.Fatal(err)
					}
					return m
				}
				paths := []*Model{load(ComputeBLAS), load(ComputeGGMLCPU)}
				for _, clip := range clips {
					b.Run(shape.name+"/"+typ+"/threads="+strconv.Itoa(threads)+"/"+clip.name, func(b *testing.B) {
						var wall, enc, dec [2]float64
						var tokens [2]int
						for i := 0; i < b.N; i++ {
							for p, m := range paths {
								t0 := time.Now()
								tr, err := m.Transcribe(context.Background(), clip.pcm, engine.TranscribeOptions{})
								if err != nil {
									b.Fatal(err)
								}
								wall[p] += float64(time.Since(t0).Microseconds()) / 1000
								enc[p] += tr.Encoder.Seconds() * 1000
								dec[p] += tr.Decoder.Seconds() * 1000
								tokens[p] += len(tr.Tokens)
							}
						}
						n := float64(b.N)
						for p, name := range []string{"blas", "ggml"} {
							b.ReportMetric(wall[p]/n, name+"_wall_ms")
							b.ReportMetric(enc[p]/n, name+"_encoder_ms")
							b.ReportMetric(dec[p]/float64(max(tokens[p], 1)), name+"_decoder_ms/token")
						}
						b.ReportMetric(wall[1]/wall[0], "ggml/blas_wall")
						b.ReportMetric(enc[1]/enc[0], "ggml/blas_encoder")
					})
				}
				for _, m := range paths {
					m.Close()
				}
			}
		}
	}
}
