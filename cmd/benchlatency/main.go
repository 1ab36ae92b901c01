// Command benchlatency measures the clinic scenario end to end through the
// HTTP API: a partner's 5-second utterance answered with 3 candidates, in a
// dialog that goes on (the same dialog_id; each turn adds the user's reply
// and the partner's next recording), on models with real shapes written by
// `replyd models synth` (Whisper base.en with Qwen2.5-0.5B and with
// Qwen2.5-1.5B, q8_0, random weights).
//
//	go run ./cmd/benchlatency -bin bin/replyd-native -models ~/.cache/replyd/synth
//
// For each language model it starts two replyd processes, one with the
// engines' overlap (REPLYD_OVERLAP=on) and one without, and alternates their
// turns, so load from other processes hits both alike. Each turn is sent with
// Accept: text/event-stream, which gives the time until the transcript
// arrives as well as the whole answer. It prints the median of each stage
// over the going-on turns (every turn after the first) and the ratio of the
// two servers' medians; with -text the partner's turns are typed (the clip's
// real words) instead of recorded.
//
// Going-on generation is also given as a ratio to what its decodes cost
// bare: after the turns, `replyd models steps` times one decode step of 1
// to -candidates sequences after each turn's prompt length (the median of
// -step-rounds), and each turn's generation time is divided by the sum, over
// the decodes it ran (the server's "generated" debug line counts them by
// their number of sequences), of those step times. A ratio of 1 means that
// generating costs nothing beyond the decodes themselves. The step times of
// 1, 3 and 4 sequences are printed too, and each turn's first and last
// candidate event ("first reply at", "last reply at": each reply is
// streamed as it is complete).
//
// With -live (the default; not with -text) it then times the turn from the end of the
// partner's speech, on the server with today's defaults: an upload dialog,
// with the conversation page's quiet wait before its upload added, and a
// live dialog, whose clip is streamed over /v1/live in real time followed by
// silence, their turns alternating (live.go).
//
// With -long N it runs the long-conversation benchmark instead: one server,
// one dialog of N typed turns of realistic length (two to four everyday
// sentences a partner turn, the first candidate taken as the reply), and
// prints every turn and the ratio of turn N to turn 2.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

type config struct {
	bin        string
	models     string
	llms       []string
	whisper    string
	turns      int
	candidates int
	audio      string
	seconds    float64
	text       bool
	env        []string
	logs       string
	long       int
	stepRounds int
	// live adds the turn from the end of speech: the upload path with the
	// page's quiet wait and the live path (live.go).
	live bool
	// baseBin, when set, replaces the overlap comparison: the two servers
	// are baseBin ("before") and bin ("after"), both with their defaults.
	baseBin string
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("benchlatency", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.bin, "bin", "bin/replyd-native", "replyd binary")
	home, _ := os.UserHomeDir()
	fs.StringVar(&c.models, "models", filepath.Join(home, ".cache", "replyd", "synth"), "directory of the synthesised models (written there by `replyd models synth` when missing)")
	llms := fs.String("llm", "qwen2.5-0.5b,qwen2.5-1.5b", "language-model shapes, comma-separated")
	fs.StringVar(&c.whisper, "whisper", "base.en", "Whisper shape")
	fs.IntVar(&c.turns, "turns", 5, "going-on turns measured per server (after the dialog's first turn)")
	fs.IntVar(&c.candidates, "candidates", 3, "options.max_candidates")
	fs.StringVar(&c.audio, "audio", "", "WAV recording of the partner (default: the first seconds of jfk.wav from the shared Whisper test data, else a synthetic voiced sound)")
	fs.Float64Var(&c.seconds, "seconds", 5, "length of the partner's utterance")
	fs.BoolVar(&c.text, "text", false, "type the partner's turns (the clip's words) instead of sending the recording")
	env := fs.String("env", "", "extra REPLYD_NAME=value settings for both servers, comma-separated")
	fs.StringVar(&c.logs, "logs", "", "directory to write each server's log to (with -env REPLYD_LOG_LEVEL=debug, Whisper's mel, encoder and decoder times)")
	fs.IntVar(&c.long, "long", 0, "run the long-conversation benchmark: one dialog of this many typed turns (e.g. 50)")
	fs.StringVar(&c.baseBin, "base-bin", "", "compare this replyd binary (\"before\", e.g. built from an older commit) with -bin (\"after\") instead of the overlap on and off, turns alternating in one run")
	fs.BoolVar(&c.live, "live", true, "also time the turn from the end of the partner's speech: the upload path with the conversation page's quiet wait added, and the live path (/v1/live, the clip streamed in real time); not with -text; -live=false skips it")
	fs.IntVar(&c.stepRounds, "step-rounds", 7, "reference decode steps timed per size and prompt length (the median is used)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	c.llms = strings.Split(*llms, ",")
	if *env != "" {
		c.env = strings.Split(*env, ",")
	}
	if c.turns < 1 || c.candidates < 1 || c.seconds <= 0 || c.stepRounds < 1 {
		return c, fmt.Errorf("-turns, -candidates, -seconds and -step-rounds must be positive")
	}
	if c.long != 0 && c.long < 3 {
		return c, fmt.Errorf("-long must be at least 3 turns")
	}
	return c, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		fmt.Fprintln(stderr, "benchlatency:", err)
		return 2
	}
	if err := bench(ctx, cfg, stdout, stderr); err != nil {
		fmt.Fprintln(stderr, "benchlatency:", err)
		return 1
	}
	return 0
}

