package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"

	"github.com/replyd/replyd/engine/llm"
)

// cmdModelsSteps is `replyd models steps`: the reference decode step times
// a going-on turn's generation is compared with (cmd/benchlatency). It
// prints one JSON object: {"context": [...], "step_us": [[...], ...]} where
// step_us[i][k] is the median step of k sequences after context[i] prompt
// tokens (index 0 unused).
func cmdModelsSteps(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("models steps", flag.ContinueOnError)
	fs.SetOutput(stderr)
	model := fs.String("model", "", "GGUF language model")
	seqs := fs.Int("seqs", 3, "time steps of 1 to this many sequences")
	contexts := fs.String("contexts", "500,1000,2000", "prompt lengths in tokens, comma-separated, growing")
	threads := fs.Int("threads", defaultThreads(), "threads of a decode")
	rounds := fs.Int("rounds", 7, "steps of each size timed at each length (the median is printed)")
	ctxPerSeq := fs.Int("context-per-seq", llm.DefaultContextPerSeq, "tokens of one dialog, as REPLYD_CONTEXT_PER_SEQ")
	gpuDefault := -1
	if v, err := strconv.Atoi(os.Getenv("REPLYD_GPU_LAYERS")); err == nil {
		gpuDefault = v
	}
	gpuLayers := fs.Int("gpu-layers", gpuDefault, "layers on a GPU backend (-1 = all when one is present), as REPLYD_GPU_LAYERS, whose value is the default")
	greedy := fs.Int("greedy", 0, "also continue the first context's prompt greedily for this many tokens (raw argmax, to compare backends)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: replyd models steps --model FILE [--seqs N] [--contexts N,N,...] [--threads N] [--rounds N] [--gpu-layers N] [--greedy N]")
		fmt.Fprintln(stderr, "\nTimes one decode step of 1..N sequences after prompts of the given lengths (for benchmarks).")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	var lens []int
	for _, f := range strings.Split(*contexts, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || (len(lens) > 0 && n < lens[len(lens)-1]) {
			return fmt.Errorf("models steps: --contexts must be growing positive numbers, not %q", *contexts)
		}
		lens = append(lens, n)
	}
	e, err := llm.Open(llm.Options{ModelPath: *model, Threads: *threads, MaxCandidates: max(*seqs, 1),
		ContextPerSeq: *ctxPerSeq, Decoding: llm.DecodeBatched, GPULayers: *gpuLayers, Logger: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		return fmt.Errorf("models steps: %w", err)
	}
	defer e.Close()
	times, err := e.StepTimes(ctx, *seqs, lens, *rounds)
	if err != nil {
		return fmt.Errorf("models steps: %w", err)
	}
	out := struct {
		Context []int     `json:"context"`
		StepUS  [][]int64 `json:"step_us"`
		// Greedy: the first context's prompt continued greedily (--greedy).
		Greedy []llm.GreedyToken `json:"greedy,omitempty"`
	}{Context: lens}
	if *greedy > 0 {
		if out.Greedy, err = e.Greedy(ctx, lens[0], *greedy); err != nil {
			return fmt.Errorf("models steps: %w", err)
		}
	}
	for _, row := range times {
		us := make([]int64, len(row))
		for k, d := range row {
			us[k] = d.Microseconds()
		}
		out.StepUS = append(out.StepUS, us)
	}
	return json.NewEncoder(stdout).Encode(out)
}
