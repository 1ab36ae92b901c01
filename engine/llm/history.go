package llm

import (
	"math"
	"time"

	"github.com/replyd/replyd/engine"
)

// A time budget for the history. A dialog whose prompt is not cached (its
// first turn, after a restart, a failover or an eviction) costs its whole
// prompt; with a long history that is many seconds on a CPU. The prompt
// builder therefore fits the dialog's uncached tokens to what this box
// evaluates within Options.ColdPromptTarget, at the prompt speed measured
// once at start-up (so the same history always gives the same prompt,
// whatever the load). The system prompt, the profile and the partner's
// current turn always go in, remembered examples when they fit, then the
// most recent turns. History is cut only at block boundaries, about half the
// budget apart and counted from the dialog's first turn, so the turns that
// follow a cut find the same prefix cached instead of sliding the window
// (and evaluating everything again) every turn.

// promptRateTokens is the size of each of the two prompt chunks measured
// at start-up for the prompt speed.
const promptRateTokens = 256

// measurePromptRate evaluates a prompt of 2 x promptRateTokens tokens on
// every thread, timing its two halves, and returns the prompt speed of the
// first half in tokens a second and how much each token's cost grows with
// the cells before it (seconds per token per cell: attention over the
// context; 0 when the second half was not slower). Each half's time is the
// fastest of up to three rounds, so that a start-up beside a busy process
// does not fix a small budget for the process's life.
func (e *Engine) measurePromptRate() (rate, slope float64, err error) {
	req := engine.GenerateRequest{SystemPrompt: defaultSystemPrompt,
		Profile: engine.Profile{Biography: "Sam, 34, former teacher, lives at home with ALS."}}
	const n = promptRateTokens
	for i := 0; ; i++ {
		tokens, err := e.render(chatFor(systemMessage(req), dialogTurns(req.Messages)), true)
		if err != nil {
			return 0, 0, err
		}
		if len(tokens) < 2*n && i <= 400 {
			req.Messages = append(req.Messages, engine.Message{Role: engine.RoleSpeaker, Content: "Would you like some tea or coffee before the physio comes at ten, or shall we wait?"},
				engine.Message{Role: engine.RoleDisabledPerson, Content: "Tea please, with milk."})
			continue
		}
		tokens = tokens[:min(len(tokens), 2*n)]
		half := min(n, len(tokens)/2)
		// The fastest of up to three rounds (other processes only ever
		// add time), fewer when one round takes long.
		var best [2]time.Duration
		start := time.Now()
		for round := 0; round < 3 && (round == 0 || time.Since(start) < 4*time.Second); round++ {
			e.leaveCurrent()
			r := e.loadRun()
			var d [2]time.Duration
			for h, from := range []int{0, half} {
				t0 := time.Now()
				if _, err = e.evalPrompt(r, promptSeq, tokens[:from+half], from, false); err != nil {
					break
				}
				d[h] = time.Since(t0)
			}
			r.release()
			e.leaveCurrent()
			if err != nil {
				return 0, 0, err
			}
			for h := range best {
				if best[h] == 0 || d[h] < best[h] {
					best[h] = d[h]
				}
			}
		}
		per0 := max(best[0].Seconds(), 1e-6) / float64(half)
		per1 := best[1].Seconds() / float64(half)
		return 1 / per0, max(per1-per0, 0) / float64(half), nil
	}
}

// historyBudget is the most uncached prompt tokens a request may cost, 0
// for no bound.
func (e *Engine) historyBudget() int {
	if e.opts.ColdPromptTarget <= 0 || e.promptRate <= 0 {
		return 0
	}
	return budgetTokens(e.opts.ColdPromptTarget.Seconds(), e.promptRate, e.promptSlope)
}

// budgetTokens is the most tokens a prompt evaluates in target seconds
// when a token costs 1/rate seconds at the middle of the first chunk
// measured (cell promptRateTokens/2) and slope seconds more for every cell
// before it: the n with n*(a + slope*n/2) = target, a the cost at cell 0.
// With slope 0, target*rate.
func budgetTokens(target, rate, slope float64) int {
	if slope <= 0 {
		return max(int(target*rate), 1)
	}
	a := max(1/rate-slope*promptRateTokens/2, 1e-9)
	n := (math.Sqrt(a*a+2*slope*target) - a) / slope
	return max(int(n), 1)
}

// cachedFor returns how many leading tokens of tokens the engine holds
// without evaluating them: the prompt sequence's, or the dialog cache's for
// key.
func (e *Engine) cachedFor(key string, tokens []int) int {
	n := commonPrefix(e.cur.tokens, tokens)
	if ent := e.dialogs.entries[key]; key != "" && ent != nil {
		n = max(n, commonPrefix(ent.tokens, tokens))
	}
	return n
}

// turnCost estimates a turn's tokens without the chat template: its own
// tokens and a few for the role markers. Block boundaries depend only on
// these, so they stay where they are as the dialog grows.
func (e *Engine) turnCost(t turn) int {
	const markers = 5
	if t.tokens != nil {
		return len(t.tokens) + markers
	}
	return e.countTokens(t.content) + markers
}

// fitHistory returns how many of the oldest turns before turn keep (the
// partner's current turn; the turns from it on always stay) to drop so that
// the prompt fits limit tokens and its uncached tokens, with reserve more
// (remembered examples, a transcript still to come), fit the history
// budget. It drops only whole blocks: the candidate starts are the turns
// where the running total of turnCost from the first turn passes a
// multiple of half the budget; the earliest start that fits wins, and when
// none does the history goes entirely. render renders the system message
// and turns as the prompt will be. Without a budget it drops nothing.
func (e *Engine) fitHistory(key, system string, turns []turn, keep, limit, reserve int, render func([]chatMessage) ([]int, error)) (int, error) {
	budget := e.historyBudget()
	if budget <= 0 || keep <= 0 {
		return 0, nil
	}
	block := max(budget/2, 1)
	costs := make([]int, len(turns))
	total := 0
	for i, t := range turns {
		costs[i] = e.turnCost(t)
		total += costs[i]
	}
	// Candidate starts: 0 and every block boundary before keep.
	starts := []int{0}
	sum, next := 0, block
	for i := 0; i < keep; i++ {
		sum += costs[i]
		if sum >= next && i+1 < keep {
			starts = append(starts, i+1)
			for next <= sum {
				next += block
			}
		}
	}
	sysCost := e.countTokens(system)
	held := len(e.cur.tokens) // the most tokens any start can find cached
	if ent := e.dialogs.entries[key]; key != "" && ent != nil {
		held = max(held, len(ent.tokens))
	}
	after := total // tokens from the candidate start on
	prev := 0
	for _, s := range starts {
		for ; prev < s; prev++ {
			after -= costs[prev]
		}
		if est := sysCost + after; est > limit+limit/4 || est-held > budget+budget/4 {
			// Far too long for the context or the budget (the estimate
			// is close): no need to render it.
			continue
		}
		tokens, err := render(chatFor(system, turns[s:]))
		if err != nil {
			return 0, err
		}
		if len(tokens) <= limit && len(tokens)-e.cachedFor(key, tokens)+reserve <= budget {
			return s, nil
		}
	}
	return keep, nil
}

// historyCounts returns how many messages of turns come before turn keep
// (the partner's current turn; -1: none, all turns are history), and how
// many of them are left once the oldest dropped turns are gone.
func historyCounts(turns []turn, keep, dropped int) (sent, used int) {
	if keep < 0 {
		keep = len(turns)
	}
	for i, t := range turns[:keep] {
		sent += t.msgs
		if i >= dropped {
			used += t.msgs
		}
	}
	return sent, used
}