// bench runs the scenario for every language model shape.
func bench(ctx context.Context, cfg config, stdout, stderr io.Writer) error {
	whisperPath, err := ensureModel(ctx, cfg.bin, cfg.models, cfg.whisper)
	if err != nil {
		return err
	}
	clip, err := partnerClip(cfg.audio, cfg.seconds)
	if err != nil {
		return err
	}
	if cfg.long > 0 {
		fmt.Fprintf(stdout, "long conversation: %d typed turns, %d candidates; host %s\n", cfg.long, cfg.candidates, hostLoad())
		for _, shape := range cfg.llms {
			llmPath, err := ensureModel(ctx, cfg.bin, cfg.models, shape)
			if err != nil {
				return err
			}
			if err := benchLong(ctx, cfg, shape, whisperPath, llmPath, stdout, stderr); err != nil {
				return fmt.Errorf("%s: %w", shape, err)
			}
		}
		return nil
	}
	fmt.Fprintf(stdout, "clinic scenario: %s, %.1f s partner utterance (%s), %d candidates, %d going-on turns; host %s\n",
		cfg.whisper, cfg.seconds, clip.source, cfg.candidates, cfg.turns, hostLoad())
	for _, shape := range cfg.llms {
		llmPath, err := ensureModel(ctx, cfg.bin, cfg.models, shape)
		if err != nil {
			return err
		}
		if err := benchShape(ctx, cfg, shape, whisperPath, llmPath, clip, stdout, stderr); err != nil {
			return fmt.Errorf("%s: %w", shape, err)
		}
	}
	return nil
}

