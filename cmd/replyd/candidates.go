package main

import (
	"errors"
	"path/filepath"

	"github.com/replyd/replyd/engine/llm"
	"github.com/replyd/replyd/models"
)

// languageModels are the engines' language models as a timing and a
// comparison reach them (models.LanguageModels).
type languageModels struct{ e *engines }

// OpenIdle opens the candidate with the active model's settings and
// llm.Options.Idle: Open's own timings run at PrioritySpeculative.
func (l languageModels) OpenIdle(path string) (models.LanguageModel, error) {
	opts, err := llmOptions(l.e.cfg, path, l.e.cpu, l.e.log.With("candidate", filepath.Base(path)))
	if err != nil {
		return nil, err
	}
	opts.Idle = true
	m, err := llm.Open(opts)
	if err != nil {
		return nil, err
	}
	return languageModel{m}, nil
}

func (l languageModels) Active() (models.LanguageModel, func(), error) {
	m, release, err := l.e.llm.Acquire()
	if err != nil {
		return nil, nil, err
	}
	return languageModel{m}, release, nil
}

// languageModel is an *llm.Engine with its figures in the models
// package's terms.
type languageModel struct{ *llm.Engine }

func (m languageModel) Figures() models.LLMFigures {
	f := m.Engine.Figures()
	return models.LLMFigures{PromptTokensPerS: f.PromptTokensPerS, Candidates: f.Candidates, Step: f.Step,
		HistoryBudget: f.HistoryBudget, MaxReplyTokens: f.MaxReplyTokens}
}

// speechModels are the engines' Whisper models as a timing reaches them
// (models.SpeechModels).
type speechModels struct{ e *engines }

func (s speechModels) Open(path string) (models.SpeechModel, error) {
	m, err := openWhisper(s.e.cfg, path, s.e.shortWindow(path), s.e.log.With("candidate", filepath.Base(path)))
	if err != nil {
		return nil, err
	}
	return m, nil
}

func (s speechModels) Active() (models.SpeechModel, func(), error) {
	m, release, err := s.e.stt.Acquire()
	if err != nil {
		return nil, nil, errors.New("the active speech-to-text model is unloaded")
	}
	return m, release, nil
}
