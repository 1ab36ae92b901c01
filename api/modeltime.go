package api

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/replyd/replyd/models"
	"github.com/replyd/replyd/store"
)

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
			models.Timing
			ModTime time.Time `json:"mod_time"`
		}
		if err == nil {
			err = json.Unmarshal(b, &t)
		}
		if err == nil {
			t.Timing.ModTime = t.ModTime
			err = s.putTiming(name, t.Timing)
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
func (s *Server) putTiming(name string, t models.Timing) error {
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
	timings     map[string]*models.Timing
	comparisons map[string]*models.Comparison
}

// readModelRecords reads this box's records; stat gives a file's state
// now (nil: gone).
func (s *Server) readModelRecords(stat func(name string) os.FileInfo) (modelRecords, error) {
	out := modelRecords{timings: map[string]*models.Timing{}, comparisons: map[string]*models.Comparison{}}
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
			var t models.Timing
			if json.Unmarshal(r.Body, &t) == nil {
				t.Bytes, t.ModTime = r.Bytes, r.ModTime
				out.timings[r.File] = &t
			}
		case store.ModelComparison:
			var c models.Comparison
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
	tm, ok := s.health.(models.Timer)
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
	if sw, ok := s.health.(models.Switcher); ok && same(sw.ActiveModel(e.Kind), path) {
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
