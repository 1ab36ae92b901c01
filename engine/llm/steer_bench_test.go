package llm

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/replyd/replyd/engine"
	"github.com/replyd/replyd/engine/steer"
	"github.com/replyd/replyd/internal/shareddata"
)

// openQwenVocabBench opens, once, an engine on a small model with Qwen2.5's
// real vocabulary (the vocabulary of the 0.5B and 1.5B shapes) for the
// steering benchmarks.
func openQwenVocabBench(b *testing.B) *Engine {
	b.Helper()
	tok := shareddata.QwenTokenizer(b)
	var err error
	qwenVocabOnce.Do(func() {
		cfg := ModelConfig{Name: "qwen-vocab", Embd: 64, Heads: 4, KVHeads: 2, Layers: 1, FF: 128,
			Vocab: 151936, CtxTrain: 4096, RopeTheta: 1e6, Quant: "q8_0", TiedEmbeddings: true,
			OutputScale: 0.3, Seed: 7, Tokenizer: tok, AddedTokens: QwenAddedTokens}
		dir, derr := os.MkdirTemp("", "replyd-steer-bench")
		if derr != nil {
			err = derr
			return
		}
		p := filepath.Join(dir, "qwen-vocab.gguf")
		if err = WriteModel(p, cfg); err != nil {
			return
		}
		qwenVocabBench, err = Open(Options{ModelPath: p, PrefixCacheMiB: 8, ContextPerSeq: 1024, MaxCandidates: 4})
	})
	if err != nil {
		b.Fatal(err)
	}
	if qwenVocabBench == nil {
		b.Fatal("the Qwen-vocabulary engine failed to open earlier")
	}
	return qwenVocabBench
}

var (
	qwenVocabOnce  sync.Once
	qwenVocabBench *Engine
)

// benchLogits are pseudo-random logits for the vocabulary of e.
func benchLogits(e *Engine) []float32 {
	rng := rand.New(rand.NewPCG(1, 1))
	l := make([]float32, e.sv.n)
	for i := range l {
		l[i] = float32(rng.NormFloat64() * 3)
	}
	return l
}

// steerStates are constraint states of a steered reply, from the most
// restrictive to the most permissive mask.
func steerStates(b *testing.B, e *Engine) []struct {
	name string
	sr   *steerRun
	st   steer.State
} {
	b.Helper()
	mk := func(s engine.Steer, written string) (*steerRun, steer.State) {
		sr, err := e.newSteerRun(s)
		if err != nil {
			b.Fatal(err)
		}
		st, ok, _ := sr.prog.Feed(sr.start, []byte(written))
		if !ok {
			b.Fatalf("%q refused", written)
		}
		return sr, st
	}
	words := engine.Steer{Mode: engine.SteerWords, Words: []string{"i", "w", "l", "t"}}
	var out []struct {
		name string
		sr   *steerRun
		st   steer.State
	}
	for _, c := range []struct {
		name    string
		s       engine.Steer
		written string
	}{
		{"spelled-word", engine.Steer{Mode: engine.SteerWords, Words: []string{"i", "w", "t", "g", "t", "t", "bedr"}}, "I want to go to the be"},
		{"word-start", words, "I"},
		{"in-word", words, "I wo"},
		{"prefix-done", engine.Steer{Mode: engine.SteerPrefix, Prefix: "I would li"}, " like"},
	} {
		sr, st := mk(c.s, c.written)
		out = append(out, struct {
			name string
			sr   *steerRun
			st   steer.State
		}{c.name, sr, st})
	}
	return out
}

