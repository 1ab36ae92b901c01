package main

// replyd eval: replay conversations offline through the real pipeline and
// score the candidates against what the AAC user really said.

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/mattn/go-isatty"

	"github.com/replyd/replyd/api"
	"github.com/replyd/replyd/engine"
	"github.com/replyd/replyd/engine/llm"
	"github.com/replyd/replyd/engine/score"
	"github.com/replyd/replyd/engine/steer"
)

// builtinDialogs are a few dozen everyday exchanges written for replyd's
// tests, so that `replyd eval` runs out of the box.
//
//go:embed evaldata/dialogs.jsonl
var builtinDialogs []byte

// multiFlag collects a repeated string flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// dialog is one line of a dialogs file.
type dialog struct {
	line  int
	req   engine.Request
	reply string
}

// evalPrompt is one system prompt under test and its figures.
type evalPrompt struct {
	Name   string
	text   string
	Result evalScore
}

// evalScore are the figures of one prompt over the dialogs.
type evalScore struct {
	Prompt          string  `json:"prompt"`
	Dialogs         int     `json:"dialogs"`
	Top1Exact       float64 `json:"top1_exact"`
	TopNExact       float64 `json:"topn_exact"`
	MeanBestTokenF1 float64 `json:"mean_best_token_f1"`
	KeystrokesSaved int     `json:"keystrokes_saved"`
	KeystrokesTyped int     `json:"keystrokes_typed"`
	KeystrokeSaving float64 `json:"keystroke_saving"`
}

