package eval

// replyd eval --steer: simulate an AAC user who steers the model towards the
// reply they really said (issue 22), and score the steered candidates.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/replyd/replyd/engine"
	"github.com/replyd/replyd/engine/score"
	"github.com/replyd/replyd/engine/steer"
)

// SteerScore are the figures of one steering mode, with or without the
// dialog's context.
type SteerScore struct {
	Steer     string  `json:"steer"`
	Context   bool    `json:"context"`
	Dialogs   int     `json:"dialogs"`
	Skipped   int     `json:"skipped"`
	Top1Exact float64 `json:"top1_exact"`
	TopNExact float64 `json:"topn_exact"`
	Exhausted float64 `json:"exhausted"`
	Chars     int     `json:"chars"`
	Actions   int     `json:"actions"`
	KSR       float64 `json:"ksr"`
}

// Steer replays each dialog twice, with its context and with none (one
// empty partner turn), steered as sim types the true reply. The simulated
// user picks the reply when it is among the candidates (its keys and one
// selection), else types it whole after the keys spent: KSR = (characters
// - actions) / characters over all dialogs.
func Steer(ctx context.Context, pipe *engine.Pipeline, ds []Dialog, sim steer.Sim, prompt string, set Settings, stderr io.Writer) ([]SteerScore, error) {
	n, temperature, seed := set.N, set.Temperature, set.Seed
	bar := newProgress(stderr, 2*len(ds))
	defer bar.done()
	var out []SteerScore
	for _, withContext := range []bool{true, false} {
		sc := SteerScore{Steer: sim.Name, Context: withContext}
		var top1, topN, exhausted int
		for k, d := range ds {
			bar.step(fmt.Sprintf("%s, context %v", sim.Name, withContext))
			s, keys, ok := sim.Make(d.reply)
			if !ok {
				sc.Skipped++
				continue
			}
			req := d.req
			if !withContext {
				req.Messages = []engine.Message{{Role: engine.RoleSpeaker}}
			}
			req.SystemPrompt, req.MaxCandidates, req.Temperature, req.Seed = prompt, n, temperature, seed+uint32(k)
			req.Steer = &s
			res, err := pipe.Infer(ctx, req)
			if err != nil {
				return nil, fmt.Errorf("eval: line %d: %w", d.line, err)
			}
			chars := score.Chars(steer.Clean(d.reply))
			want := score.Normalize(d.reply)
			actions := keys + chars // typed whole after all
			for i, c := range res.Candidates {
				if score.Normalize(c.Text) == want {
					if i == 0 {
						top1++
					}
					topN++
					actions = keys + 1
					break
				}
			}
			if res.SteerExhausted {
				exhausted++
			}
			sc.Dialogs++
			sc.Chars += chars
			sc.Actions += actions
		}
		if sc.Dialogs > 0 {
			sc.Top1Exact = float64(top1) / float64(sc.Dialogs)
			sc.TopNExact = float64(topN) / float64(sc.Dialogs)
			sc.Exhausted = float64(exhausted) / float64(sc.Dialogs)
		}
		if sc.Chars > 0 {
			sc.KSR = float64(sc.Chars-sc.Actions) / float64(sc.Chars)
		}
		out = append(out, sc)
	}
	return out, nil
}

// PrintSteer writes a steered run's figures as a table (or JSON): n
// candidates shown of n*seqs decoded, the model (demo: random weights) and
// the dialogs' name.
func PrintSteer(w io.Writer, scores []SteerScore, n, seqs int, model string, demo bool, dialogs string, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			Dialogs    string       `json:"dialogs"`
			Candidates int          `json:"candidates"`
			SeqFactor  int          `json:"steer_seqs"`
			Model      string       `json:"model"`
			Demo       bool         `json:"demo_model"`
			Results    []SteerScore `json:"results"`
		}{dialogs, n, seqs, model, demo, scores})
	}
	fmt.Fprintf(w, "replyd eval --steer %s: dialogs from %s, %d candidates each (%d sequences decoded), model %s\n", scores[0].Steer, dialogs, n, n*seqs, model)
	if demo {
		fmt.Fprintln(w, "(a demo model with random weights: it scores near zero; use a real model for real figures)")
	}
	fmt.Fprintf(w, "\n%-10s  %-8s  %7s  %7s  %7s  %9s  %s\n", "steer", "context", "dialogs", "top-1", fmt.Sprintf("top-%d", n), "exhausted", "simulated KSR")
	for _, s := range scores {
		ctx := "none"
		if s.Context {
			ctx = "dialog"
		}
		fmt.Fprintf(w, "%-10s  %-8s  %7d  %6.1f%%  %6.1f%%  %8.1f%%  %.3f (%d actions for %d characters)\n", s.Steer, ctx, s.Dialogs,
			100*s.Top1Exact, 100*s.TopNExact, 100*s.Exhausted, s.KSR, s.Actions, s.Chars)
	}
	return nil
}