// benchShape runs the dialog on two servers, with and without the overlap,
// alternating their turns, and prints the medians.
func benchShape(ctx context.Context, cfg config, shape, whisperPath, llmPath string, clip clip, stdout, stderr io.Writer) error {
	variants := []struct {
		name    string
		bin     string
		overlap string
	}{{"overlap", cfg.bin, "on"}, {"no overlap", cfg.bin, "off"}}
	if cfg.baseBin != "" {
		variants[0].name, variants[0].bin = "before", cfg.baseBin
		variants[1].name, variants[1].overlap = "after", "on"
	}
	servers := make([]*server, len(variants))
	for i, v := range variants {
		env := append([]string{
			"REPLYD_LLM_MODEL=" + llmPath,
			"REPLYD_WHISPER_MODEL=" + whisperPath,
			"REPLYD_OVERLAP=" + v.overlap,
			// The "generated" lines count each request's decodes.
			"REPLYD_LOG_LEVEL=debug",
			"REPLYD_LOG_FORMAT=json",
			// A slow box is measured, not answered with 503 timeout.
			"REPLYD_INFER_TIMEOUT=10m",
		}, cfg.env...)
		t0 := time.Now()
		logPath := ""
		if cfg.logs != "" {
			logPath = filepath.Join(cfg.logs, strings.ReplaceAll(shape+"-"+v.name, " ", "-")+".log")
		}
		s, err := startServer(ctx, v.bin, env, logPath)
		if err != nil {
			for _, s := range servers[:i] {
				_ = s.stop()
			}
			return err
		}
		defer s.stop()
		servers[i] = s
		fmt.Fprintf(stderr, "%s, %s: replyd ready in %.1f s\n", shape, v.name, time.Since(t0).Seconds())
	}
	dialogs := make([]*dialog, len(servers))
	for i, s := range servers {
		key, err := s.CreateAPIKey(ctx, "benchlatency", 1000)
		if err != nil {
			return err
		}
		dialogs[i] = newDialog(s, key, fmt.Sprintf("bench-%s-%d", shape, i), cfg.candidates, clip, cfg.text)
	}
	// The first turn of each dialog, then the going-on turns, alternating
	// the servers turn by turn.
	// After each round of going-on turns, `replyd models steps` times the
	// reference steps at those turns' prompt lengths, so a turn and its
	// reference are timed minutes apart at most: this host's speed drifts
	// (other guests of the same machine) by more than the ratio's target.
	first := make([]turnTimes, len(dialogs))
	goingOn := make([][]turnTimes, len(dialogs))
	var refs []stepTable // refs[turn-1]: the reference steps of that round
	for turn := 0; turn <= cfg.turns; turn++ {
		var contexts []int
		for i, d := range dialogs {
			tt, err := d.turn(ctx)
			if err != nil {
				return fmt.Errorf("%s, turn %d: %w", variants[i].name, turn, err)
			}
			if turn == 0 {
				first[i] = tt
			} else {
				goingOn[i] = append(goingOn[i], tt)
				contexts = append(contexts, tt.gen.PromptTokens)
			}
		}
		if turn > 0 {
			steps, err := measureSteps(ctx, cfg.bin, llmPath, cfg.candidates, contexts, cfg.stepRounds)
			if err != nil {
				return err
			}
			refs = append(refs, steps)
		}
	}
	rows := make([]turnTimes, len(dialogs))
	for i := range dialogs {
		rows[i] = medianTimes(goingOn[i])
	}
	fmt.Fprintf(stdout, "\n%s (%s), going-on turns: medians of %d, ms (first turn in brackets)\n", shape, filepath.Base(llmPath), cfg.turns)
	printTable(stdout, variants[0].name, variants[1].name, rows, first)
	if !cfg.text {
		// The clock above starts at the upload; the AAC user's starts when
		// the partner stopped speaking, and the page uploads only after
		// its quiet wait.
		if q, err := quietWait(); err == nil {
			qms := float64(q.Milliseconds())
			fmt.Fprintf(stdout, "from the end of speech, upload path (the page's %.0f ms quiet wait + the turn): transcript %.0f / %.0f ms, candidates %.0f / %.0f ms (%s / %s); the live path: make bench-live, or -live\n",
				qms, qms+rows[0].ToTranscript, qms+rows[1].ToTranscript, qms+rows[0].Wall, qms+rows[1].Wall, variants[0].name, variants[1].name)
		}
	}
	for i, s := range servers {
		if rss, err := s.peakRSS(); err == nil {
			fmt.Fprintf(stdout, "peak RSS %s: %d MiB\n", variants[i].name, rss>>20)
		}
	}
	if cfg.live && !cfg.text {
		// On the server with today's defaults (the overlap on, or -bin).
		i := 0
		if cfg.baseBin != "" {
			i = 1
		}
		if err := benchEOS(ctx, cfg, servers[i], variants[i].name, shape, clip, stdout); err != nil {
			return err
		}
	}
	for _, s := range servers {
		_ = s.stop()
	}
	printStepTimes(stdout, refs, cfg.candidates)
	fmt.Fprintf(stdout, "going-on generation / its decodes at reference step times (replyd models steps after each round of turns, median of %d; host %s):\n", cfg.stepRounds, hostLoad())
	for i, ts := range goingOn {
		var ratios, gens, refMS []float64
		rounds := 0
		for turn, t := range ts {
			ref := refs[turn].reference(t.gen)
			if ref <= 0 {
				continue
			}
			ratios = append(ratios, t.Generation/ref)
			gens = append(gens, t.Generation)
			refMS = append(refMS, ref)
			rounds += t.gen.rounds()
		}
		if len(ratios) == 0 {
			continue
		}
		each := make([]string, len(ratios))
		for j, r := range ratios {
			each[j] = fmt.Sprintf("%.2f", r)
		}
		fmt.Fprintf(stdout, "  %-10s ratio %.2f (median of %d turns: %s; generation %.0f ms against %.0f ms of reference steps, %.1f decodes a turn)\n",
			variants[i].name, median(ratios), len(ratios), strings.Join(each, " "), median(gens), median(refMS), float64(rounds)/float64(len(ratios)))
	}
	return nil
}

// printStepTimes prints the decode step of 1, 3 and 4 sequences (those of
// them up to candidates) measured during the run: `replyd models steps`
// after each round of turns, at those turns' prompt lengths, the median over
// the rounds and lengths, to compare with the start-up figures of
// "decoding chosen" (a quiet box) and to read the order of the decoding by
// (a first candidate alone then the others, against one batch).
func printStepTimes(w io.Writer, refs []stepTable, candidates int) {
	var parts []string
	for _, k := range []int{1, 3, 4} {
		if k > candidates {
			continue
		}
		var ms []float64
		for _, t := range refs {
			for _, row := range t.StepUS {
				if k < len(row) && row[k] > 0 {
					ms = append(ms, float64(row[k])/1000)
				}
			}
		}
		if len(ms) > 0 {
			parts = append(parts, fmt.Sprintf("%d: %.1f ms", k, median(ms)))
		}
	}
	if len(parts) > 0 {
		fmt.Fprintf(w, "decode step by sequences during the run (median over the rounds' prompt lengths): %s\n", strings.Join(parts, ", "))
	}
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}
