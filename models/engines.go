package models

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/replyd/replyd/engine"
	"github.com/replyd/replyd/engine/slot"
)

// Engines are the running engines as the Service's model actions reach
// them (cmd/replyd's engines implement it): kind is "llm" or "whisper".
type Engines interface {
	// State is kind's engine now.
	State(kind string) EngineState
	// Switch makes the model file path kind's model, with the old one's
	// path old: mode "beside" loads it while the old one serves, "swap"
	// frees the old one first, requests meanwhile told to retry after
	// expect, and loads old again when path fails (SwitchSlot's rules).
	Switch(kind, mode, path, old string, expect time.Duration) error
}

// EngineState is one engine as a model action starts from it.
type EngineState struct {
	// Ready is whether the engine has loaded its model at start: a model
	// action waits for that (ErrBusy).
	Ready bool
	// GPU is whether its model's memory is a GPU's, which replyd cannot
	// read: nothing loads beside it.
	GPU bool
	// Model is the path of its model now, or of the one being loaded.
	Model string
	// LoadTook is how long its model took to load last; 0 unknown.
	LoadTook time.Duration
}

// LanguageModels open a candidate language model and lend the active one,
// for a timing and a comparison.
type LanguageModels interface {
	// OpenIdle opens the language model file path with the active model's
	// settings, its own timings (the decode steps, the prompt speed) at
	// PrioritySpeculative. The caller closes it.
	OpenIdle(path string) (LanguageModel, error)
	// Active lends the active language model until release; an error when
	// it is unloaded.
	Active() (m LanguageModel, release func(), err error)
}

// LanguageModel is one loaded language model.
type LanguageModel interface {
	engine.Generator
	Status() engine.EngineStatus
	// Figures are what the model measured when it opened.
	Figures() LLMFigures
	Close() error
}

// LLMFigures are what a language model measured when it opened: its
// prompt speed on all threads, one decode step of Candidates candidates,
// the history budget it gets (docs/history-budget.md) and its reply length
// cap.
type LLMFigures struct {
	PromptTokensPerS float64
	Candidates       int
	Step             time.Duration
	HistoryBudget    int
	MaxReplyTokens   int
}

// SpeechModels open a candidate Whisper model and lend the active one, for
// a timing.
type SpeechModels interface {
	// Open loads the Whisper model file path with the active model's
	// settings. The caller closes it.
	Open(path string) (SpeechModel, error)
	// Active lends the active Whisper model until release; an error when
	// it is unloaded.
	Active() (m SpeechModel, release func(), err error)
}

// SpeechModel is one loaded Whisper model.
type SpeechModel interface {
	engine.Transcriber
	Status() engine.EngineStatus
	Close() error
}

// SlotStatus is what an engine shows while a switch has emptied its slot,
// and after.
type SlotStatus interface {
	// Loading shows the model file path as the one being loaded.
	Loading(path string)
	// Down shows err as why the engine has no model.
	Down(err error)
	// Loaded clears what Loading or Down showed: a model serves; took,
	// when above 0, is how long it took to load.
	Loaded(took time.Duration)
}

// SwitchSlot switches engine name's ("llm", "stt") slot s to the model file
// path with open (which returns it warm): mode "beside" loads it while the
// old one serves; "swap" frees the old one (old, its path) first, requests
// meanwhile getting the slot's SwappingError with the expected load time
// expect, and loads the old one again when the new one fails, so that the
// box keeps answering. Only when that fails too is the engine down: st
// then says why. A new model that failed is ErrUnusable.
func SwitchSlot[M slot.Model](s *slot.Slot[M], open func(string) (M, error), st SlotStatus, log *slog.Logger, name, mode, path, old string, expect time.Duration) error {
	// took is the load time of the model that serves after, if one
	// loaded; failed the error of the new model.
	var took time.Duration
	var failed error
	timed := func(p string) (M, error) {
		t0 := time.Now()
		m, err := open(p)
		if err == nil {
			took = time.Since(t0)
		} else if failed == nil {
			failed = err
		}
		return m, err
	}
	var err error
	if mode == "beside" {
		err = s.Beside(func() (M, error) { return timed(path) })
	} else {
		st.Loading(path) // shown while the slot is empty
		err = s.Swap(expect, func() (M, error) { return timed(path) }, func() (M, error) {
			log.Warn("the new model failed to load: reloading the old one", "engine", name, "model", path, "error", failed.Error(), "old", old)
			st.Loading(old)
			return timed(old)
		})
	}
	var se *slot.Error
	if errors.As(err, &se) && se.Old != nil {
		st.Down(se.Old)
		log.Error("the old model failed to load again: the engine is down", "engine", name, "model", old, "error", se.Old.Error())
		return errors.Join(loadError(se.New), fmt.Errorf("reloading %s: %w", filepath.Base(old), se.Old))
	}
	if err != nil && se == nil {
		return err
	}
	// The new model, the old one again, or (Beside failed) the old one
	// untouched serves.
	st.Loaded(took)
	if se != nil {
		return loadError(se.New)
	}
	return nil
}

// loadError marks a model that failed to load as the admin's mistake.
func loadError(err error) error {
	return fmt.Errorf("%w: %v", ErrUnusable, err)
}

// engineName is the engines' name (EngineStatus.Name) of a model kind of
// the models folder ("llm", "whisper").
func engineName(kind string) (string, error) {
	switch kind {
	case "llm":
		return "llm", nil
	case "whisper":
		return "stt", nil
	}
	return "", fmt.Errorf("%w: kind %q: want llm or whisper", ErrUnusable, kind)
}
