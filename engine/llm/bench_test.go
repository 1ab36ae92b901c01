package llm

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/replyd/replyd/engine"
)

// The benchmarks run on a model with Qwen2.5-0.5B's dimensions (q8_0,
// random weights) written to a temporary directory on first use; with
// REPLYD_BENCH_LARGE=1 BenchmarkDecoding also runs the Qwen2.5-1.5B shape.
// REPLYD_BENCH_THREADS sets the threads (default runtime.NumCPU()-1). Every
// benchmark interleaves the variants it compares, one of each per
// iteration, and reports their ratios, so load from other processes hits
// all variants alike.

var benchModel = sync.OnceValues(func() (string, error) { return writeBenchModel(Qwen05BConfig()) })

var benchModelLarge = sync.OnceValues(func() (string, error) { return writeBenchModel(Qwen15BConfig()) })

func writeBenchModel(cfg ModelConfig) (string, error) {
	dir, err := os.MkdirTemp("", "replyd-llm-bench")
	if err != nil {
		return "", err
	}
	// The benchmark shapes have Qwen's real vocabulary, so a dialog costs
	// the tokens it costs a real Qwen2.5.
	cfg.Tokenizer = os.Getenv("REPLYD_QWEN_TOKENIZER")
	if cfg.Tokenizer == "" {
		cfg.Tokenizer = filepath.Join("..", "..", "models", "qwen-tokenizer.json")
	}
	if _, err := os.Stat(cfg.Tokenizer); err != nil {
		return "", fmt.Errorf("the benchmark models need Qwen's tokenizer.json (scripts/qwen-tokenizer.sh fetches it): %w", err)
	}
	p := filepath.Join(dir, cfg.Name+".gguf")
	return p, WriteModel(p, cfg)
}

func benchThreads() int {
	n, _ := strconv.Atoi(os.Getenv("REPLYD_BENCH_THREADS"))
	return n
}

// benchNonce makes every cold request's system prompt differ from the one
// before from its first word, so that no request reuses the prompt the
// context holds (any request reuses the common prefix of what it holds).
var benchNonce atomic.Int64

var benchEngine = sync.OnceValues(func() (*Engine, error) { return openBenchEngine(4) })

// benchEngine8 has the same settings as benchEngine but room for eight
// candidates.
var benchEngine8 = sync.OnceValues(func() (*Engine, error) { return openBenchEngine(8) })

func openBenchEngine(maxCandidates int) (*Engine, error) {
	p, err := benchModel()
	if err != nil {
		return nil, err
	}
	// A 1024-token dialog keeps the KV pool small; 16 reply tokens keep a
	// run feasible on two cores.
	return Open(Options{ModelPath: p, ContextPerSeq: 1024, MaxReplyTokens: 16, MaxCandidates: maxCandidates, PrefixCacheMiB: 64,
		Threads: benchThreads()})
}

func openBench(b *testing.B) *Engine {
	b.Helper()
	e, err := benchEngine()
	if err != nil {
		b.Fatal(err)
	}
	return e
}

// benchRequest is a request of turns dialog turns and n candidates. Without
// a dialogID it is cold: its system prompt starts with a word no earlier
// request's had.
func benchRequest(turns int, n int, dialogID string) engine.GenerateRequest {
	sp := "You suggest replies for Sam."
	if dialogID == "" {
		sp = fmt.Sprintf("R%d. %s", benchNonce.Add(1), sp)
	}
	return engine.GenerateRequest{
		SystemPrompt: sp,
		Profile:      engine.Profile{Biography: "Sam is 34 and has ALS.", Language: "en"},
		Messages:     dialog(turns),
		DialogID:     dialogID,
		N:            n, Temperature: 0.8, Seed: 1,
	}
}

// timed runs one request and returns its wall time and result.
func timed(b *testing.B, e *Engine, req engine.GenerateRequest, m mode) (time.Duration, engine.Generation) {
	b.Helper()
	t0 := time.Now()
	g, err := e.generate(context.Background(), req, m)
	if err != nil {
		b.Fatal(err)
	}
	return time.Since(t0), g
}

func reportRSS(b *testing.B) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err == nil {
		b.ReportMetric(float64(ru.Maxrss)/1024, "peak_rss_MiB")
	}
}

