package api

import (
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/replyd/replyd/models"
	"github.com/replyd/replyd/models/modelfile"
	"github.com/replyd/replyd/store"
)

// switchBody is the optional JSON body of activate and rollback.
type switchBody struct {
	Kind string `json:"kind"`
	Mode string `json:"mode"`
}

// canSwitch is nil when this box can switch models while it runs.
func (s *Server) canSwitch() error {
	if err := s.modelsConfigured(); err != nil {
		return err
	}
	if !s.models.CanSwitch() {
		return errorf(CodeNotSupported, "this server cannot switch models while it runs")
	}
	return nil
}

func (s *Server) readSwitchBody(c echo.Context) (switchBody, error) {
	var b switchBody
	if err := s.readJSON(c, &b, true); err != nil {
		return b, err
	}
	switch b.Mode {
	case "", "auto", "beside", "swap":
	default:
		return b, badRequest("mode must be auto, beside or swap")
	}
	return b, nil
}

// handleActivateModel switches the engine of the folder's model file
// {name} (its kind: llm or whisper) to it, and stores the choice for this
// box.
func (s *Server) handleActivateModel(c echo.Context) error {
	if err := s.canSwitch(); err != nil {
		return err
	}
	name, err := modelNameParam(c)
	if err != nil {
		return err
	}
	body, err := s.readSwitchBody(c)
	if err != nil {
		return err
	}
	release, err := s.models.Hold(name, "being activated")
	if err != nil {
		return err
	}
	defer release()
	path, e, err := s.describeModel(name)
	if err != nil {
		return err
	}
	if e.Check != "ok" {
		s.adminLog(c, store.LevelWarn, name, "model switch refused: %s: %s", name, e.Check)
		return errorf(CodeInvalidModel, "the model file was refused: %s", e.Check)
	}
	if body.Kind != "" && body.Kind != e.Kind {
		return badRequest("%s is a %s model, not %s", name, e.Kind, body.Kind)
	}
	if same(s.models.ActiveModel(e.Kind), path) {
		return errorf(CodeConflict, "%s is already the active %s model", name, e.Kind)
	}
	return s.switchTo(c, e.Kind, path, body.Mode, "model switched")
}

// handleRollbackModel switches the engine of kind {kind} (llm or whisper)
// back to the model this box used before its last switch.
func (s *Server) handleRollbackModel(c echo.Context) error {
	if err := s.canSwitch(); err != nil {
		return err
	}
	body, err := s.readSwitchBody(c)
	if err != nil {
		return err
	}
	kind := c.Param("kind")
	if kind != "llm" && kind != "whisper" {
		return badRequest("the kind must be llm or whisper")
	}
	if body.Kind != "" && body.Kind != kind {
		return badRequest("the body's kind %s is not the path's %s", body.Kind, kind)
	}
	body.Kind = kind
	choices, err := s.store.ModelChoices()
	if err != nil {
		return err
	}
	prev := ""
	for _, ch := range choices {
		if ch.Node == s.node && ch.Kind == body.Kind {
			prev = ch.Previous
		}
	}
	if prev == "" {
		return errorf(CodeConflict, "this box has not switched its %s model: there is nothing to roll back to", body.Kind)
	}
	if inFolder(s.models.Dir(), prev) {
		release, err := s.models.Hold(filepath.Base(prev), "being activated")
		if err != nil {
			return err
		}
		defer release()
	}
	if _, err := os.Stat(prev); err != nil {
		return errorf(CodeNotFound, "the earlier %s model %s is no longer on this box", body.Kind, filepath.Base(prev))
	}
	return s.switchTo(c, body.Kind, prev, body.Mode, "model rolled back")
}