func cmdEval(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("eval", flag.ContinueOnError)
	fs.SetOutput(stderr)
	envOr := func(k, def string) string {
		if v := getenv(k); v != "" {
			return v
		}
		return def
	}
	dialogs := fs.String("dialogs", "", "JSON Lines of dialogs: {\"messages\": [...], \"reply\": \"what the user really said\"} (default: the built-in set)")
	var promptFiles, promptVersions multiFlag
	fs.Var(&promptFiles, "prompt-file", "a system prompt to score, from a file (repeat to compare several)")
	fs.Var(&promptVersions, "prompt-version", "a saved system-prompt version to score, read from --server (repeat to compare several)")
	server := fs.String("server", "", "URL of a running replyd to read --prompt-version from (admin API; eval never opens a data file)")
	adminKey := fs.String("admin-key", getenv("REPLYD_ADMIN_KEY"), "admin key for --server (env REPLYD_ADMIN_KEY)")
	caFile := fs.String("tls-ca", "", "PEM certificate to trust for an https --server (its self-signed certificate)")
	n := fs.Int("n", 4, "candidates per dialog (1 to 8)")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	model := fs.String("llm-model", envOr("REPLYD_LLM_MODEL", DefaultLLMModel), "GGUF language model (env REPLYD_LLM_MODEL; default: the demo model)")
	threads := fs.Int("threads", llm.DefaultThreads(), "language-model threads")
	contextTokens := fs.Int("context", 2048, "context tokens per sequence")
	seed := fs.Uint("seed", 1, "base sampling seed (dialog i uses seed+i): runs are repeatable")
	temperature := fs.Float64("temperature", api.DefaultLimits().DefaultTemperature, "sampling temperature")
	steerSeqs := fs.Int("steer-seqs", 1, "with --steer: sequences decoded per candidate shown (1 or 2; the best by log-probability are shown)")
	steerFlag := fs.String("steer", "", "simulate a user steering to the true reply: initials, words (initials, the longest word spelled), prefix:N (its first N characters) or replace (a near miss with one word wrong); scores top-1/top-n and the simulated keystroke saving rate with and without the dialog's context")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: replyd eval [--dialogs FILE.jsonl] [--prompt-file F]... [--prompt-version V --server URL]... [-n 4] [--steer MODE] [--json]\n\n"+
			"Replays each dialog through the language model (no data file is opened) and scores the candidates against\n"+
			"the reply: top-1 and top-n exact match (case and punctuation ignored), mean best token F1, and the keystrokes\n"+
			"the best candidate would have saved. Without a prompt option it scores the built-in default prompt.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("eval: unexpected argument %q", fs.Arg(0))
	}
	var sim steer.Sim
	if *steerFlag != "" {
		var err error
		if sim, err = steer.ParseSim(*steerFlag); err != nil {
			return fmt.Errorf("eval: --steer %w", err)
		}
	}
	max := api.DefaultLimits().MaxCandidates
	if *steerSeqs < 1 || *steerSeqs > 2 {
		return fmt.Errorf("eval: --steer-seqs must be 1 or 2")
	}
	if *n < 1 || *n > max {
		return fmt.Errorf("eval: -n must be between 1 and %d", max)
	}

	src, name := builtinDialogs, "built-in dialogs"
	if *dialogs != "" {
		b, err := os.ReadFile(*dialogs)
		if err != nil {
			return fmt.Errorf("eval: %w", err)
		}
		src, name = b, *dialogs
	}
	ds, skipped, err := parseDialogs(src, name)
	if err != nil {
		return err
	}
	if len(ds) == 0 {
		return fmt.Errorf("eval: %s holds no dialog with a reply", name)
	}

	prompts, err := evalPrompts(ctx, promptFiles, promptVersions, *server, *adminKey, *caFile)
	if err != nil {
		return err
	}

	if _, err := os.Stat(*model); err != nil && *model == DefaultLLMModel {
		if err := writeDemoModels(filepath.Dir(DefaultLLMModel)); err != nil {
			return err
		}
	}
	lm, err := llm.Open(llm.Options{
		ModelPath: *model, ContextPerSeq: *contextTokens, Threads: *threads,
		MaxCandidates: max, PrefixCacheMiB: 16, Demo: isDemoModel(*model), Logger: slog.New(slog.DiscardHandler),
		SteerSeqFactor: *steerSeqs,
	})
	if err != nil {
		return fmt.Errorf("eval: %w", err)
	}
	defer lm.Close()
	pipe := &engine.Pipeline{LLM: lm}

	if sim.Make != nil {
		bar := newProgress(stderr, 2*len(ds))
		scores, err := evalSteer(ctx, pipe, ds, sim, prompts[0].text, *n, *temperature, uint32(*seed), bar)
		bar.done()
		if err != nil {
			return err
		}
		return printSteerEval(stdout, scores, *n, *steerSeqs, *model, isDemoModel(*model), name, *asJSON)
	}
	bar := newProgress(stderr, len(ds)*len(prompts))
	for i := range prompts {
		p := &prompts[i]
		var sum score.Ranking
		for k, d := range ds {
			req := d.req
			req.SystemPrompt, req.MaxCandidates, req.Temperature, req.Seed = p.text, *n, *temperature, uint32(*seed)+uint32(k)
			res, err := pipe.Infer(ctx, req)
			if err != nil {
				bar.done()
				return fmt.Errorf("eval: %s line %d: %w", name, d.line, err)
			}
			cands := make([]string, len(res.Candidates))
			for j, c := range res.Candidates {
				cands[j] = c.Text
			}
			sum.Add(score.Rank(cands, d.reply))
			bar.step(p.Name)
		}
		p.Result = result(p.Name, sum, len(ds))
	}
	bar.done()
	return printEval(stdout, prompts, *n, *model, isDemoModel(*model), name, skipped, *asJSON)
}

// result is a prompt's figures from its dialogs' summed ranking.
func result(prompt string, sum score.Ranking, dialogs int) evalScore {
	r := evalScore{Prompt: prompt, Dialogs: dialogs, KeystrokesSaved: sum.Saved, KeystrokesTyped: sum.Typed}
	r.Top1Exact, r.TopNExact, r.MeanBestTokenF1, r.KeystrokeSaving = sum.Rates(dialogs)
	return r
}