// BenchmarkCandidates compares four candidates generated naively (prompt
// evaluated per candidate, candidates one after another), with a shared
// prompt, and with a shared prompt and batched sampling, against one
// candidate.
func BenchmarkCandidates(b *testing.B) {
	e := openBench(b)
	var n1, naive, shared, batched time.Duration
	var promptTok, genTok int
	var promptTime, genTime time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		d, g := timed(b, e, benchRequest(3, 1, ""), modeBatched)
		n1 += d
		d, _ = timed(b, e, benchRequest(3, 4, ""), modeNaive)
		naive += d
		d, _ = timed(b, e, benchRequest(3, 4, ""), modeShared)
		shared += d
		var g4 engine.Generation
		d, g4 = timed(b, e, benchRequest(3, 4, ""), modeBatched)
		batched += d
		promptTok += g.PromptTokens
		promptTime += g.Prompt
		genTok += g4.GenTokens
		genTime += g4.Generation
	}
	b.StopTimer()
	ms := func(d time.Duration) float64 { return float64(d.Milliseconds()) / float64(b.N) }
	b.ReportMetric(ms(n1), "N1_ms")
	b.ReportMetric(ms(naive), "N4naive_ms")
	b.ReportMetric(ms(shared), "N4shared_ms")
	b.ReportMetric(ms(batched), "N4batched_ms")
	b.ReportMetric(float64(naive)/float64(n1), "naive/N1")
	b.ReportMetric(float64(shared)/float64(n1), "shared/N1")
	b.ReportMetric(float64(batched)/float64(n1), "batched/N1")
	b.ReportMetric(float64(promptTok)/promptTime.Seconds(), "prompt_tok/s")
	b.ReportMetric(float64(genTok)/genTime.Seconds(), "gen4_tok/s")
	reportRSS(b)
}

// BenchmarkContinuousBatchingBound bounds what continuous batching (serving
// the sequences of several requests in the same decode) could save for two
// concurrent requests. Each iteration measures, on one engine with room for
// eight candidates:
//
//	(a) two different requests (two different short dialogs, no dialog_id),
//	    N=4 each, served back to back, as the engine does today;
//	(b) one request with N=8 on the first dialog: eight candidates in one
//	    decode per step, which is what merging (a)'s two generation phases
//	    into one would cost at best.
//
// Prompt evaluation of different requests cannot be shared (different
// tokens, different sequences), so merging can only save on the generation
// phase: the saving is at most gen_2x4_ms - gen_1x8_ms, and only while two
// requests are actually in the engine at once. It is not free either: the
// first request's candidates cannot step while the second request's prompt
// is evaluated (or they step with its prompt chunks in the same decode, which
// makes every step as slow), so the first request is delayed by up to the
// second's prompt_ms. gen_1x8/gen_2x4 near 1 means the decode cost on this
// CPU grows linearly with the sequences in the batch and there is nothing
// to gain; gen_share_a says how much of a request's wall time the bound
// applies to at all. gen_tok_* count the tokens sampled, to check that (a)
// and (b) did comparable work.
func BenchmarkContinuousBatchingBound(b *testing.B) {
	e, err := benchEngine8()
	if err != nil {
		b.Fatal(err)
	}
	req1 := benchRequest(3, 4, "")
	req2 := benchRequest(3, 4, "")
	req2.Messages = []engine.Message{
		{Role: engine.RoleSpeaker, Content: "Hi Sam, the physio is here early."},
		{Role: engine.RoleDisabledPerson, Content: "Oh, already?"},
		{Role: engine.RoleSpeaker, Content: "She can wait ten minutes if you like."},
	}
	req2.Seed = 2
	req8 := benchRequest(3, 8, "")
	var wallA, prompt1, prompt2, gen2x4, gen1x8 time.Duration
	var tok2x4, tok1x8 int
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		d1, g1 := timed(b, e, req1, modeBatched)
		d2, g2 := timed(b, e, req2, modeBatched)
		wallA += d1 + d2
		prompt1 += g1.Prompt
		prompt2 += g2.Prompt
		gen2x4 += g1.Generation + g2.Generation
		tok2x4 += g1.GenTokens + g2.GenTokens
		_, g8 := timed(b, e, req8, modeBatched)
		gen1x8 += g8.Generation
		tok1x8 += g8.GenTokens
	}
	b.StopTimer()
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(b.N) }
	b.ReportMetric(ms(gen2x4), "gen_2x4_ms")
	b.ReportMetric(ms(gen1x8), "gen_1x8_ms")
	b.ReportMetric(float64(gen1x8)/float64(gen2x4), "gen_1x8/gen_2x4")
	b.ReportMetric(ms(prompt1), "prompt1_ms")
	b.ReportMetric(ms(prompt2), "prompt2_ms")
	b.ReportMetric(ms(wallA), "wall_2x4_ms")
	b.ReportMetric(float64(gen2x4)/float64(wallA), "gen_share_a")
	b.ReportMetric(float64(tok2x4)/float64(b.N), "gen_tok_2x4")
	b.ReportMetric(float64(tok1x8)/float64(b.N), "gen_tok_1x8")
	reportRSS(b)
}

