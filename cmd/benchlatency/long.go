package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"
)

// partnerSentences are everyday things a partner says to an AAC user at
// home or in a clinic; a long-conversation turn says two to four of them.
var partnerSentences = []string{
	"Good morning, did you manage to sleep a bit better last night?",
	"The physiotherapist rang to say she will be here around ten instead of nine.",
	"I made porridge with the last of the blueberries, do you want some now or later?",
	"Your sister sent a message asking whether Sunday afternoon still suits us for the visit.",
	"It looks like rain again, so maybe we skip the walk to the park today.",
	"The nurse wants to know if the new mattress has helped with the pressure on your hip.",
	"I found the old chess set in the loft, the one with the missing white bishop.",
	"Shall I put the radio on, there is a jazz programme until twelve.",
	"The pharmacy could only give us half of the prescription, the rest comes on Thursday.",
	"Alex is picking up the groceries on the way home, is there anything you want added to the list?",
	"Do you remember the name of the teacher who ran the maths club with you?",
	"The speech therapist suggested we practise with the new phrases for ten minutes after lunch.",
	"Your tea is getting cold, should I make a fresh pot?",
	"There was a piece in the paper about the school where you used to teach.",
	"I think the wheelchair tyre is a bit flat again, I will call the service tomorrow.",
	"We could watch the film your brother recommended, or finish the documentary about whales.",
	"The weather forecast says it will be sunny and warm by the weekend.",
	"Are you comfortable in that position, or shall I move the cushion behind your back?",
	"The neighbours asked if we would like to come over for coffee on Saturday.",
	"I booked the appointment with the neurologist for the fourteenth at half past two.",
	"Your phone has three new photos from your niece's birthday party.",
	"Would you like me to read you the rest of the chapter before we start dinner?",
	"The garden centre has the tomato plants you wanted, shall I get four or six?",
	"I am going to hang the washing out, I will be back in five minutes.",
	"Did the new tablet stand make it easier to reach the screen this morning?",
}

// longTurn is what the partner says in turn n (from 1) of the long
// conversation: two to four sentences, chosen the same way every run.
func longTurn(n int) string {
	k := 2 + n%3
	parts := make([]string, k)
	for i := range parts {
		parts[i] = partnerSentences[(n*7+i*11)%len(partnerSentences)]
	}
	return strings.Join(parts, " ")
}

// benchLong runs the long-conversation benchmark on one shape: one server,
// one dialog of cfg.long typed turns; it prints every turn and the ratio of
// the last turn to the second.
func benchLong(ctx context.Context, cfg config, shape, whisperPath, llmPath string, stdout, stderr io.Writer) error {
	env := append([]string{
		"REPLYD_LLM_MODEL=" + llmPath,
		"REPLYD_WHISPER_MODEL=" + whisperPath,
		"REPLYD_LOG_LEVEL=debug",
		"REPLYD_LOG_FORMAT=json",
		"REPLYD_INFER_TIMEOUT=10m",
	}, cfg.env...)
	logPath := ""
	if cfg.logs != "" {
		logPath = filepath.Join(cfg.logs, shape+"-long.log")
	}
	t0 := time.Now()
	s, err := startServer(ctx, cfg.bin, env, logPath)
	if err != nil {
		return err
	}
	defer s.stop()
	fmt.Fprintf(stderr, "%s: replyd ready in %.1f s\n", shape, time.Since(t0).Seconds())
	key, err := s.CreateAPIKey(ctx, "benchlatency", 1000)
	if err != nil {
		return err
	}
	d := newDialog(s, key, "bench-long-"+shape, cfg.candidates, clip{}, true)
	d.say = longTurn
	fmt.Fprintf(stdout, "\n%s (%s): %d typed turns in one dialog, ms\n", shape, filepath.Base(llmPath), cfg.long)
	fmt.Fprintf(stdout, "%5s %7s %7s %9s %9s %9s %9s %9s\n", "turn", "prompt", "cached", "prompt", "gen", "decodes", "total", "tok/s")
	turns := make([]turnTimes, 0, cfg.long)
	for n := 1; n <= cfg.long; n++ {
		tt, err := d.turn(ctx)
		if err != nil {
			return fmt.Errorf("turn %d: %w", n, err)
		}
		turns = append(turns, tt)
		g := tt.gen
		rate := 0.0
		if tt.Prompt > 0 {
			rate = float64(g.PromptTokens-g.CachedTokens) / tt.Prompt * 1000
		}
		fmt.Fprintf(stdout, "%5d %7d %7d %9.0f %9.0f %9d %9.0f %9.0f\n", n, g.PromptTokens, g.CachedTokens, tt.Prompt, tt.Generation, g.rounds(), tt.Server, rate)
	}
	if rss, err := s.peakRSS(); err == nil {
		fmt.Fprintf(stdout, "peak RSS: %d MiB\n", rss>>20)
	}
	_ = s.stop()
	second, last := turns[1], turns[len(turns)-1]
	contexts := make([]int, len(turns))
	for i, t := range turns {
		contexts[i] = t.gen.PromptTokens
	}
	steps, err := measureSteps(ctx, cfg.bin, llmPath, cfg.candidates, contexts, cfg.stepRounds)
	if err != nil {
		return err
	}
	// Each turn's generation against its own decodes at the reference
	// step times of its context, and the share of it inside llama.cpp's
	// decodes: what the loop around the decodes costs, and whether a
	// decode in the server costs what a bare one does.
	fmt.Fprintf(stdout, "%5s %7s %9s %9s %9s %9s\n", "turn", "prompt", "gen", "in decode", "reference", "gen/ref")
	for i, t := range turns {
		ref := steps.reference(t.gen)
		r := "-"
		if ref > 0 {
			r = fmt.Sprintf("%.2f", t.Generation/ref)
		}
		fmt.Fprintf(stdout, "%5d %7d %9.0f %9d %9.0f %9s\n", i+1, t.gen.PromptTokens, t.Generation, t.gen.GenDecodeMS, ref, r)
	}
	ratio := func(a, b float64) string {
		if b <= 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f", a/b)
	}
	tail := func(ts []turnTimes, get func(turnTimes) float64) float64 {
		v := make([]float64, len(ts))
		for i, t := range ts {
			v[i] = get(t)
		}
		return median(v)
	}
	total := func(t turnTimes) float64 { return t.Server }
	fmt.Fprintf(stdout, "turn %d / turn 2: total %s, prompt %s, generation %s; medians of the last 3 / turns 2-4: total %s; host %s\n",
		cfg.long, ratio(last.Server, second.Server), ratio(last.Prompt, second.Prompt), ratio(last.Generation, second.Generation),
		ratio(tail(turns[max(len(turns)-3, 1):], total), tail(turns[1:min(4, len(turns))], total)), hostLoad())
	fmt.Fprintf(stdout, "generation / its decodes at reference step times: turn 2 %s, turn %d %s (reference %.0f and %.0f ms)\n",
		ratio(second.Generation, steps.reference(second.gen)), cfg.long, ratio(last.Generation, steps.reference(last.gen)),
		steps.reference(second.gen), steps.reference(last.gen))
	return nil
}
