package whisper

import (
	"bufio"
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/replyd/replyd/internal/shareddata"
)

// BenchmarkTranscribeJFK transcribes the 11 s jfk clip with a tiny.en-sized
// random-weight model (generated at bench time) on 1 and 2 threads.
// Random weights rarely emit <|endoftext|>, so the decoder runs to the
// token cap of 224. The tokens=28 runs cap the window at 28 tokens, about
// what real tiny.en produces for jfk (25 text tokens and timestamps or
// <|endoftext|>): their wall time is the one to set beside whisper.cpp's
// 1.2 s for tiny.en and jfk, whose figure includes loading the model
// (load_ms here).
func BenchmarkTranscribeJFK(b *testing.B) {
	dir := shareddata.Whisper(b)
	pcm := readWAV(b, filepath.Join(dir, "audio", "jfk.wav"))
	path := filepath.Join(b.TempDir(), "tiny-en-rand.bin")
	t0 := time.Now()
	if err := WriteModel(path, TinyENConfig()); err != nil {
		b.Fatal(err)
	}
	b.Logf("wrote the tiny.en-sized model in %v", time.Since(t0))
	for _, threads := range []int{1, 2} {
		for _, maxTok := range []int{0, 28} {
			name := "threads=" + strconv.Itoa(threads)
			if maxTok > 0 {
				name += "/tokens=" + strconv.Itoa(maxTok)
			}
			b.Run(name, func(b *testing.B) {
				runtime.GC()
				debug.FreeOSMemory()
				resetPeakRSS()
				t0 := time.Now()
				m, err := Load(path, Options{Threads: threads, MaxTokensPerWindow: maxTok, Logger: quiet})
				if err != nil {
					b.Fatal(err)
				}
				load := time.Since(t0)
				defer m.Close()
				var mel, enc, dec time.Duration
				var tokens int
				b.ResetTimer()
				c0 := cpuTime()
				for i := 0; i < b.N; i++ {
					res, err := m.run(context.Background(), pcm, -1, m.maxTok)
					if err != nil {
						b.Fatal(err)
					}
					mel += res.melDur
					enc += res.encDur
					dec += res.decDur
					for _, w := range res.windows {
						tokens += len(w.tokens)
					}
				}
				b.StopTimer()
				n := float64(b.N)
				// CPU time shows how much of the wall time was spent waiting for a
				// busy machine.
				b.ReportMetric((cpuTime()-c0).Seconds()/n, "cpu_s/op")
				wall := b.Elapsed().Seconds() / n
				b.ReportMetric(wall, "wall_s/op")
				b.ReportMetric(load.Seconds()*1000, "load_ms")
				b.ReportMetric(mel.Seconds()*1000/n, "mel_ms/op")
				b.ReportMetric(enc.Seconds()*1000/n, "encoder_ms/op")
				b.ReportMetric(dec.Seconds()*1000/float64(max(tokens, 1)), "decoder_ms/token")
				b.ReportMetric(float64(tokens)/n, "tokens/op")
				b.ReportMetric(wall/(float64(len(pcm))/SampleRate), "rtf")
				b.ReportMetric(float64(m.Info().Bytes)/1e6, "weights_MB")
				if rss := peakRSS(); rss > 0 {
					b.ReportMetric(float64(rss)/1e6, "peak_rss_MB")
				}
			})
		}
	}
}

// BenchmarkStagesJFK measures the CPU time of each stage of one jfk
// window on one thread: on a shared machine CPU time is steadier than wall
// time. The stages mirror whisper.cpp's timings: mel, encoder (including
// the cross-attention K/V) and decoder per token.
func BenchmarkStagesJFK(b *testing.B) {
	dir := shareddata.Whisper(b)
	pcm := readWAV(b, filepath.Join(dir, "audio", "jfk.wav"))
	path := filepath.Join(b.TempDir(), "tiny-en-rand.bin")
	if err := WriteModel(path, TinyENConfig()); err != nil {
		b.Fatal(err)
	}
	m, err := Load(path, Options{Threads: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	var mel, enc, dec time.Duration
	var tokens int
	input := make([]float32, m.hp.NMels*windowFrames)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c0 := cpuTime()
		spec := m.logMel(pcm)
		c1 := cpuTime()
		spec.window(0, input)
		st := mustWindow(b, m, input, 0)
		c2 := cpuTime()
		w, err := m.greedyWindow(context.Background(), st, 0, nil, -1, m.maxTok)
		if err != nil {
			b.Fatal(err)
		}
		c3 := cpuTime()
		mel += c1 - c0
		enc += c2 - c1
		dec += c3 - c2
		tokens += len(w.tokens)
	}
	n := float64(b.N)
	b.ReportMetric(mel.Seconds()*1000/n, "mel_cpu_ms/op")
	b.ReportMetric(enc.Seconds()*1000/n, "encoder_cpu_ms/op")
	b.ReportMetric(dec.Seconds()*1000/float64(tokens), "decoder_cpu_ms/token")
	b.ReportMetric(float64(tokens)/n, "tokens/op")
}

// cpuTime returns the user and system CPU time this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// resetPeakRSS resets the kernel's peak-RSS mark of this process (Linux).
func resetPeakRSS() {
	_ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
}

// peakRSS returns VmHWM of this process in bytes, or 0 where unknown.
func peakRSS() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err == nil {
				return kb * 1024
			}
		}
	}
	return 0
}

