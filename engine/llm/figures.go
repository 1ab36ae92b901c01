package llm

import (
	"context"
	"time"

	"github.com/replyd/replyd/engine"
)

// loadRun is the run of Open's timings: on every thread, at
// PrioritySpeculative for an Options.Idle engine (a candidate timed beside
// the active model), else as committed work.
func (e *Engine) loadRun() *run {
	if e.opts.Idle {
		return &run{e: e, ctx: engine.WithPriority(context.Background(), engine.PrioritySpeculative), minThreads: e.opts.Threads, idle: true}
	}
	return &run{e: e, ctx: context.Background(), minThreads: e.opts.Threads}
}

// Figures are what Open measured of the model on this box: what a turn is
// to cost.
type Figures struct {
	// PromptTokensPerS is the prompt speed on all threads (0: not measured,
	// the history budget is off).
	PromptTokensPerS float64
	// Candidates is the configured number of candidates, Step the time of
	// one decode step of that many (0: not timed, the decoding was fixed by
	// configuration).
	Candidates int
	Step       time.Duration
	// HistoryBudget is the history budget in prompt tokens (0: no bound
	// but the context).
	HistoryBudget int
	// MaxReplyTokens is the configured reply length cap.
	MaxReplyTokens int
	// Threads is how many threads the figures were measured on.
	Threads int
}

// Figures returns what Open measured. It only reads what Open set.
func (e *Engine) Figures() Figures {
	f := Figures{PromptTokensPerS: e.promptRate, Candidates: e.opts.MaxCandidates, HistoryBudget: e.historyBudget(),
		MaxReplyTokens: e.opts.MaxReplyTokens, Threads: e.opts.Threads}
	if n := e.opts.MaxCandidates; n < len(e.stepCost) {
		f.Step = e.stepCost[n]
	}
	return f
}
