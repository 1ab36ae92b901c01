package main

// replyd eval: its flags; the replay and the scoring are package eval's.

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/replyd/replyd/api"
	"github.com/replyd/replyd/engine"
	"github.com/replyd/replyd/engine/llm"
	"github.com/replyd/replyd/engine/steer"
	"github.com/replyd/replyd/eval"
)

// multiFlag collects a repeated string flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

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

	ds, name, skipped, err := eval.Dialogs(*dialogs)
	if err != nil {
		return err
	}

	// The prompt history is read over the CLI's transport, which trusts
	// --tls-ca (a running replyd's own certificate).
	tcfg := &Config{TLS: "off"}
	if *caFile != "" {
		tcfg.TLS, tcfg.TLSCert = "on", *caFile
	}
	client := &http.Client{Timeout: 30 * time.Second, Transport: localTransport(tcfg)}
	prompts, err := eval.Prompts(ctx, promptFiles, promptVersions, *server, *adminKey, client)
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

	set := eval.Settings{N: *n, Temperature: *temperature, Seed: uint32(*seed)}
	if sim.Make != nil {
		scores, err := eval.Steer(ctx, pipe, ds, sim, prompts[0].Text(), set, stderr)
		if err != nil {
			return err
		}
		return eval.PrintSteer(stdout, scores, *n, *steerSeqs, *model, isDemoModel(*model), name, *asJSON)
	}
	if err := eval.Score(ctx, pipe, ds, prompts, set, name, stderr); err != nil {
		return err
	}
	return eval.Print(stdout, prompts, *n, *model, isDemoModel(*model), name, skipped, *asJSON)
}
