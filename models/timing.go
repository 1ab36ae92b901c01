package models

import (
	"errors"
	"time"
)

// ErrTimeNoRoom: the candidate does not fit in memory beside the
// active model; timing never unloads the active one: 409.
var ErrTimeNoRoom = errors.New("the model cannot be timed: it does not fit in memory beside the active one")

// Figures are one model's figures on this box. Zero means not
// measured.
type Figures struct {
	Model string `json:"model"`
	// A language model: its prompt speed on all threads, one decode step
	// for the configured number of candidates, the history budget it gets
	// (docs/history-budget.md) and the reply length cap.
	PromptTokensPerS    float64 `json:"prompt_tokens_per_s,omitempty"`
	Candidates          int     `json:"candidates,omitempty"`
	StepMS              float64 `json:"step_ms,omitempty"`
	HistoryBudgetTokens int     `json:"history_budget_tokens,omitempty"`
	MaxReplyTokens      int     `json:"max_reply_tokens,omitempty"`
	// Whisper: the transcription of AudioSeconds of fixed audio, and its
	// real-time factor (transcription time / audio time).
	AudioSeconds   float64 `json:"audio_seconds,omitempty"`
	TranscribeMS   float64 `json:"transcribe_ms,omitempty"`
	RealTimeFactor float64 `json:"real_time_factor,omitempty"`
	// Window is the encoder's window rule Whisper was timed with: what
	// REPLYD_WHISPER_WINDOW resolved to for that file and its window
	// declaration, in words (engine.EngineStatus.Window); "" in timings
	// stored before it was recorded.
	Window string `json:"window,omitempty"`
	// TurnMS is the turn time to expect (Figures.Turn), 0 when unknown.
	TurnMS int64 `json:"turn_ms"`
}

// TurnPromptTokens is the uncached prompt of the turn TurnMS estimates: a
// going-on dialog's partner turn and the user's reply, a little more.
const TurnPromptTokens = 200

// Turn fills TurnMS: for a language model, TurnPromptTokens at the prompt
// speed plus max_reply_tokens decode steps of the candidates (random-weight
// models decode to the cap; real ones stop sooner); for Whisper, the fixed
// audio's transcription.
func (f *Figures) Turn() {
	switch {
	case f.PromptTokensPerS > 0 && f.StepMS > 0:
		f.TurnMS = int64(TurnPromptTokens/f.PromptTokensPerS*1000 + float64(f.MaxReplyTokens)*f.StepMS)
	case f.TranscribeMS > 0:
		f.TurnMS = int64(f.TranscribeMS)
	}
}

// Timing is the body of POST /v1/admin/models/{name}/time and the
// file's stored timing in GET /v1/admin/models (timings), kept in the
// store as this box's record of the file, so that a restart keeps it.
type Timing struct {
	Kind string `json:"kind"`
	Node string `json:"node"`
	At   string `json:"at"`
	// Reason says why the candidate could load beside the active model,
	// with the memory figures.
	Reason         string `json:"reason"`
	BytesNeeded    int64  `json:"bytes_needed"`
	BytesAvailable int64  `json:"bytes_available"`
	// LoadMS is the candidate's load, its timings included.
	LoadMS    int64   `json:"load_ms"`
	Candidate Figures `json:"candidate"`
	Active    Figures `json:"active"`
	// Bytes and ModTime identify the file timed: a file replaced since
	// has no timing.
	Bytes   int64     `json:"bytes"`
	ModTime time.Time `json:"-"`
}
