package api

import (
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/replyd/replyd/store"
)

// handleTimeModel times the folder's checked model file {name} beside the
// active model of its kind, at idle priority, and stores the figures with
// the store.
func (s *Server) handleTimeModel(c echo.Context) error {
	if err := s.modelsConfigured(); err != nil {
		return err
	}
	if !s.models.CanTime() {
		return errorf(CodeNotSupported, "this server cannot time models while it runs")
	}
	name, err := modelNameParam(c)
	if err != nil {
		return err
	}
	release, err := s.models.Hold(name, "being timed")
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
	if same(s.models.ActiveModel(e.Kind), path) {
		return errorf(CodeConflict, "%s is the active %s model: its own figures are shown beside every timing", name, e.Kind)
	}
	st, err := os.Stat(path)
	if err != nil {
		return errorf(CodeNotFound, "no model file %s in the models folder", name)
	}
	s.adminLog(c, store.LevelInfo, name, "model timing started: %s %s", e.Kind, name)
	t, err := s.models.Time(c.Request().Context(), e.Kind, path)
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
	if err := s.models.PutTiming(name, t); err != nil {
		return err
	}
	s.adminLog(c, store.LevelInfo, name, "model timed: %s %s: turn %d ms (active %s: %d ms)", e.Kind, name, t.Candidate.TurnMS, t.Active.Model, t.Active.TurnMS)
	return c.JSON(http.StatusOK, t)
}