// BenchmarkSteerScan compares the masked scan over the logits (top-k among
// the allowed tokens, log-sum-exp over all) with the unmasked one on
// Qwen2.5's real vocabulary (151,936 logits), in the same loop; the masks
// are the ones a steered reply meets. Target: ratio <= 1.05.
func BenchmarkSteerScan(b *testing.B) {
	e := openQwenVocabBench(b)
	logits := benchLogits(e)
	b.Logf("vocabulary: %d tokens, %d stop tokens, trie of %d nodes (%d without the word-only tokens)",
		e.sv.n, len(e.sv.stops), len(e.sv.all.nodes), len(e.sv.others.nodes))
	for _, c := range steerStates(b, e) {
		b.Run(c.name, func(b *testing.B) {
			m := c.sr.mask(c.st, c.sr.limit, false)
			allowed := 0
			for _, w := range m {
				allowed += popcount(w)
			}
			s := newSampler(0.8, 1, 1)
			var masked, plain time.Duration
			ratios := make([]float64, 0, b.N)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				// Each goes first every other iteration: the first
				// brings the logits into the cache for the second.
				var dp, dm time.Duration
				if i%2 == 0 {
					dp = timeIt(func() { s.sample(logits) })
					dm = timeIt(func() { s.sampleMasked(logits, m) })
				} else {
					dm = timeIt(func() { s.sampleMasked(logits, m) })
					dp = timeIt(func() { s.sample(logits) })
				}
				plain += dp
				masked += dm
				ratios = append(ratios, float64(dm)/float64(dp))
			}
			b.ReportMetric(float64(plain.Microseconds())/float64(b.N), "unmasked_us")
			b.ReportMetric(float64(masked.Microseconds())/float64(b.N), "masked_us")
			b.ReportMetric(float64(masked)/float64(plain), "ratio")
			// The median of the iterations' ratios: a scan preempted by
			// another process counts once, not by how long it waited.
			slices.Sort(ratios)
			b.ReportMetric(ratios[len(ratios)/2], "median_ratio")
			b.ReportMetric(float64(allowed), "allowed_tokens")
		})
	}
}

// timeIt returns how long f took.
func timeIt(f func()) time.Duration {
	t0 := time.Now()
	f()
	return time.Since(t0)
}

func popcount(w uint64) int {
	n := 0
	for ; w != 0; w &= w - 1 {
		n++
	}
	return n
}

// BenchmarkSteerMask is the cost of computing one state's mask (the trie
// walk; a request computes each state it meets once) on Qwen2.5's real
// vocabulary.
func BenchmarkSteerMask(b *testing.B) {
	e := openQwenVocabBench(b)
	for _, c := range steerStates(b, e) {
		b.Run(c.name, func(b *testing.B) {
			walked := 0
			for i := 0; i < b.N; i++ {
				clear(c.sr.masks)
				c.sr.walked = 0
				c.sr.mask(c.st, c.sr.limit, false)
				walked = c.sr.walked
			}
			b.ReportMetric(float64(walked), "trie_nodes")
		})
	}
}

// BenchmarkSteeredRequest compares steered requests with the unsteered one
// for the same warm dialog (same dialog_id, 4 candidates) on the
// Qwen2.5-0.5B shape: each steering mode's time per request over the
// unsteered request's (ratio; target <= 1.2), with the tokens sampled (a
// steered reply is as long as its constraint makes it).
func BenchmarkSteeredRequest(b *testing.B) {
	e := openBench(b)
	const dialogID = "bench-steer"
	warm := benchRequest(3, 4, dialogID)
	timed(b, e, warm, DecodeAuto)
	var base time.Duration
	var baseTokens float64
	for _, c := range []struct {
		name string
		s    *engine.Steer
	}{
		{"unsteered", nil},
		{"words", &engine.Steer{Mode: engine.SteerWords, Words: []string{"i", "w", "l", "t"}}},
		{"spelled", &engine.Steer{Mode: engine.SteerWords, Words: []string{"y", "p", "tea "}}},
		{"prefix", &engine.Steer{Mode: engine.SteerPrefix, Prefix: "I would li"}},
		{"replace", &engine.Steer{Mode: engine.SteerReplace, Text: "Tea with milk please", Word: 2}},
	} {
		b.Run(c.name, func(b *testing.B) {
			var total time.Duration
			tokens, got := 0, 0
			for i := 0; i < b.N; i++ {
				req := benchRequest(3, 4, dialogID)
				req.Seed = uint32(1 + i)
				req.Steer = c.s
				d, g := timed(b, e, req, DecodeAuto)
				total += d
				tokens += g.GenTokens
				got += len(g.Candidates)
			}
			per := total / time.Duration(b.N)
			perTokens := float64(tokens) / float64(b.N)
			if c.s == nil {
				base, baseTokens = per, perTokens
			}
			b.ReportMetric(float64(per.Milliseconds()), "ms/request")
			b.ReportMetric(perTokens, "tokens/request")
			b.ReportMetric(float64(got)/float64(b.N), "candidates/request")
			if base > 0 && baseTokens > 0 && perTokens > 0 {
				b.ReportMetric(float64(per)/float64(base), "x_unsteered")
				// Per token sampled: the cost of steering itself, apart
				// from replies the constraint makes longer or shorter.
				b.ReportMetric(float64(per)/perTokens/(float64(base)/baseTokens), "x_unsteered_per_token")
			}
		})
	}
}

