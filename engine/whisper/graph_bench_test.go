package whisper

import (
	"context"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/replyd/replyd/internal/shareddata"
)

// benchSteps is the decoder's length in BenchmarkComputePaths: the token
// cap of its models (random weights end a window at no fixed length).
const benchSteps = 28

// fixedSteps decodes the start prompt and then benchSteps greedy tokens,
// <|endoftext|> or not, on the decoder state m's last transcription left
// (its last window's cross K/V), and returns the prompt's and the steps'
// times in ms.
func fixedSteps(t testing.TB, m *Model, n int) (prompt, steps float64) {
	st := m.scr.dec
	st.reset()
	t0 := time.Now()
	p := m.startPrompt(0)
	h := mustDecode(t, m, st, p)
	last := h[(len(p)-1)*m.hp.NTextState:]
	m.stopBLAS()
	t1 := time.Now()
	for range n {
		pk := mustNext(t, m, last, nil, false)
		last = mustDecode(t, m, st, []int{pk.id})
	}
	return float64(t1.Sub(t0).Microseconds()) / 1000, float64(time.Since(t1).Microseconds()) / 1000
}

// BenchmarkComputePaths sets the two compute paths side by side on the same
// model file and control loop, alternating within each op: the BLAS path
// (today's; run it with the best OPENBLAS_CORETYPE forced) and the ggml
// graphs on ggml's CPU backend. Rows: tiny.en and base.en shapes (random
// weights, written at bench time or taken from $REPLYD_BENCH_MODELS), q8_0
// and f16, 1 and 2 threads, jfk.wav (11 s) and its first 4 s (a short
// question); greedy, no fallback, 28 tokens a window at most (about what
// real tiny.en gives for jfk). Metrics per path: wall ms of the whole
// transcription at the tokens it decoded (_tokens: random weights end a
// window at no fixed length), encoder ms (with the cross K/V), decoder ms
// per token over benchSteps greedy steps after the start prompt
// (fixedSteps, on the transcription's last window), _wall28_ms (mel,
// encoder, prompt and those steps: the whole file at 28 tokens), and
// the ratios ggml/blas. With REPLYD_BENCH_WHISPER_CPP
// (peer_bench_test.go) whisper.cpp runs third in each op on the same file
// and clip: whispercpp_encoder_ms and _wall_ms (its whole run less the
// load, at the whispercpp_tokens it sampled: random weights end it early)
// from whisper-cli, _decoder_ms/token from whisper-bench (once per shape,
// type and thread count), and _wall28_ms, its mel, encoder and prompt
// with 28 tokens at that rate, the length the two replyd paths decode.
// scripts/bench-compute-paths.sh runs it the documented way.
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
	b.Logf("OpenBLAS kernels: %s", OpenBLASCore())
	pe := newPeer(b)
	wavs := map[string]string{}
	for _, clip := range clips {
		if pe != nil {
			wavs[clip.name] = pe.wav(b, clip.name, clip.pcm)
		}
	}
	for _, shape := range shapes {
		for _, typ := range []string{"q8_0", "f16"} {
			path := benchModel(b, shape.name+"-"+typ+".bin", shape.cfg(typ))
			for _, threads := range []int{1, 2} {
				peerDec := -1.0 // whisper-bench's decoder ms per token, once per row group
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
						var wall, mel, enc, prompt, steps [2]float64
						var decoded [2]int
						var peerT []peerTimings
						for i := 0; i < b.N; i++ {
							for p, m := range paths {
								t0 := time.Now()
								res, err := m.run(context.Background(), clip.pcm, -1, m.maxTok)
								if err != nil {
									b.Fatal(err)
								}
								wall[p] += float64(time.Since(t0).Microseconds()) / 1000
								mel[p] += res.melDur.Seconds() * 1000
								enc[p] += res.encDur.Seconds() * 1000
								decoded[p] += res.decoded
								pr, st := fixedSteps(b, m, benchSteps)
								prompt[p] += pr
								steps[p] += st
							}
							if pe != nil {
								peerT = append(peerT, pe.transcribe(b, path, wavs[clip.name], threads))
								if peerDec < 0 {
									peerDec = pe.decoderPerToken(b, path, threads)
								}
							}
						}
						n := float64(b.N)
						var w28 [2]float64
						for p, name := range []string{"blas", "ggml"} {
							w28[p] = (mel[p] + enc[p] + prompt[p] + steps[p]) / n
							b.ReportMetric(wall[p]/n, name+"_wall_ms")
							b.ReportMetric(float64(decoded[p])/n, name+"_tokens")
							b.ReportMetric(w28[p], name+"_wall28_ms")
							b.ReportMetric(enc[p]/n, name+"_encoder_ms")
							b.ReportMetric(steps[p]/n/benchSteps, name+"_decoder_ms/token")
						}
						b.ReportMetric(w28[1]/w28[0], "ggml/blas_wall28")
						b.ReportMetric(enc[1]/enc[0], "ggml/blas_encoder")
						b.ReportMetric(steps[1]/steps[0], "ggml/blas_decoder")
						if len(peerT) > 0 {
							var w, e, w28, toks float64
							for _, t := range peerT {
								w += t.total - t.load
								e += t.encode
								w28 += t.mel + t.encode + t.batchd + t.prompt + benchSteps*peerDec
								toks += float64(t.sampleRuns)
							}
							k := float64(len(peerT))
							b.ReportMetric(w/k, "whispercpp_wall_ms")
							b.ReportMetric(e/k, "whispercpp_encoder_ms")
							b.ReportMetric(toks/k, "whispercpp_tokens")
							b.ReportMetric(peerDec, "whispercpp_decoder_ms/token")
							b.ReportMetric(w28/k, "whispercpp_wall28_ms")
						}
					})
				}
				for _, m := range paths {
					m.Close()
				}
			}
		}
	}
}
