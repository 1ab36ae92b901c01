package models

import (
	"fmt"
	"testing"
	"time"

	"github.com/replyd/replyd/store"
)

// turnStore holds the prompts and outcomes RecordedTurns reads.
type turnStore struct {
	history  []store.PromptVersion // newest first
	current  *store.PromptVersion
	outcomes []store.OutcomeRecord
}

func (s turnStore) PromptHistory(int) ([]store.PromptVersion, error) { return s.history, nil }

func (s turnStore) CurrentPrompt() (store.PromptVersion, bool, error) {
	if s.current == nil {
		return store.PromptVersion{}, false, nil
	}
	return *s.current, true, nil
}

func (s turnStore) Outcomes(_, until time.Time, fn func(store.OutcomeRecord) error) error {
	for _, r := range s.outcomes {
		if r.Inference.At.Before(until) {
			if err := fn(r); err != nil {
				return err
			}
		}
	}
	return nil
}

// TestRecordedTurns: the latest n turns with an outcome and their text,
// oldest first, each with its prompt version's text (the current prompt
// when the version is gone, the built-in one by its version), its
// candidate count and steering mode.
func TestRecordedTurns(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	turn := func(i int, version string, cands int, steer string, text bool) store.OutcomeRecord {
		r := store.OutcomeRecord{Inference: store.Inference{At: t0.Add(time.Duration(i) * time.Minute), PromptVersion: version,
			CandidateChars: make([]int, cands), Outcome: &store.Outcome{SteerMode: steer}}}
		if text {
			r.Pair = &store.Pair{Partner: fmt.Sprintf("partner %d", i), Reply: fmt.Sprintf("reply %d", i)}
		}
		return r
	}
	st := turnStore{
		history: []store.PromptVersion{{Version: "v2", Prompt: "prompt two"}, {Version: "v1", Prompt: "prompt one"}, {Version: "v1", Prompt: "an older v1"}},
		current: &store.PromptVersion{Version: "v2", Prompt: "prompt two"},
		outcomes: []store.OutcomeRecord{
			turn(0, "v1", 2, "", true), turn(1, "builtin-1", 0, "", true), turn(2, "v1", 3, "", false),
			turn(3, "gone", 4, "prefix", true), turn(4, "v2", 1, "", true), turn(5, "v2", 1, "", true),
		},
	}
	builtin := store.PromptVersion{Version: "builtin-1", Prompt: "the built-in prompt"}
	got, err := RecordedTurns(st, 3, 0.5, builtin, t0.Add(5*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	want := []CompareTurn{
		{Partner: "partner 1", Reply: "reply 1", SystemPrompt: "the built-in prompt", Candidates: 1, Temperature: 0.5},
		{Partner: "partner 3", Reply: "reply 3", SystemPrompt: "prompt two", Candidates: 4, Temperature: 0.5, SteerMode: "prefix"},
		{Partner: "partner 4", Reply: "reply 4", SystemPrompt: "prompt two", Candidates: 1, Temperature: 0.5},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("turns\n got %+v\nwant %+v", got, want)
	}
	got, err = RecordedTurns(st, 10, 0, builtin, t0.Add(time.Hour))
	if err != nil || len(got) != 5 || got[0].SystemPrompt != "prompt one" || got[4].Partner != "partner 5" {
		t.Errorf("all turns: %+v, %v", got, err)
	}
}
