// Package eval is `replyd eval`: it replays conversations offline through
// the language model and scores the candidates against what the AAC user
// really said (engine/score's rules, as the models package's comparison
// scores its replays). cmd/replyd parses the subcommand's flags, opens the
// model and hands it here.
package eval

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/mattn/go-isatty"

	"github.com/replyd/replyd/api"
	"github.com/replyd/replyd/engine"
	"github.com/replyd/replyd/engine/score"
)

// builtinDialogs are a few dozen everyday exchanges written for replyd's
// tests, so that `replyd eval` runs out of the box.
//
//go:embed dialogs.jsonl
var builtinDialogs []byte

// Dialog is one line of a dialogs file.
type Dialog struct {
	line  int
	req   engine.Request
	reply string
}

// Prompt is one system prompt under test and its figures.
type Prompt struct {
	Name   string
	text   string
	Result Figures
}

// Text is the prompt's text.
func (p Prompt) Text() string { return p.text }

// Figures are the figures of one prompt over the dialogs.
type Figures struct {
	Prompt          string  `json:"prompt"`
	Dialogs         int     `json:"dialogs"`
	Top1Exact       float64 `json:"top1_exact"`
	TopNExact       float64 `json:"topn_exact"`
	MeanBestTokenF1 float64 `json:"mean_best_token_f1"`
	KeystrokesSaved int     `json:"keystrokes_saved"`
	KeystrokesTyped int     `json:"keystrokes_typed"`
	KeystrokeSaving float64 `json:"keystroke_saving"`
}

// Dialogs reads the dialogs file (JSON Lines; "" means the built-in set):
// the dialogs with a reply, the name to report them by, and how many
// outcome lines without text were skipped.
func Dialogs(file string) (ds []Dialog, name string, skipped int, err error) {
	src, name := builtinDialogs, "built-in dialogs"
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, "", 0, fmt.Errorf("eval: %w", err)
		}
		src, name = b, file
	}
	ds, skipped, err = parseDialogs(src, name)
	if err != nil {
		return nil, name, skipped, err
	}
	if len(ds) == 0 {
		return nil, name, skipped, fmt.Errorf("eval: %s holds no dialog with a reply", name)
	}
	return ds, name, skipped, nil
}

// Settings are a run's: the candidates per dialog, the sampling
// temperature and base seed (dialog i uses Seed+i: runs are repeatable).
type Settings struct {
	N           int
	Temperature float64
	Seed        uint32
}

// Score replays every dialog through pipe once per prompt and scores
// each prompt into its Result; a progress bar is drawn on stderr when it
// is a terminal. name is the dialogs' (for errors).
func Score(ctx context.Context, pipe *engine.Pipeline, ds []Dialog, prompts []Prompt, set Settings, name string, stderr io.Writer) error {
	bar := newProgress(stderr, len(ds)*len(prompts))
	defer bar.done()
	for i := range prompts {
		p := &prompts[i]
		var sum score.Ranking
		for k, d := range ds {
			req := d.req
			req.SystemPrompt, req.MaxCandidates, req.Temperature, req.Seed = p.text, set.N, set.Temperature, set.Seed+uint32(k)
			res, err := pipe.Infer(ctx, req)
			if err != nil {
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
	return nil
}

// result is a prompt's figures from its dialogs' summed ranking.
func result(prompt string, sum score.Ranking, dialogs int) Figures {
	r := Figures{Prompt: prompt, Dialogs: dialogs, KeystrokesSaved: sum.Saved, KeystrokesTyped: sum.Typed}
	r.Top1Exact, r.TopNExact, r.MeanBestTokenF1, r.KeystrokeSaving = sum.Rates(dialogs)
	return r
}

// parseDialogs reads JSON Lines of dialogs. Blank lines are skipped, and so
// are lines of the outcome export that carry no text (users without
// remember: true); their number is returned. Any other line must be an
// InferPayload with a reply; the error names the line and the field.
func parseDialogs(src []byte, name string) ([]Dialog, int, error) {
	var out []Dialog
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
		out = append(out, Dialog{line: line, req: req, reply: reply})
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

// Prompts collects the prompts to score: files, versions read from a
// running replyd at server (with client, which trusts its certificate), or
// the built-in default prompt.
func Prompts(ctx context.Context, files, versions []string, server, adminKey string, client *http.Client) ([]Prompt, error) {
	var out []Prompt
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("eval: --prompt-file: %w", err)
		}
		if strings.TrimSpace(string(b)) == "" {
			return nil, fmt.Errorf("eval: --prompt-file %s is empty", f)
		}
		out = append(out, Prompt{Name: "file " + filepath.Base(f), text: string(b)})
	}
	if len(versions) > 0 {
		if server == "" {
			return nil, errors.New("eval: --prompt-version needs --server URL (and the admin key, REPLYD_ADMIN_KEY)")
		}
		history, err := fetchPromptHistory(ctx, server, adminKey, client)
		if err != nil {
			return nil, err
		}
		for _, v := range versions {
			text, ok := history[v]
			if !ok {
				return nil, fmt.Errorf("eval: %s has no system-prompt version %q", server, v)
			}
			out = append(out, Prompt{Name: "version " + v, text: text})
		}
	}
	if len(out) == 0 {
		out = append(out, Prompt{Name: "built-in", text: api.DefaultSystemPrompt})
	}
	return out, nil
}

// fetchPromptHistory reads every saved version from a running replyd's
// admin API: version -> text.
func fetchPromptHistory(ctx context.Context, server, adminKey string, client *http.Client) (map[string]string, error) {
	if adminKey == "" {
		return nil, errors.New("eval: --server needs the admin key (--admin-key or REPLYD_ADMIN_KEY)")
	}
	u, err := url.Parse(strings.TrimRight(server, "/") + "/v1/admin/system-prompt/history?limit=1000")
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("eval: --server %q is not an http(s) URL", server)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("X-ADMIN-KEY", adminKey)
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

// Print writes the prompts' figures as a table (or JSON): n candidates
// each, the model (demo: random weights), the dialogs' name and the lines
// skipped.
func Print(w io.Writer, prompts []Prompt, n int, model string, demo bool, dialogs string, skipped int, asJSON bool) error {
	if asJSON {
		out := struct {
			Dialogs    string    `json:"dialogs"`
			Candidates int       `json:"candidates"`
			Model      string    `json:"model"`
			Demo       bool      `json:"demo_model"`
			Skipped    int       `json:"skipped_lines"`
			Prompts    []Figures `json:"prompts"`
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
