package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
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
// file's stored timing in GET /v1/admin/models (timings), kept in the
// store as this box's record of the file, so that a restart keeps it.
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

// legacyTimingsDir is where replyd kept a file's timing before the store
// did: beside it, in a hidden folder of the models folder the listing skips.
func (f *modelFolder) legacyTimingsDir() string { return filepath.Join(f.dir, ".timings") }

// migrateTimings moves the timings kept as files (legacyTimingsDir) into
// the store as this box's records, once: each file moved is removed, and
// the folder with the last. A file that cannot be read or parsed is left
// where it is, with a warning; it is no use to the listing either way.
func (s *Server) migrateTimings() {
	if s.models.dir == "" {
		return
	}
	dir := s.models.legacyTimingsDir()
	des, err := os.ReadDir(dir)
	if err != nil {
		return // none: nothing to migrate
	}
	for _, de := range des {
		name, ok := strings.CutSuffix(de.Name(), ".json")
		if !ok || !de.Type().IsRegular() {
			continue
		}
		p := filepath.Join(dir, de.Name())
		b, err := os.ReadFile(p)
		var t struct {
			ModelTiming
			ModTime time.Time `json:"mod_time"`
		}
		if err == nil {
			err = json.Unmarshal(b, &t)
		}
		if err == nil {
			t.ModelTiming.ModTime = t.ModTime
			err = s.putTiming(name, t.ModelTiming)
		}
		if err != nil {
			s.log.Warn("a timing kept as a file could not be moved into the store", "file", p, "error", err.Error())
			continue
		}
		_ = os.Remove(p)
	}
	if err := os.Remove(dir); err == nil {
		s.log.Info("the model timings kept as files are in the store now", "dir", dir)
	}
}

// putTiming stores t as this box's timing of the file name.
func (s *Server) putTiming(name string, t ModelTiming) error {
	b, err := json.Marshal(t)
	if err != nil {
		return err
	}
	return s.store.PutModelRecord(store.ModelRecord{Node: s.node, File: name, What: store.ModelTiming,
		Bytes: t.Bytes, ModTime: t.ModTime, Body: b})
}

// modelRecords are this box's stored timings and comparisons of the
// files still as they were measured (same size and modification time), by
// file name.
type modelRecords struct {
	timings     map[string]*ModelTiming
	comparisons map[string]*ModelComparison
}

// readModelRecords reads this box's records; stat gives a file's state
// now (nil: gone).
func (s *Server) readModelRecords(stat func(name string) os.FileInfo) (modelRecords, error) {
	out := modelRecords{timings: map[string]*ModelTiming{}, comparisons: map[string]*ModelComparison{}}
	recs, err := s.store.ModelRecords(s.node)
	if err != nil {
		return out, err
	}
	for _, r := range recs {
		st := stat(r.File)
		if st == nil || st.Size() != r.Bytes || !st.ModTime().Equal(r.ModTime) {
			continue // gone or replaced since
		}
		switch r.What {
		case store.ModelTiming:
			var t ModelTiming
			if json.Unmarshal(r.Body, &t) == nil {
				t.Bytes, t.ModTime = r.Bytes, r.ModTime
				out.timings[r.File] = &t
			}
		case store.ModelComparison:
			var c ModelComparison
			if json.Unmarshal(r.Body, &c) == nil {
				out.comparisons[r.File] = &c
			}
		}
	}
	return out, nil
}

// handleTimeModel times the folder's checked model file {name} beside the
// active model of its kind, at idle priority, and stores the figures with
// the store.
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
	if err := s.putTiming(name, t); err != nil {
		return err
	}
	s.adminLog(c, store.LevelInfo, name, "model timed: %s %s: turn %d ms (active %s: %d ms)", e.Kind, name, t.Candidate.TurnMS, t.Active.Model, t.Active.TurnMS)
	return c.JSON(http.StatusOK, t)
}