// switchTo runs one switch, stores the choice and logs it.
func (s *Server) switchTo(c echo.Context, kind, path, mode, what string) error {
	name := filepath.Base(path)
	s.adminLog(c, store.LevelInfo, name, "model switch started: %s %s (mode %s)", kind, name, orAuto(mode))
	res, err := s.models.Switch(c.Request().Context(), models.SwitchRequest{Kind: kind, Path: path, Mode: mode})
	if err != nil {
		ae := toAPIError(err)
		s.adminLog(c, store.LevelWarn, name, "model switch failed: %s %s: %s", kind, name, ae.Message)
		return ae
	}
	choice := store.ModelChoice{Node: s.node, Kind: kind, Model: path, Previous: res.Previous, At: s.now()}
	if err := s.store.SetModelChoice(choice); err != nil {
		s.adminLog(c, store.LevelError, name, "%s: %s %s, but the choice was not stored: it lasts until the next restart", what, kind, name)
		return err
	}
	res.Model, res.Previous, res.Node = name, filepath.Base(res.Previous), s.node
	s.adminLog(c, store.LevelInfo, name, "%s: %s %s (was %s; %s, %d ms)", what, kind, res.Model, res.Previous, res.Mode, res.LoadMS)
	return c.JSON(http.StatusOK, res)
}

func orAuto(mode string) string {
	if mode == "" {
		return "auto"
	}
	return mode
}

// inFolder reports whether path is a file of the models folder dir.
func inFolder(dir, path string) bool {
	d, err := filepath.Abs(dir)
	if err != nil {
		return false
	}
	p, err := filepath.Abs(path)
	return err == nil && filepath.Dir(p) == d
}

// same reports whether two paths name one file.
func same(a, b string) bool {
	if a == "" || b == "" {
		return false
	}
	if pa, err := filepath.Abs(a); err == nil {
		if pb, err := filepath.Abs(b); err == nil && pa == pb {
			return true
		}
	}
	sa, err := os.Stat(a)
	if err != nil {
		return false
	}
	sb, err := os.Stat(b)
	return err == nil && os.SameFile(sa, sb)
}

// boxModels is one box's models in GET /v1/admin/models: what it chose on
// the admin page, by file name.
type boxModels struct {
	Node string `json:"node"`
	Kind string `json:"kind"`
	// Model and Previous are file names; Previous is what a roll back
	// returns to ("" for none).
	Model    string `json:"model"`
	Previous string `json:"previous"`
	At       string `json:"at"`
}

// modelChoices lists the boxes' choices for the Models view.
func (s *Server) modelChoices() ([]boxModels, error) {
	cs, err := s.store.ModelChoices()
	if err != nil {
		return nil, err
	}
	out := make([]boxModels, 0, len(cs))
	for _, ch := range cs {
		prev := ""
		if ch.Previous != "" {
			prev = filepath.Base(ch.Previous)
		}
		out = append(out, boxModels{Node: ch.Node, Kind: ch.Kind, Model: filepath.Base(ch.Model), Previous: prev, At: ch.At.UTC().Format(time.RFC3339)})
	}
	return out, nil
}

// switchError maps the errors of the models package's switch and timing;
// nil for others.
func switchError(err error) *Error {
	msg := err.Error()
	switch {
	case errors.Is(err, models.ErrBusy):
		return &Error{Code: CodeConflict, Message: msg + "; retry when it has finished", Err: err}
	case errors.Is(err, models.ErrNoRoom):
		return &Error{Code: CodeConflict, Message: msg + "; switch with mode swap (requests get 503 loading meanwhile) or free memory", Err: err}
	case errors.Is(err, models.ErrTimeNoRoom):
		return &Error{Code: CodeConflict, Message: msg + "; timing never unloads the active model: free memory, or switch to it (requests get 503 loading meanwhile) and read its figures", Err: err}
	case errors.Is(err, models.ErrUnusable):
		return &Error{Code: CodeInvalidModel, Message: strings.TrimPrefix(msg, models.ErrUnusable.Error()+": "), Err: err}
	}
	return nil
}

// describeModel finds the models folder's file name (already checked with
// modelfile.ValidName) and describes it against the embedded manifest: its
// absolute path and entry, 404 not_found when it is not there.
func (s *Server) describeModel(name string) (string, modelfile.Entry, error) {
	path, e, err := s.models.Describe(name)
	if errors.Is(err, modelfile.ErrNotFound) {
		return "", modelfile.Entry{}, errorf(CodeNotFound, "no model file %s in the models folder", name)
	}
	return path, e, err
}