// parseDialogs reads JSON Lines of dialogs. Blank lines are skipped, and so
// are lines of the outcome export that carry no text (users without
// remember: true); their number is returned. Any other line must be an
// InferPayload with a reply; the error names the line and the field.
func parseDialogs(src []byte, name string) ([]dialog, int, error) {
	var out []dialog
	skipped := 0
	sc := bufio.NewScanner(bytes.NewReader(src))
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for line := 1; sc.Scan(); line++ {
		raw := bytes.TrimSpace(sc.Bytes())
		if len(raw) == 0 {
			continue
		}
		fail := func(format string, args ...any) error {
			return fmt.Errorf("eval: %s line %d: %s", name, line, fmt.Sprintf(format, args...))
		}
		var head struct {
			Messages    json.RawMessage `json:"messages"`
			Reply       json.RawMessage `json:"reply"`
			InferenceID string          `json:"inference_id"`
		}
		if err := json.Unmarshal(raw, &head); err != nil {
			return nil, skipped, fail("not a JSON object (%s)", jsonProblem(err))
		}
		if head.Messages == nil && head.Reply == nil && head.InferenceID != "" {
			skipped++
			continue
		}
		req, err := api.ParseDialog(raw, api.DefaultLimits())
		if err != nil {
			var ae *api.Error
			if errors.As(err, &ae) {
				return nil, skipped, fail("%s", ae.Message)
			}
			return nil, skipped, fail("%v", err)
		}
		if head.Reply == nil {
			return nil, skipped, fail("reply is required: what the user really said next")
		}
		var reply string
		if err := json.Unmarshal(head.Reply, &reply); err != nil {
			return nil, skipped, fail("reply has the wrong type: expected a string")
		}
		if strings.TrimSpace(reply) == "" {
			return nil, skipped, fail("reply must not be empty")
		}
		out = append(out, dialog{line: line, req: req, reply: reply})
	}
	if err := sc.Err(); err != nil {
		return nil, skipped, fmt.Errorf("eval: %s: %w", name, err)
	}
	return out, skipped, nil
}

// jsonProblem describes a JSON syntax error without quoting the line.
func jsonProblem(err error) string {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("syntax error at byte %d", se.Offset)
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		if te.Field == "" {
			return "expected an object"
		}
		return te.Field + " has the wrong type"
	}
	return "unexpected end"
}

// evalPrompts collects the prompts to score: files, versions from a server,
// or the built-in default prompt.
func evalPrompts(ctx context.Context, files, versions []string, server, adminKey, caFile string) ([]evalPrompt, error) {
	var out []evalPrompt
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("eval: --prompt-file: %w", err)
		}
		if strings.TrimSpace(string(b)) == "" {
			return nil, fmt.Errorf("eval: --prompt-file %s is empty", f)
		}
		out = append(out, evalPrompt{Name: "file " + filepath.Base(f), text: string(b)})
	}
	if len(versions) > 0 {
		if server == "" {
			return nil, errors.New("eval: --prompt-version needs --server URL (and the admin key, REPLYD_ADMIN_KEY)")
		}
		history, err := fetchPromptHistory(ctx, server, adminKey, caFile)
		if err != nil {
			return nil, err
		}
		for _, v := range versions {
			text, ok := history[v]
			if !ok {
				return nil, fmt.Errorf("eval: %s has no system-prompt version %q", server, v)
			}
			out = append(out, evalPrompt{Name: "version " + v, text: text})
		}
	}
	if len(out) == 0 {
		out = append(out, evalPrompt{Name: "built-in", text: api.DefaultSystemPrompt})
	}
	return out, nil
}

