package llm

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/replyd/replyd/engine"
	"github.com/replyd/replyd/internal/replydproc"
)

// BenchmarkVsLlamaServer times replyd's engine against llama.cpp's
// llama-server on the same GGUF file and the same rendered prompt, taking
// turns request by request, for 1 and for 4 candidates. It runs only with
// REPLYD_LLAMA_SERVER naming a llama-server binary, built as
// docs/development.md says (never part of replyd):
//
//	REPLYD_LLAMA_SERVER=/tmp/llama.cpp/build/bin/llama-server \
//	REPLYD_BENCH_MODEL=~/.cache/replyd/synth/synth-qwen2.5-0.5b-q8_0.gguf \
//	go test -run '^$' -bench VsLlamaServer -benchtime 5x ./engine/llm/
//
// Both run 2 threads (REPLYD_BENCH_THREADS), 48 tokens a candidate with a
// newline stop and replyd's sampler settings; every request's system
// message starts with a new word so that neither reuses a prompt. replyd is
// the engine in this process with the CPU budget of two cores, as `replyd
// serve` runs it; llama-server is asked over HTTP with `n`, as
// `llama-server -m MODEL -t 2 -tb 2 -c 8192 -np 4`. Each side's wall time
// is from the request to the answer; the prompt and generation times are
// each server's own (timings_ms; llama-server's timings). The benchmark
// fails when the two prompts differ in length. With REPLYD_BIN naming a
// replyd binary (bin/replyd-native for this CPU), replyd is that binary's
// HTTP API instead (`replyd serve`, REPLYD_THREADS and REPLYD_CPU_CORES 2,
// REPLYD_MAX_REPLY_TOKENS 48, REPLYD_LLM_CONTEXT 2048), asked as a tablet
// asks, and its wall time is the client's.
func BenchmarkVsLlamaServer(b *testing.B) {
	bin, model, threads := peerBenchSetup(b)
	const replyTokens = 48
	e, err := Open(Options{ModelPath: model, ContextPerSeq: 2048, MaxReplyTokens: replyTokens, MaxCandidates: 4,
		PrefixCacheMiB: 64, Threads: threads, CPU: engine.NewCores(threads)})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	srv, err := startLlamaServer(bin, model, threads)
	if err != nil {
		b.Fatal(err)
	}
	defer srv.stop()
	// generate answers req and returns the time it took.
	generate := func(req engine.GenerateRequest) (engine.Generation, time.Duration, error) {
		t0 := time.Now()
		g, err := e.Generate(context.Background(), req)
		return g, time.Since(t0), err
	}
	if bin := os.Getenv("REPLYD_BIN"); bin != "" {
		rs, err := startReplyd(bin, model, threads, replyTokens)
		if err != nil {
			b.Fatal(err)
		}
		defer rs.stop()
		generate = func(req engine.GenerateRequest) (engine.Generation, time.Duration, error) {
			// The request's system prompt (a new first word) becomes the
			// server's before the clock starts.
			if err := rs.setPrompt(req.SystemPrompt); err != nil {
				return engine.Generation{}, 0, err
			}
			t0 := time.Now()
			g, err := rs.infer(req)
			wall := time.Since(t0)
			if err != nil {
				return g, wall, err
			}
			tokens, err := e.promptTokens(req, &engine.Generation{})
			g.PromptTokens = len(tokens)
			return g, wall, err
		}
	}

	type side struct{ wall, prompt, gen []time.Duration }
	results := map[string]*side{}
	get := func(k string) *side {
		if results[k] == nil {
			results[k] = &side{}
		}
		return results[k]
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, n := range []int{1, 4} {
			req := peerRequest(n)
			g, wall, err := generate(req)
			if err != nil {
				b.Fatal(err)
			}
			r := get(fmt.Sprintf("replyd/%d", n))
			r.wall = append(r.wall, wall)
			r.prompt = append(r.prompt, g.Prompt)
			r.gen = append(r.gen, g.Generation)

			// The same request: each server sees a new first word anyway.
			// llama-server's chat parser sometimes refuses what random
			// weights write (500 "does not match the expected ... format");
			// such a request is asked again, with the next seed.
			var a peerAnswer
			var t0 time.Time
			for try := 0; ; try++ {
				t0 = time.Now()
				if a, err = srv.complete(req, replyTokens); err == nil || try == 4 || !strings.Contains(err.Error(), "expected") {
					break
				}
				b.Logf("asking again: %v", err)
				req.Seed++
			}
			if err != nil {
				b.Fatal(err)
			}
			s := get(fmt.Sprintf("llama-server/%d", n))
			s.wall = append(s.wall, time.Since(t0))
			s.prompt = append(s.prompt, a.prompt)
			s.gen = append(s.gen, a.gen)
			if i == 0 {
				b.Logf("n=%d: prompt %d tokens (llama-server %d), generated %d tokens (llama-server %d for its first)",
					n, g.PromptTokens, a.promptTokens, g.GenTokens, a.genTokens)
				if g.PromptTokens != a.promptTokens {
					b.Fatalf("the prompts differ: replyd %d tokens, llama-server %d", g.PromptTokens, a.promptTokens)
				}
			}
		}
	}
	b.StopTimer()
	med := func(d []time.Duration) time.Duration {
		d = slices.Clone(d)
		slices.Sort(d)
		return d[len(d)/2]
	}
	for _, n := range []int{1, 4} {
		r, s := results[fmt.Sprintf("replyd/%d", n)], results[fmt.Sprintf("llama-server/%d", n)]
		b.ReportMetric(float64(med(r.wall).Milliseconds()), fmt.Sprintf("n%d_replyd_ms", n))
		b.ReportMetric(float64(med(s.wall).Milliseconds()), fmt.Sprintf("n%d_server_ms", n))
		b.ReportMetric(float64(med(r.wall))/float64(med(s.wall)), fmt.Sprintf("n%d_wall_ratio", n))
		// The median of each round's own ratio: the two requests of a
		// round ran next to each other, under the same load.
		var paired []float64
		for i := range r.wall {
			paired = append(paired, float64(r.wall[i])/float64(s.wall[i]))
		}
		slices.Sort(paired)
		b.ReportMetric(paired[len(paired)/2], fmt.Sprintf("n%d_paired_ratio", n))
		b.ReportMetric(float64(med(r.prompt))/float64(med(s.prompt)), fmt.Sprintf("n%d_prompt_ratio", n))
		b.ReportMetric(float64(med(r.gen))/float64(med(s.gen)), fmt.Sprintf("n%d_gen_ratio", n))
	}
}

