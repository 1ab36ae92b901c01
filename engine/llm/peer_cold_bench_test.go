package llm

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/replyd/replyd/engine"
)

// BenchmarkColdPromptVsLlamaServer compares the speed of a cold prompt of
// about 2,000 tokens (a dialog of long turns, as a conversation becomes;
// REPLYD_BENCH_PROMPT_TOKENS sets another length) on replyd and on
// llama.cpp's llama-server, on the same GGUF file and the same rendered
// prompt, one candidate of 8 tokens, taking turns request by request. Each
// request's system message starts with a new word, so nothing is reused
// (llama-server is asked with cache_prompt false). llama-server runs
// `-t 2 -tb 2 -c 4096 -np 1` and its defaults otherwise; replyd is the
// engine in this process with a CPU budget of two cores, or with REPLYD_BIN
// that binary's HTTP API (REPLYD_LLM_CONTEXT 4096). It reports each side's
// median prompt tokens per second (each server's own prompt time) and their
// ratio, replyd over llama-server. It runs only with REPLYD_LLAMA_SERVER
// set, as BenchmarkVsLlamaServer (make bench-peer runs both).
func BenchmarkColdPromptVsLlamaServer(b *testing.B) {
	bin, model, threads := peerBenchSetup(b)
	target := 2000
	if n, err := fmt.Sscan(os.Getenv("REPLYD_BENCH_PROMPT_TOKENS"), &target); n == 0 || err != nil {
		target = 2000
	}
	const replyTokens = 8
	const ctxTokens = 4096
	e, err := Open(Options{ModelPath: model, ContextPerSeq: ctxTokens, MaxReplyTokens: replyTokens, MaxCandidates: 1,
		PrefixCacheMiB: 64, Threads: threads, CPU: engine.NewCores(threads)})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	srv, err := startLlamaServerArgs(bin, model, "-t", fmt.Sprint(threads), "-tb", fmt.Sprint(threads), "-c", fmt.Sprint(ctxTokens), "-np", "1")
	if err != nil {
		b.Fatal(err)
	}
	defer srv.stop()
	msgs := dialogOfTokens(b, e, target)
	generate := func(req engine.GenerateRequest) (engine.Generation, error) {
		return e.Generate(context.Background(), req)
	}
	if rbin := os.Getenv("REPLYD_BIN"); rbin != "" {
		rs, err := startReplydContext(rbin, model, threads, replyTokens, ctxTokens)
		if err != nil {
			b.Fatal(err)
		}
		defer rs.stop()
		generate = func(req engine.GenerateRequest) (engine.Generation, error) {
			if err := rs.setPrompt(req.SystemPrompt); err != nil {
				return engine.Generation{}, err
			}
			g, err := rs.infer(req)
			if err != nil {
				return g, err
			}
			tokens, err := e.promptTokens(req, &engine.Generation{})
			g.PromptTokens = len(tokens)
			return g, err
		}
	}
	var mine, theirs, paired []float64
	promptTokens := 0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		req := engine.GenerateRequest{
			SystemPrompt: fmt.Sprintf("R%d. %s", benchNonce.Add(1), defaultSystemPrompt),
			Profile:      engine.Profile{Biography: "Sam, 34, former maths teacher, has ALS and lives at home with his partner Alex.", Language: "en"},
			Messages:     msgs, N: 1, Temperature: 0.8, Seed: uint32(benchNonce.Add(1)),
		}
		g, err := generate(req)
		if err != nil {
			b.Fatal(err)
		}
		var a peerAnswer
		for try := 0; ; try++ {
			if a, err = srv.complete(req, replyTokens); err == nil || try == 4 || !strings.Contains(err.Error(), "expected") {
				break
			}
			req.Seed++
		}
		if err != nil {
			b.Fatal(err)
		}
		if g.PromptTokens != a.promptTokens {
			b.Fatalf("the prompts differ: replyd %d tokens, llama-server %d", g.PromptTokens, a.promptTokens)
		}
		promptTokens = g.PromptTokens
		r := float64(g.PromptTokens) / g.Prompt.Seconds()
		s := float64(a.promptTokens) / a.prompt.Seconds()
		mine, theirs, paired = append(mine, r), append(theirs, s), append(paired, r/s)
	}
	b.StopTimer()
	med := func(v []float64) float64 {
		v = slices.Clone(v)
		slices.Sort(v)
		return v[len(v)/2]
	}
	b.ReportMetric(float64(promptTokens), "prompt_tokens")
	b.ReportMetric(med(mine), "replyd_tok/s")
	b.ReportMetric(med(theirs), "server_tok/s")
	b.ReportMetric(med(mine)/med(theirs), "prompt_speed_ratio")
	b.ReportMetric(med(paired), "paired_ratio")
}

// dialogOfTokens returns a dialog of long partner turns and short replies
// whose prompt is at least target tokens on e.
func dialogOfTokens(tb testing.TB, e *Engine, target int) []engine.Message {
	tb.Helper()
	partner := []string{
		"Good morning, did you manage to sleep a bit better last night? The nurse said the new mattress should help with the pressure on your hip.",
		"The physiotherapist rang to say she will be here around ten instead of nine, so we have time for a proper breakfast and the news.",
		"Your sister sent a message asking whether Sunday afternoon still suits us for the visit, and whether she should bring the children.",
		"It looks like rain again, so maybe we skip the walk to the park today and watch the documentary about whales instead.",
		"I found the old chess set in the loft, the one with the missing white bishop; we could use a coin for it like last time.",
		"The pharmacy could only give us half of the prescription, the rest comes on Thursday, so I will go back after the shopping.",
	}
	replies := []string{"Yes, a bit better.", "Fine by me.", "Sunday suits us.", "Whales, please.", "Use the coin.", "Thanks."}
	var msgs []engine.Message
	for i := 0; ; i++ {
		msgs = append(msgs, engine.Message{Role: engine.RoleSpeaker, Content: partner[i%len(partner)]})
		req := engine.GenerateRequest{SystemPrompt: defaultSystemPrompt, Messages: msgs, N: 1}
		tokens, err := e.promptTokens(req, &engine.Generation{})
		if err != nil {
			tb.Fatal(err)
		}
		if len(tokens) >= target {
			return msgs
		}
		msgs = append(msgs, engine.Message{Role: engine.RoleDisabledPerson, Content: replies[i%len(replies)]})
	}
}