// fetchPromptHistory reads every saved version from a running replyd's
// admin API: version -> text.
func fetchPromptHistory(ctx context.Context, server, adminKey, caFile string) (map[string]string, error) {
	if adminKey == "" {
		return nil, errors.New("eval: --server needs the admin key (--admin-key or REPLYD_ADMIN_KEY)")
	}
	u, err := url.Parse(strings.TrimRight(server, "/") + "/v1/admin/system-prompt/history?limit=1000")
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("eval: --server %q is not an http(s) URL", server)
	}
	cfg := &Config{TLS: "off"}
	if caFile != "" {
		cfg.TLS, cfg.TLSCert = "on", caFile
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("X-ADMIN-KEY", adminKey)
	client := &http.Client{Timeout: 30 * time.Second, Transport: localTransport(cfg)}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("eval: reading the prompt history from %s: %w", server, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("eval: %s answered %s: %s", server, resp.Status, bytes.TrimSpace(body))
	}
	var h struct {
		Items []struct {
			Prompt  string `json:"prompt"`
			Version string `json:"version"`
		} `json:"items"`
	}
	if err := json.Unmarshal(body, &h); err != nil {
		return nil, fmt.Errorf("eval: %s: the prompt history is not JSON: %w", server, err)
	}
	out := make(map[string]string, len(h.Items))
	for _, it := range h.Items {
		out[it.Version] = it.Prompt
	}
	return out, nil
}

// printEval writes the table (or JSON).
func printEval(w io.Writer, prompts []evalPrompt, n int, model string, demo bool, dialogs string, skipped int, asJSON bool) error {
	if asJSON {
		out := struct {
			Dialogs    string      `json:"dialogs"`
			Candidates int         `json:"candidates"`
			Model      string      `json:"model"`
			Demo       bool        `json:"demo_model"`
			Skipped    int         `json:"skipped_lines"`
			Prompts    []evalScore `json:"prompts"`
		}{Dialogs: dialogs, Candidates: n, Model: model, Demo: demo, Skipped: skipped}
		for _, p := range prompts {
			out.Prompts = append(out.Prompts, p.Result)
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	fmt.Fprintf(w, "replyd eval: %d dialogs from %s, %d candidates each, model %s\n", prompts[0].Result.Dialogs, dialogs, n, model)
	if skipped > 0 {
		fmt.Fprintf(w, "(%d outcome lines without text skipped: their users did not opt in with remember)\n", skipped)
	}
	if demo {
		fmt.Fprintln(w, "(a demo model with random weights: it scores near zero; use a real model for real figures)")
	}
	width := len("prompt")
	for _, p := range prompts {
		width = max(width, len(p.Name))
	}
	fmt.Fprintf(w, "\n%-*s  %7s  %7s  %9s  %s\n", width, "prompt", "top-1", fmt.Sprintf("top-%d", n), "token F1", "keystrokes saved")
	for _, p := range prompts {
		r := p.Result
		fmt.Fprintf(w, "%-*s  %6.1f%%  %6.1f%%  %9.3f  %d of %d (%.1f%%)\n", width, p.Name, 100*r.Top1Exact, 100*r.TopNExact,
			r.MeanBestTokenF1, r.KeystrokesSaved, r.KeystrokesTyped, 100*r.KeystrokeSaving)
	}
	return nil
}

// progress draws a bar on a terminal; elsewhere it writes nothing.
type progress struct {
	w      io.Writer
	on     bool
	n, max int
}

func newProgress(w io.Writer, max int) *progress {
	f, ok := w.(*os.File)
	return &progress{w: w, max: max, on: ok && (isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd()))}
}

func (p *progress) step(label string) {
	p.n++
	if !p.on {
		return
	}
	const width = 30
	fill := width * p.n / max(p.max, 1)
	fmt.Fprintf(p.w, "\r[%s%s] %d/%d %s\033[K", strings.Repeat("#", fill), strings.Repeat(".", width-fill), p.n, p.max, label)
}

func (p *progress) done() {
	if p.on && p.n > 0 {
		fmt.Fprint(p.w, "\r\033[K")
	}
}