// BenchmarkWriteDemoModel measures WriteDemoModel (it should take well
// under a second).
func BenchmarkWriteDemoModel(b *testing.B) {
	path := filepath.Join(b.TempDir(), "demo.bin")
	for i := 0; i < b.N; i++ {
		if err := WriteDemoModel(path); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkNextToken measures greedy decoding's choice of the next token
// from one hidden state, on a tiny.en-sized F16 token embedding (51864 rows
// of 384): the full product (40 MB read per step) against the int8 shadow
// (20 MB plus a few exact rows), side by side, on 1 and 2 threads.
func BenchmarkNextToken(b *testing.B) {
	m := shadowModel(b, typeF16, 51864, 384, 1, 11)
	r := rand.New(rand.NewPCG(5, 6))
	xs := hiddenVectors(m, r, 16)
	sh := m.shadow
	for _, threads := range []int{1, 2} {
		for _, way := range []string{"full", "shadow"} {
			b.Run(way+"/threads="+strconv.Itoa(threads), func(b *testing.B) {
				m.threads = threads
				m.shadow = nil
				if way == "shadow" {
					m.shadow = sh
				}
				m.scr.shadow.counts = shadowCounts{}
				c0 := cpuTime()
				for i := 0; i < b.N; i++ {
					mustNext(b, m, xs[i%len(xs)], nil, false)
				}
				n := float64(b.N)
				b.ReportMetric((cpuTime()-c0).Seconds()*1000/n, "cpu_ms/op")
				b.ReportMetric(b.Elapsed().Seconds()*1000/n, "wall_ms/op")
				if c := m.scr.shadow.counts; c.steps > 0 {
					b.ReportMetric(float64(c.candidates)/float64(c.steps), "exact_rows/op")
				}
			})
		}
	}
	m.shadow = sh
}

// benchModel returns the path of a random-weight model written from cfg:
// in $REPLYD_BENCH_MODELS when that is set (written only when the file is
// not there yet, so that runs, and whisper-cli beside them, share the same
// files), else in a temporary folder.
func benchModel(b *testing.B, name string, cfg ModelConfig) string {
	dir := os.Getenv("REPLYD_BENCH_MODELS")
	if dir == "" {
		dir = b.TempDir()
	}
	path := filepath.Join(dir, name)
	if _, err := os.Stat(path); err == nil {
		return path
	}
	if err := WriteModel(path, cfg); err != nil {
		b.Fatal(err)
	}
	return path
}

// BenchmarkDecoderBaseEN measures the decoder's time per token on a
// base.en-shaped random-weight model (d = 512, 6 layers, written at bench
// time) in q8_0 and f16, on 1 and 2 threads: one op is a window of
// benchTokens greedy steps after the start prompt, each step one decoder
// pass and the choice of the next token, with the cross-attention K/V of
// jfk's first window, as whisper-bench times 256 single-token decodes.
// decoder_ms/token is the figure to set beside whisper.cpp's decode time
// per run on the same file.
func BenchmarkDecoderBaseEN(b *testing.B) {
	const benchTokens = 224
	dir := shareddata.Whisper(b)
	pcm := readWAV(b, filepath.Join(dir, "audio", "jfk.wav"))
	for _, typ := range []string{"q8_0", "f16"} {
		path := benchModel(b, "base-en-"+typ+".bin", BaseENConfig(typ))
		for _, threads := range []int{1, 2} {
			b.Run(typ+"/threads="+strconv.Itoa(threads), func(b *testing.B) {
				m, err := Load(path, Options{Threads: threads, Logger: quiet})
				if err != nil {
					b.Fatal(err)
				}
				defer m.Close()
				input := make([]float32, m.hp.NMels*windowFrames)
				m.logMel(pcm).window(0, input)
				st := mustWindow(b, m, input, 0)
				if threads > 1 {
					stopBLASThreads()
				}
				prompt := m.startPrompt(0)
				d := m.hp.NTextState
				var steps time.Duration
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					st.reset()
					h := mustDecode(b, m, st, prompt)
					last := h[(len(prompt)-1)*d:]
					t0 := time.Now()
					for k := 0; k < benchTokens; k++ {
						p := mustNext(b, m, last, nil, false)
						last = mustDecode(b, m, st, []int{p.id})
					}
					steps += time.Since(t0)
				}
				b.StopTimer()
				b.ReportMetric(steps.Seconds()*1000/float64(b.N*benchTokens), "decoder_ms/token")
			})
		}
	}
}