// peerRequest is the benchmark's dialog with n candidates, its system
// prompt starting with a word no earlier request had.
func peerRequest(n int) engine.GenerateRequest {
	return engine.GenerateRequest{
		SystemPrompt: fmt.Sprintf("R%d. %s", benchNonce.Add(1), defaultSystemPrompt),
		Profile: engine.Profile{Biography: "Sam, 34, former maths teacher, has ALS and lives at home with his partner Alex.",
			Persona: "dry humour, brief, likes football and his dog Max", Language: "en"},
		Messages: dialog(27),
		N:        n, Temperature: 0.8, Seed: uint32(benchNonce.Add(1)),
	}
}

// llamaServer is a llama-server process.
type llamaServer struct {
	cmd  *exec.Cmd
	url  string
	logs bytes.Buffer
}

// peerBenchSetup returns the llama-server binary (REPLYD_LLAMA_SERVER; the
// benchmark is skipped without it), the GGUF model (REPLYD_BENCH_MODEL or
// the synthetic one) and the thread count (REPLYD_BENCH_THREADS, else 2)
// that the benchmarks against llama-server share.
func peerBenchSetup(b *testing.B) (bin, model string, threads int) {
	b.Helper()
	bin = os.Getenv("REPLYD_LLAMA_SERVER")
	if bin == "" {
		b.Skip("REPLYD_LLAMA_SERVER is not set")
	}
	model = os.Getenv("REPLYD_BENCH_MODEL")
	if model == "" {
		p, err := benchModel()
		if err != nil {
			b.Fatal(err)
		}
		model = p
	}
	threads = benchThreads()
	if threads <= 0 {
		threads = 2
	}
	return bin, model, threads
}