// BenchmarkDialogPrefix compares the eleventh turn of a dialog whose first
// ten turns are in the prefix cache (warm) with the same dialog evaluated
// from scratch (cold).
func BenchmarkDialogPrefix(b *testing.B) {
	e := openBench(b)
	var warm, cold time.Duration
	var cached, prompt int
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		id := fmt.Sprintf("bench-dialog-%d", i)
		b.StopTimer()
		if _, err := e.Generate(context.Background(), benchRequest(10, 1, id)); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		d, g := timed(b, e, benchRequest(11, 1, id), modeBatched)
		warm += d
		cached += g.CachedTokens
		prompt += g.PromptTokens
		d, _ = timed(b, e, benchRequest(11, 1, ""), modeBatched)
		cold += d
	}
	b.StopTimer()
	b.ReportMetric(float64(warm.Milliseconds())/float64(b.N), "warm_ms")
	b.ReportMetric(float64(cold.Milliseconds())/float64(b.N), "cold_ms")
	b.ReportMetric(float64(warm)/float64(cold), "warm/cold")
	b.ReportMetric(float64(cached)/float64(prompt), "cached_fraction")
	reportRSS(b)
}

// BenchmarkDecoding compares the candidates of one request decoded batched
// (one decode per step for all of them) and sequentially (one after another
// from the shared prompt), for 3 and 4 candidates, and reports which one
// Open's timing chose (1 = batched). The issue measured a 3-sequence step of
// the 1.5B shape at 4.1x a 1-sequence step on two cores, where sequential
// decoding wins, and a 4-sequence step of the 0.5B shape at 3x, where
// batching wins a little.
func BenchmarkDecoding(b *testing.B) {
	shapes := []struct {
		name  string
		model func() (string, error)
	}{{"0.5b", benchModel}}
	if os.Getenv("REPLYD_BENCH_LARGE") == "1" {
		shapes = append(shapes, struct {
			name  string
			model func() (string, error)
		}{"1.5b", benchModelLarge})
	}
	for _, sh := range shapes {
		b.Run(sh.name, func(b *testing.B) {
			p, err := sh.model()
			if err != nil {
				b.Fatal(err)
			}
			e, err := Open(Options{ModelPath: p, ContextPerSeq: 1024, MaxReplyTokens: 16, MaxCandidates: 4, PrefixCacheMiB: 64,
				Threads: benchThreads()})
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close()
			var batched, sequential [5]time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for _, n := range []int{3, 4} {
					// The same cold prompt for both: the second reuses it.
					req := benchRequest(3, n, "")
					for k := 0; k < 2; k++ {
						if (i+k)%2 == 0 {
							_, g := timed(b, e, req, modeBatched)
							batched[n] += g.Generation
						} else {
							_, g := timed(b, e, req, modeShared)
							sequential[n] += g.Generation
						}
					}
				}
			}
			b.StopTimer()
			for _, n := range []int{3, 4} {
				ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(b.N) }
				b.ReportMetric(ms(batched[n]), fmt.Sprintf("gen_N%d_batched_ms", n))
				b.ReportMetric(ms(sequential[n]), fmt.Sprintf("gen_N%d_sequential_ms", n))
				b.ReportMetric(float64(batched[n])/float64(sequential[n]), fmt.Sprintf("N%d_batched/sequential", n))
				chosen := 0.0
				if e.batched[n] {
					chosen = 1
				}
				b.ReportMetric(chosen, fmt.Sprintf("N%d_auto_batched", n))
				b.ReportMetric(float64(e.stepCost[n])/float64(e.stepCost[1]), fmt.Sprintf("step%d/step1", n))
			}
			reportRSS(b)
		})
	}
}

// BenchmarkWriteDemoModel measures the demo model generator (the issue asks
// for under a second).
func BenchmarkWriteDemoModel(b *testing.B) {
	p := filepath.Join(b.TempDir(), "demo.gguf")
	for i := 0; i < b.N; i++ {
		if err := WriteDemoModel(p); err != nil {
			b.Fatal(err)
		}
	}
}
