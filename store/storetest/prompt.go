package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/replyd/replyd/store"
)

func promptVersions(t *testing.T, e Env) {
	s, clk := e.S, e.Clock
	Must(t, s.SavePrompt(store.PromptVersion{Prompt: "one", Version: "1"}))
	clk.Add(time.Minute)
	Must(t, s.SavePrompt(store.PromptVersion{Prompt: "nine", Version: "9"}))
	clk.Add(time.Minute)
	Must(t, s.SavePrompt(store.PromptVersion{Prompt: "beta", Version: "beta"}))
	clk.Add(time.Minute)
	Must(t, s.SavePrompt(store.PromptVersion{Prompt: "three\nlines «ü»", Version: "3"}))
	// An explicit CreatedAt is kept, even one older than the others: the
	// history is in saving order, not by CreatedAt.
	Must(t, s.SavePrompt(store.PromptVersion{Prompt: "old", Version: "007", CreatedAt: T0.Add(-time.Hour)}))

	wantErr(t, "duplicate version", s.SavePrompt(store.PromptVersion{Prompt: "again", Version: "9"}), store.ErrExists)
	wantErr(t, "SavePrompt without version", s.SavePrompt(store.PromptVersion{Prompt: "x"}), store.ErrInvalid)
	if v, err := s.NextPromptVersion(); err != nil || v != "10" {
		t.Errorf("NextPromptVersion = %q, %v; want 10", v, err)
	}
	cur, ok, err := s.CurrentPrompt()
	Must(t, err)
	want := store.PromptVersion{Prompt: "old", Version: "007", CreatedAt: T0.Add(-time.Hour)}
	if diff := cmp.Diff(want, cur); !ok || diff != "" {
		t.Errorf("CurrentPrompt ok=%v (-want +got):\n%s", ok, diff)
	}
	hist, err := s.PromptHistory(0)
	Must(t, err)
	wantHist := []store.PromptVersion{
		want,
		{Prompt: "three\nlines «ü»", Version: "3", CreatedAt: T0.Add(3 * time.Minute)},
		{Prompt: "beta", Version: "beta", CreatedAt: T0.Add(2 * time.Minute)},
		{Prompt: "nine", Version: "9", CreatedAt: T0.Add(time.Minute)},
		{Prompt: "one", Version: "1", CreatedAt: T0},
	}
	if diff := cmp.Diff(wantHist, hist); diff != "" {
		t.Errorf("PromptHistory (-want +got):\n%s", diff)
	}
	hist, err = s.PromptHistory(2)
	Must(t, err)
	if diff := cmp.Diff(wantHist[:2], hist); diff != "" {
		t.Errorf("PromptHistory(2) (-want +got):\n%s", diff)
	}
}

func promptEmpty(t *testing.T, e Env) {
	if _, ok, err := e.S.CurrentPrompt(); ok || err != nil {
		t.Fatalf("CurrentPrompt on empty store: ok=%v err=%v", ok, err)
	}
	if v, err := e.S.NextPromptVersion(); err != nil || v != "1" {
		t.Errorf("NextPromptVersion empty = %q, %v; want 1", v, err)
	}
	hist, err := e.S.PromptHistory(5)
	Must(t, err)
	if hist == nil || len(hist) != 0 {
		t.Errorf("PromptHistory on an empty store = %#v, want an empty non-nil slice", hist)
	}
	// Versions that are not plain non-negative integers do not count.
	for _, v := range []string{"-4", "2.5", "x9", "99999999999999999999999"} {
		Must(t, e.S.SavePrompt(store.PromptVersion{Prompt: v, Version: v}))
	}
	if v, _ := e.S.NextPromptVersion(); v != "1" {
		t.Errorf("NextPromptVersion with only non-integer versions = %q, want 1", v)
	}
}

// promptConcurrentSameVersion saves one version from many callers at once:
// exactly one wins, the history holds it once and it is current.
func promptConcurrentSameVersion(t *testing.T, e Env) {
	errs := concurrently(10, func(i int) error {
		return e.S.SavePrompt(store.PromptVersion{Prompt: "p", Version: "5"})
	})
	won := 0
	for _, err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, store.ErrExists):
			t.Errorf("SavePrompt: %v", err)
		}
	}
	hist, err := e.S.PromptHistory(0)
	Must(t, err)
	if won != 1 || len(hist) != 1 {
		t.Errorf("%d saves won, history %d long; want 1 and 1", won, len(hist))
	}
	if v, _ := e.S.NextPromptVersion(); v != "6" {
		t.Errorf("NextPromptVersion = %q, want 6", v)
	}
}
