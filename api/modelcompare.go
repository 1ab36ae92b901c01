package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/replyd/replyd/models"
	"github.com/replyd/replyd/store"
)

// compareBody is the optional JSON body of POST .../compare.
type compareBody struct {
	Turns       *int     `json:"turns"`
	Temperature *float64 `json:"temperature"`
}

// compareError maps models.ErrCompareNoRoom and the switcher's errors.
func compareError(err error) error {
	if errors.Is(err, models.ErrCompareNoRoom) {
		return &Error{Code: CodeConflict, Message: err.Error() + "; a comparison never unloads the active model: free memory, or switch to it (requests get 503 loading meanwhile) and compare the other way round", Err: err}
	}
	if ae := switchError(err); ae != nil {
		return ae
	}
	return err
}

// handleCompareModel starts replaying the latest recorded turns through
// the folder's checked language model {name} and the active one. It
// answers 202 with the comparison, which GET .../compare then follows.
func (s *Server) handleCompareModel(c echo.Context) error {
	if err := s.modelsConfigured(); err != nil {
		return err
	}
	if !s.models.CanCompare() {
		return errorf(CodeNotSupported, "this server cannot compare models while it runs")
	}
	name, err := modelNameParam(c)
	if err != nil {
		return err
	}
	var b compareBody
	if err := s.readJSON(c, &b, true); err != nil {
		return err
	}
	turns, temp := models.DefaultCompareTurns, s.limits.DefaultTemperature
	if b.Turns != nil {
		if *b.Turns < 1 || *b.Turns > models.MaxCompareTurns {
			return badRequest("turns must be between 1 and %d", models.MaxCompareTurns)
		}
		turns = *b.Turns
	}
	if b.Temperature != nil {
		if !(*b.Temperature >= 0 && *b.Temperature <= s.limits.MaxTemperature) {
			return badRequest("temperature must be between 0 and %g", s.limits.MaxTemperature)
		}
		temp = *b.Temperature
	}
	release, err := s.models.ReserveCompare(name) // one comparison at a time
	if err != nil {
		return err
	}
	unhold, err := s.models.Hold(name, "being compared")
	if err != nil {
		release()
		return err
	}
	started := false // once the run has started, it releases both
	defer func() {
		if !started {
			unhold()
			release()
		}
	}()
	path, e, err := s.describeModel(name)
	if err != nil {
		return err
	}
	if e.Check != "ok" {
		return errorf(CodeInvalidModel, "the model file was refused: %s", e.Check)
	}
	if e.Kind != "llm" {
		return badRequest("%s is a %s model: a comparison replays language models (kind llm) only; the log holds no true transcript of the partner's speech to score a Whisper model against", name, e.Kind)
	}
	if same(s.models.ActiveModel(e.Kind), path) {
		return errorf(CodeConflict, "%s is the active %s model: compare another file with it", name, e.Kind)
	}
	st, err := os.Stat(path)
	if err != nil {
		return errorf(CodeNotFound, "no model file %s in the models folder", name)
	}
	ts, err := models.RecordedTurns(s.store, turns, temp, store.PromptVersion{Version: DefaultPromptVersion, Prompt: DefaultSystemPrompt}, s.now().Add(time.Second))
	if err != nil {
		return err
	}
	if len(ts) == 0 {
		return errorf(CodeConflict, "there is no recorded turn to replay: a turn counts once its user, asked with remember: true, reported what they spoke (POST /v1/feedback)")
	}
	run, err := s.models.BeginCompare(e.Kind, path)
	if err != nil {
		ae := toAPIError(compareError(err))
		s.adminLog(c, store.LevelWarn, name, "model comparison refused: %s %s: %s", e.Kind, name, ae.Message)
		return ae
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmp := &models.Comparison{Kind: e.Kind, Node: s.node, Model: name, State: "running", Turns: turns, TurnsFound: len(ts),
		Temperature: temp, StartedAt: s.now().UTC().Format(time.RFC3339)}
	done := s.models.StartCompare(*cmp, cancel)
	out := *cmp
	s.adminLog(c, store.LevelInfo, name, "model comparison started: %s %s on the latest %d recorded turns", e.Kind, name, len(ts))
	started = true
	go s.runCompare(ctx, cancel, done, name, st, run, ts, unhold)
	return c.JSON(http.StatusAccepted, out)
}

// runCompare runs a comparison begun by handleCompareModel and records its
// end in the comparison and the admin log; unhold then releases the file.
func (s *Server) runCompare(ctx context.Context, cancel context.CancelFunc, done func(), name string, st os.FileInfo, run models.CompareRun, ts []models.CompareTurn, unhold func()) {
	defer done()
	defer cancel()
	res, err := run(ctx, ts, func(done, total int) {
		s.models.CompareProgress(name, done, total)
	})
	unhold() // the candidate is freed: the file may go before the end is shown
	c, _, _ := s.models.Comparison(name)
	c.FinishedAt, c.Reason, c.Preempted = s.now().UTC().Format(time.RFC3339), res.Reason, res.Preempted
	var msg string
	level := store.LevelInfo
	if err != nil {
		ae := toAPIError(compareError(err))
		if errors.Is(err, context.Canceled) {
			ae = errorf(CodeCanceled, "the comparison was stopped: the server is shutting down")
		}
		c.State, c.Error = "failed", &models.ErrorBody{Error: ae.Code, Message: ae.Message}
		level, msg = store.LevelWarn, fmt.Sprintf("model comparison failed: %s %s: %s", c.Kind, name, ae.Message)
	} else {
		res.Candidate.Model, res.Active.Model = name, filepath.Base(res.Active.Model)
		c.State, c.Candidate, c.Active = "done", &res.Candidate, &res.Active
		msg = fmt.Sprintf("model compared: %s %s on %d turns: spoken reply among the candidates %.0f%% (active %s: %.0f%%), keystrokes saved %.0f%% (active %.0f%%), %.0f ms a turn (active %.0f ms)",
			c.Kind, name, res.Candidate.Turns, 100*res.Candidate.ExactRate, res.Active.Model, 100*res.Active.ExactRate,
			100*res.Candidate.KeystrokeSaving, 100*res.Active.KeystrokeSaving, res.Candidate.TurnMS, res.Active.TurnMS)
	}
	// Stored and logged before it is shown: whoever sees the end finds
	// both.
	if err := s.models.StoreComparison(name, st, c); err != nil {
		s.log.Error("storing the comparison failed: it lasts until the next restart", "model", name, "error", err.Error())
	}
	if err := s.appendAdminLog(level, name, msg); err != nil {
		s.log.Error("appending the admin log entry failed", "error", err.Error())
	}
	s.models.EndCompare(name, c)
}

// handleGetComparison serves the latest comparison of the file {name},
// running or finished: this run's, else the one stored.
func (s *Server) handleGetComparison(c echo.Context) error {
	if err := s.modelsConfigured(); err != nil {
		return err
	}
	name, err := modelNameParam(c)
	if err != nil {
		return err
	}
	cmp, ok, err := s.models.Comparison(name)
	if err != nil {
		return err
	}
	if ok {
		return c.JSON(http.StatusOK, cmp)
	}
	return errorf(CodeNotFound, "no comparison of %s on this box", name)
}