func startLlamaServer(bin, model string, threads int) (*llamaServer, error) {
	return startLlamaServerArgs(bin, model, "-t", fmt.Sprint(threads), "-tb", fmt.Sprint(threads), "-c", "8192", "-np", "4")
}

// startLlamaServerArgs starts llama-server on model with args.
func startLlamaServerArgs(bin, model string, args ...string) (*llamaServer, error) {
	addr, err := replydproc.FreeAddr()
	if err != nil {
		return nil, err
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	s := &llamaServer{url: "http://" + addr}
	s.cmd = exec.Command(bin, append([]string{"-m", model, "--host", host, "--port", port}, args...)...)
	s.cmd.Stdout, s.cmd.Stderr = &s.logs, &s.logs
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		resp, err := http.Get(s.url + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s, nil
			}
		}
	}
	s.stop()
	return nil, fmt.Errorf("llama-server did not become ready: %s", s.logs.String())
}

func (s *llamaServer) stop() {
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
}

// peerAnswer is what llama-server reports of one request.
type peerAnswer struct {
	prompt, gen             time.Duration
	promptTokens, genTokens int
}

// complete asks llama-server for req.N completions of the chat replyd
// renders for req, with replyd's sampler settings.
func (s *llamaServer) complete(req engine.GenerateRequest, maxTokens int) (peerAnswer, error) {
	msgs := []map[string]string{{"role": "system", "content": systemMessage(req)}}
	for _, t := range dialogTurns(req.Messages) {
		msgs = append(msgs, map[string]string{"role": t.role, "content": t.content})
	}
	body, _ := json.Marshal(map[string]any{
		"messages": msgs, "n": req.N, "max_tokens": maxTokens, "stop": []string{"\n"},
		"temperature": req.Temperature, "top_k": topK, "top_p": topP, "min_p": minP,
		"seed": req.Seed, "cache_prompt": false,
	})
	resp, err := http.Post(s.url+"/v1/chat/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		return peerAnswer{}, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return peerAnswer{}, err
	}
	var out struct {
		Choices []struct{} `json:"choices"`
		Usage   struct {
			PromptTokens     int `json:"prompt_tokens"`
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
		Timings struct {
			PromptMS    float64 `json:"prompt_ms"`
			PredictedMS float64 `json:"predicted_ms"`
		} `json:"timings"`
	}
	if err := json.Unmarshal(raw, &out); err != nil || resp.StatusCode != http.StatusOK || len(out.Choices) != req.N {
		return peerAnswer{}, fmt.Errorf("llama-server: status %d, %d choices: %.500s", resp.StatusCode, len(out.Choices), raw)
	}
	ms := func(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
	return peerAnswer{prompt: ms(out.Timings.PromptMS), gen: ms(out.Timings.PredictedMS),
		promptTokens: out.Usage.PromptTokens, genTokens: out.Usage.CompletionTokens}, nil
}

// replydServer is a `replyd serve` process asked over its HTTP API.
type replydServer struct {
	*replydproc.Proc
	dir, key string
}

func startReplyd(bin, model string, threads, replyTokens int) (*replydServer, error) {
	return startReplydContext(bin, model, threads, replyTokens, 2048)
}

// startReplydContext is startReplyd with REPLYD_LLM_CONTEXT ctxTokens.
func startReplydContext(bin, model string, threads, replyTokens, ctxTokens int) (*replydServer, error) {
	dir, err := os.MkdirTemp("", "replyd-peer-bench")
	if err != nil {
		return nil, err
	}
	// Speech-to-text is not asked here: the smallest Whisper shape.
	out, err := exec.Command(bin, "models", "synth", "--shape", "tiny.en", "--dir", dir).Output()
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("replyd models synth: %w", err)
	}
	p, err := replydproc.Start(replydproc.Options{Bin: bin, DataDir: dir + "/data", Env: map[string]string{
		"REPLYD_LLM_MODEL": model, "REPLYD_WHISPER_MODEL": strings.TrimSpace(string(out)),
		"REPLYD_THREADS": fmt.Sprint(threads), "REPLYD_CPU_CORES": fmt.Sprint(threads),
		"REPLYD_MAX_REPLY_TOKENS": fmt.Sprint(replyTokens), "REPLYD_LLM_CONTEXT": fmt.Sprint(ctxTokens),
		"REPLYD_INFER_TIMEOUT": "10m", "REPLYD_LOG_LEVEL": "warn",
		// The whole prompt, as llama-server evaluates it: no history cut to
		// the cold-prompt target (the prompt tokens compared are counted in
		// this process from the full dialog).
		"REPLYD_COLD_PROMPT_TARGET": "0"}})
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	s := &replydServer{Proc: p, dir: dir}
	ctx := context.Background()
	if err := p.WaitReady(ctx, 5*time.Minute); err != nil {
		s.stop()
		return nil, err
	}
	if s.key, err = p.CreateAPIKey(ctx, "peer-bench", 1000); err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

// setPrompt makes text the server's system prompt.
func (s *replydServer) setPrompt(text string) error {
	resp, err := s.Do(context.Background(), replydproc.Request{Method: http.MethodPost, Path: "/v1/admin/system-prompt",
		Header: s.AdminHeader(), JSON: map[string]any{"prompt": text}})
	if err == nil && resp.Status != http.StatusOK && resp.Status != http.StatusCreated {
		err = fmt.Errorf("status %d: %s", resp.Status, resp.Body)
	}
	return err
}

func (s *replydServer) stop() {
	_ = s.Stop(time.Minute)
	os.RemoveAll(s.dir)
}

// infer asks /v1/infer what req asks (its turns and profile; the system
// prompt is the server's) and returns the server's stage times.
func (s *replydServer) infer(req engine.GenerateRequest) (engine.Generation, error) {
	var msgs []map[string]string
	for _, m := range req.Messages {
		msgs = append(msgs, map[string]string{"role": string(m.Role), "content": m.Content})
	}
	payload, _ := json.Marshal(map[string]any{
		"messages": msgs, "language": req.Profile.Language,
		"disabled_person_biography": req.Profile.Biography, "persona": req.Profile.Persona,
		"options": map[string]any{"max_candidates": req.N, "temperature": req.Temperature},
	})
	ctype, body := replydproc.InferForm(payload, nil)
	resp, err := s.Do(context.Background(), replydproc.Request{Method: http.MethodPost, Path: "/v1/infer",
		Header: map[string]string{"X-API-KEY": s.key}, Body: body, ContentType: ctype})
	if err != nil {
		return engine.Generation{}, err
	}
	var out struct {
		Candidates []struct {
			Length int `json:"length"`
		} `json:"candidates"`
		Timings struct {
			Prompt, Generation int64
		} `json:"timings_ms"`
		HistoryUsed int `json:"history_turns_used"`
		HistorySent int `json:"history_turns_sent"`
	}
	if err := json.Unmarshal(resp.Body, &out); err != nil || resp.Status != http.StatusOK || len(out.Candidates) != req.N {
		return engine.Generation{}, fmt.Errorf("replyd: status %d, %d candidates: %s", resp.Status, len(out.Candidates), resp.Body)
	}
	if out.HistoryUsed != out.HistorySent {
		return engine.Generation{}, fmt.Errorf("replyd used %d of the %d turns of history sent: the prompts would differ", out.HistoryUsed, out.HistorySent)
	}
	g := engine.Generation{Prompt: time.Duration(out.Timings.Prompt) * time.Millisecond,
		Generation: time.Duration(out.Timings.Generation) * time.Millisecond}
	for _, c := range out.Candidates {
		g.GenTokens += c.Length
	}
	return g, nil
}