// BenchmarkSteeredVsUnsteered is BenchmarkSteeredRequest interleaved: each
// iteration runs the unsteered request and then each steered one for the
// same warm dialog (same dialog_id, 4 candidates, the same seed), so that
// load from other processes hits all of them alike, and it reports each
// mode's time over the unsteered time of the same iterations (x_MODE;
// target <= 1.2). A steered reply is as long as its constraint makes it,
// so the modes do not decode alike: it also reports each mode's tokens
// sampled (tokens_x_MODE) and decodes (decodes_x_MODE) over the unsteered
// ones, and its time per token sampled (tok_x_MODE) and per decode
// (dec_x_MODE): the cost of steering itself. A steered decode tends to
// carry more sequences (its candidates run to the end their constraint
// allows, on this random-weight model often the token cap, while
// unsteered ones stop at a random newline), so dec_x overstates it and
// tok_x understates it a little. cpu_x_MODE is the ratio of the process's
// CPU time (user and system) in the requests: on a loaded machine, where
// wall times spread twofold, it still shows the work each mode does. Run
// it with -benchtime Nx.
func BenchmarkSteeredVsUnsteered(b *testing.B) {
	e := openBench(b)
	const dialogID = "bench-steer-interleaved"
	timed(b, e, benchRequest(3, 4, dialogID), DecodeAuto)
	modes := []struct {
		name string
		s    *engine.Steer
	}{
		{"unsteered", nil},
		{"words", &engine.Steer{Mode: engine.SteerWords, Words: []string{"i", "w", "l", "t"}}},
		{"prefix", &engine.Steer{Mode: engine.SteerPrefix, Prefix: "I would li"}},
		{"replace", &engine.Steer{Mode: engine.SteerReplace, Text: "Tea with milk please", Word: 2}},
	}
	total := make([]time.Duration, len(modes))
	tokens := make([]int, len(modes))
	decodes := make([]int, len(modes))
	cpu := make([]time.Duration, len(modes))
	var m int // the mode running, for the hook (owner goroutine)
	b.Logf("4 candidates decoded batched: %v (chosen when the engine opened)", e.batched[4])
	e.decodeHook = func(int) { decodes[m]++ }
	defer func() { e.decodeHook = nil }()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for m = range modes {
			req := benchRequest(3, 4, dialogID)
			req.Seed = uint32(1 + i)
			req.Steer = modes[m].s
			c0 := cpuTime()
			d, g := timed(b, e, req, DecodeAuto)
			cpu[m] += cpuTime() - c0
			total[m] += d
			tokens[m] += g.GenTokens
		}
	}
	b.ReportMetric(float64(total[0].Milliseconds())/float64(b.N), "unsteered_ms")
	for m := 1; m < len(modes); m++ {
		name := modes[m].name
		b.ReportMetric(float64(total[m])/float64(total[0]), "x_"+name)
		if tokens[m] > 0 && tokens[0] > 0 {
			b.ReportMetric(float64(tokens[m])/float64(tokens[0]), "tokens_x_"+name)
			b.ReportMetric(float64(total[m])/float64(tokens[m])/(float64(total[0])/float64(tokens[0])), "tok_x_"+name)
		}
		b.ReportMetric(float64(cpu[m])/float64(cpu[0]), "cpu_x_"+name)
		b.ReportMetric(float64(decodes[m])/float64(decodes[0]), "decodes_x_"+name)
		b.ReportMetric(float64(total[m])/float64(decodes[m])/(float64(total[0])/float64(decodes[0])), "dec_x_"+name)
	}
}

// cpuTime is the CPU time the process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
