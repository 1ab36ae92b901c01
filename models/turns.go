package models

import (
	"time"

	"github.com/replyd/replyd/store"
)

// TurnStore is what the choice of turns to replay reads (store.Store has
// it): the prompt history, the current prompt and the reported outcomes.
type TurnStore interface {
	PromptHistory(limit int) ([]store.PromptVersion, error)
	CurrentPrompt() (store.PromptVersion, bool, error)
	Outcomes(since, until time.Time, fn func(store.OutcomeRecord) error) error
}

// RecordedTurns reads the latest n recorded turns, reported before until,
// that can be replayed: an outcome was reported and the remembered pair
// (the partner's turn and what the user spoke) is still kept. Outcomes
// without text (users without remember: true, none_fit without a reply)
// cannot be replayed and are skipped. Each turn gets the text of the
// prompt version it used, or the current prompt when that version is no
// longer in the history; builtin is the built-in prompt, which the history
// need not hold (its Version and Prompt). Oldest first, at the temperature
// temp.
func RecordedTurns(st TurnStore, n int, temp float64, builtin store.PromptVersion, until time.Time) ([]CompareTurn, error) {
	prompts := map[string]string{builtin.Version: builtin.Prompt}
	hist, err := st.PromptHistory(0)
	if err != nil {
		return nil, err
	}
	// Newest first: an older duplicate of a version does not overwrite.
	for i := len(hist) - 1; i >= 0; i-- {
		if hist[i].Prompt != "" {
			prompts[hist[i].Version] = hist[i].Prompt
		}
	}
	current := builtin.Prompt
	if p, ok, err := st.CurrentPrompt(); err != nil {
		return nil, err
	} else if ok && p.Prompt != "" {
		current = p.Prompt
	}
	ring := make([]CompareTurn, 0, n)
	next := 0
	err = st.Outcomes(time.Time{}, until, func(r store.OutcomeRecord) error {
		if r.Pair == nil || r.Pair.Reply == "" || r.Pair.Partner == "" || r.Inference.Outcome == nil {
			return nil
		}
		t := CompareTurn{Partner: r.Pair.Partner, Reply: r.Pair.Reply, SystemPrompt: current,
			Candidates: max(len(r.Inference.CandidateChars), 1), Temperature: temp, SteerMode: r.Inference.Outcome.SteerMode}
		if p, ok := prompts[r.Inference.PromptVersion]; ok {
			t.SystemPrompt = p
		}
		if len(ring) < n {
			ring = append(ring, t)
		} else {
			ring[next] = t
			next = (next + 1) % n
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return append(ring[next:], ring[:next]...), nil
}
