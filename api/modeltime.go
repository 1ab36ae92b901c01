package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/replyd/replyd/store"
)

// ModelTimer times a candidate model file on this box beside the active
// model of its kind, at idle priority, without switching. A HealthSource
// that implements it (cmd/replyd's engines) makes
// POST /v1/admin/models/{name}/time work; without it it answers 501.
type ModelTimer interface {
	// TimeModel loads the file path of kind ("llm" or "whisper") beside
	// the active model, times it and the active one, and frees it. Errors
	// wrap ErrModelSwitchBusy, ErrModelTimeNoRoom or ErrModelSwitchInvalid.
	TimeModel(ctx context.Context, kind, path string) (ModelTiming, error)
}

// ErrModelTimeNoRoom: the candidate does not fit in memory beside the
// active model; timing never unloads the active one: 409.
var ErrModelTimeNoRoom = errors.New("the model cannot be timed: it does not fit in memory beside the active one")

// ModelFigures are one model's figures on this box. Zero means not
// measured.
type ModelFigures struct {
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
	// TurnMS is the turn time to expect (TurnFigures), 0 when unknown.
	TurnMS int64 `json:"turn_ms"`
}

// TurnPromptTokens is the uncached prompt of the turn TurnMS estimates: a
// going-on dialog's partner turn and the user's reply, a little more.
const TurnPromptTokens = 200

// Turn fills TurnMS: for a language model, TurnPromptTokens at the prompt
// speed plus max_reply_tokens decode steps of the candidates (random-weight
// models decode to the cap; real ones stop sooner); for Whisper, the fixed
// audio's transcription.
func (f *ModelFigures) Turn() {
	switch {
	case f.PromptTokensPerS > 0 && f.StepMS > 0:
		f.TurnMS = int64(TurnPromptTokens/f.PromptTokensPerS*1000 + float64(f.MaxReplyTokens)*f.StepMS)
	case f.TranscribeMS > 0:
		f.TurnMS = int64(f.TranscribeMS)
	}
}

// ModelTiming is the body of POST /v1/admin/models/{name}/time and the
// file's stored timing in GET /v1/admin/models (timings).
type ModelTiming struct {
	Kind string `json:"kind"`
	Node string `json:"node"`
	At   string `json:"at"`
	// Reason says why the candidate could load beside the active model,
	// with the memory figures.
	Reason         string `json:"reason"`
	BytesNeeded    int64  `json:"bytes_needed"`
	BytesAvailable int64  `json:"bytes_available"`
	// LoadMS is the candidate's load, its timings included.
	LoadMS    int64        `json:"load_ms"`
	Candidate ModelFigures `json:"candidate"`
	Active    ModelFigures `json:"active"`
	// Bytes and ModTime identify the file timed: a file replaced since
	// has no timing.
	Bytes   int64     `json:"bytes"`
	ModTime time.Time `json:"-"`
}

// timingPath is where the folder keeps a file's timing: beside it, in a
// hidden folder the listing skips.
func (f *modelFolder) timingPath(name string) string {
	return filepath.Join(f.dir, ".timings", name+".json")
}

type storedTiming struct {
	ModelTiming
	ModTime time.Time `json:"mod_time"`
}

// timing returns the stored timing of the file name of st, nil when none
// or the file changed since.
func (f *modelFolder) timing(name string, st os.FileInfo) *ModelTiming {
	b, err := os.ReadFile(f.timingPath(name))
	if err != nil {
		return nil
	}
	var t storedTiming
	if json.Unmarshal(b, &t) != nil || t.Bytes != st.Size() || !t.ModTime.Equal(st.ModTime()) {
		return nil
	}
	return &t.ModelTiming
}

func (f *modelFolder) storeTiming(name string, t ModelTiming) error {
	p := f.timingPath(name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	b, err := json.Marshal(storedTiming{ModelTiming: t, ModTime: t.ModTime})
	if err != nil {
		return err
	}
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, p)
}

// handleTimeModel times the folder's checked model file {name} beside the
// active model of its kind, at idle priority, and stores the figures with
// the file.
func (s *Server) handleTimeModel(c echo.Context) error {
	if err := s.modelsConfigured(); err != nil {
		return err
	}
	tm, ok := s.health.(ModelTimer)
	if !ok {
		return errorf(CodeNotSupported, "this server cannot time models while it runs")
	}
	name, err := modelNameParam(c)
	if err != nil {
		return err
	}
	release, err := s.models.hold(name, "being timed")
	if err != nil {
		return err
	}
	defer release()
	path, e, err := s.describeModel(name)
	if err != nil {
		return err
	}
	if e.Check != "ok" {
		return errorf(CodeInvalidModel, "the model file was refused: %s", e.Check)
	}
	if sw, ok := s.health.(ModelSwitcher); ok && same(sw.ActiveModel(e.Kind), path) {
		return errorf(CodeConflict, "%s is the active %s model: its own figures are shown beside every timing", name, e.Kind)
	}
	st, err := os.Stat(path)
	if err != nil {
		return errorf(CodeNotFound, "no model file %s in the models folder", name)
	}
	s.adminLog(c, store.LevelInfo, name, "model timing started: %s %s", e.Kind, name)
	t, err := tm.TimeModel(c.Request().Context(), e.Kind, path)
	if err != nil {
		ae := toAPIError(err)
		s.adminLog(c, store.LevelWarn, name, "model timing failed: %s %s: %s", e.Kind, name, ae.Message)
		return ae
	}
	t.Candidate.Model = name
	t.Candidate.Turn()
	t.Active.Model = filepath.Base(t.Active.Model)
	t.Active.Turn()
	t.Kind, t.Node, t.At = e.Kind, s.node, s.now().UTC().Format(time.RFC3339)
	t.Bytes, t.ModTime = st.Size(), st.ModTime()
	s.models.mu.Lock()
	err = s.models.storeTiming(name, t)
	s.models.mu.Unlock()
	if err != nil {
		return err
	}
	s.adminLog(c, store.LevelInfo, name, "model timed: %s %s: turn %d ms (active %s: %d ms)", e.Kind, name, t.Candidate.TurnMS, t.Active.Model, t.Active.TurnMS)
	return c.JSON(http.StatusOK, t)
}
