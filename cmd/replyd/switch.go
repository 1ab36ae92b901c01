package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/replyd/replyd/engine"
	"github.com/replyd/replyd/engine/llm"
	"github.com/replyd/replyd/engine/modelfile"
	"github.com/replyd/replyd/engine/slot"
	"github.com/replyd/replyd/engine/whisper"
	"github.com/replyd/replyd/models"
	"github.com/replyd/replyd/store"
)

// engineName is the engines' name (EngineStatus.Name) of a model kind of
// the models folder ("llm", "whisper").
func engineName(kind string) (string, error) {
	switch kind {
	case "llm":
		return "llm", nil
	case "whisper":
		return "stt", nil
	}
	return "", fmt.Errorf("%w: kind %q: want llm or whisper", models.ErrUnusable, kind)
}

// ActiveModel implements models.Switcher: the path of kind's model now,
// or of the one being loaded.
func (e *engines) ActiveModel(kind string) string {
	name, err := engineName(kind)
	if err != nil {
		return ""
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	var path string
	if name == "llm" && e.llm.Peek(func(m *llm.Engine) { path = m.Status().Model }) ||
		name == "stt" && e.stt.Peek(func(m *whisper.Model) { path = m.Status().Model }) {
		return path
	}
	return e.pend[name].Model
}

// modelAction is where a model action (a switch, a timing, a comparison)
// starts from: the engine it concerns, the file's size, whether the engine
// is on a GPU, its last load time and the memory available now.
type modelAction struct {
	name     string // "llm" or "stt"
	size     int64
	gpu      bool
	took     time.Duration
	avail    int64
	availErr error
}

// plan is models.PlanSwitch's decision for this action in mode.
func (a modelAction) plan(mode string) (models.Switch, error) {
	return models.PlanSwitch(mode, a.size, models.HeadroomFor(a.name), a.avail, a.availErr, a.gpu)
}

// beginModelAction starts a model action on kind's engine with the file
// path: it takes the engines' model lock (one switch, timing or comparison
// at a time: models.ErrBusy), checks that the engine has loaded
// (models.ErrBusy too) and that the file is there (modelfile.ErrNotFound:
// 404; unreadable: models.ErrUnusable), and reads the memory available. On success the
// caller holds the lock and calls release when the action ends.
func (e *engines) beginModelAction(kind, path string) (a modelAction, release func(), err error) {
	if a.name, err = engineName(kind); err != nil {
		return a, nil, err
	}
	if !e.switchMu.TryLock() {
		return a, nil, models.ErrBusy
	}
	e.mu.RLock()
	ready := e.cpu != nil && e.log != nil
	a.took = e.loadTook[a.name]
	e.mu.RUnlock()
	if a.name == "llm" {
		// The language model's backend: its memory is the GPU's unless "cpu".
		ready = e.llm.Peek(func(m *llm.Engine) { a.gpu = m.Status().Backend != "cpu" }) && ready
	} else {
		ready = e.stt.Peek(func(*whisper.Model) {}) && ready
	}
	if !ready {
		e.switchMu.Unlock()
		return a, nil, fmt.Errorf("%w: the %s model is still loading", models.ErrBusy, kind)
	}
	st, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		e.switchMu.Unlock()
		return a, nil, fmt.Errorf("%w: %s", modelfile.ErrNotFound, filepath.Base(path))
	}
	if err != nil {
		e.switchMu.Unlock()
		return a, nil, fmt.Errorf("%w: %s: %v", models.ErrUnusable, filepath.Base(path), err)
	}
	a.size = st.Size()
	a.avail, a.availErr = models.MemAvailable()
	return a, e.switchMu.Unlock, nil
}

// SwitchModel implements models.Switcher. With room for both, the new
// model loads (and warms up) beside the old one while the old one serves;
// then new requests go to the new one, the requests still running on the
// old one finish there, and the old one is freed. Without room, new
// requests get KindLoading (503 loading, Retry-After the expected load
// time) from the moment the switch starts; the requests running on the old
// model finish, it is freed, and the new one loads. A new model that fails
// to load leaves the old one in use (reloaded, in the second case).
func (e *engines) SwitchModel(ctx context.Context, req models.SwitchRequest) (models.Switch, error) {
	a, release, err := e.beginModelAction(req.Kind, req.Path)
	if err != nil {
		return models.Switch{}, err
	}
	defer release()
	name, took := a.name, a.took
	old := e.ActiveModel(req.Kind)
	if abs, err := filepath.Abs(old); err == nil {
		old = abs
	}
	out := models.Switch{Kind: req.Kind, Model: req.Path, Previous: old}
	plan, err := a.plan(req.Mode)
	out.Mode, out.Reason, out.BytesNeeded, out.BytesAvailable = plan.Mode, plan.Reason, plan.BytesNeeded, plan.BytesAvailable
	if err != nil {
		return out, err
	}

	// The expected load time: the last load of this engine, scaled by the
	// files' sizes.
	expect := took
	if ost, err := os.Stat(old); err == nil && ost.Size() > 0 && a.size > ost.Size() {
		expect = time.Duration(float64(took) * float64(a.size) / float64(ost.Size()))
	}
	t0 := time.Now()
	if name == "llm" {
		err = switchSlot(e, name, &e.llm, e.openLM, out.Mode, req.Path, old, expect)
	} else {
		err = switchSlot(e, name, &e.stt, e.openSTT, out.Mode, req.Path, old, expect)
	}
	out.LoadMS = time.Since(t0).Milliseconds()
	if err != nil {
		return out, err
	}
	e.log.Info("model switched", "engine", name, "model", req.Path, "previous", old, "mode", out.Mode, "ms", out.LoadMS,
		"bytes_needed", out.BytesNeeded, "bytes_available", out.BytesAvailable)
	return out, nil
}

// openLM loads the language model at path, warm.
func (e *engines) openLM(path string) (*llm.Engine, error) {
	return openLLM(e.cfg, path, e.cpu, e.log)
}

// openSTT loads the Whisper model at path and warms it: the first
// transcription touches every weight once.
func (e *engines) openSTT(path string) (*whisper.Model, error) {
	stt, err := openWhisper(e.cfg, path, e.shortWindow(path), e.log)
	if err == nil {
		_, _ = stt.Transcribe(context.Background(), make([]float32, 16000), engine.TranscribeOptions{})
	}
	return stt, err
}

// switchSlot switches engine name's slot s to the model file path with open
// (warm): mode "beside" loads it while the old one serves; "swap" frees the
// old one (old, its path) first, requests meanwhile getting KindLoading
// with the expected load time (expect), and loads the old one again when
// the new one fails, so that the box keeps answering. Only when that fails
// too is the engine down: its status then says why.
func switchSlot[M slot.Model](e *engines, name string, s *slot.Slot[M], open func(string) (M, error), mode, path, old string, expect time.Duration) error {
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
		// Shown while the slot is empty.
		e.setPending(engine.EngineStatus{Name: name, Model: path, Demo: isDemoModel(path)})
		err = s.Swap(expect, func() (M, error) { return timed(path) }, func() (M, error) {
			e.log.Warn("the new model failed to load: reloading the old one", "engine", name, "model", path, "error", failed.Error(), "old", old)
			e.setPending(engine.EngineStatus{Name: name, Model: old, Demo: isDemoModel(old)})
			return timed(old)
		})
	}
	var se *slot.Error
	if errors.As(err, &se) && se.Old != nil {
		e.setError(name, se.Old)
		e.log.Error("the old model failed to load again: the engine is down", "engine", name, "model", old, "error", se.Old.Error())
		return errors.Join(loadError(name, se.New), fmt.Errorf("reloading %s: %w", filepath.Base(old), se.Old))
	}
	if err != nil && se == nil {
		return err
	}
	// The new model, the old one again, or (Beside failed) the old one
	// untouched serves.
	e.mu.Lock()
	delete(e.pend, name)
	if took > 0 {
		e.loadTook[name] = took
	}
	e.mu.Unlock()
	if se != nil {
		return loadError(name, se.New)
	}
	return nil
}

// setPending sets the status shown for an engine while it has no model.
func (e *engines) setPending(st engine.EngineStatus) {
	e.mu.Lock()
	e.pend[st.Name] = st
	e.mu.Unlock()
}

// loadError marks a model that failed to load as the admin's mistake.
func loadError(name string, err error) error {
	return fmt.Errorf("%w: %v", models.ErrUnusable, err)
}

// unloaded is the engine error of a request that found engine name's slot
// without a model (err, from slot.Acquire): KindLoading while a switch has
// unloaded it, KindNotReady otherwise (loading at start, or down after a
// failed switch).
func unloaded(name string, err error) error {
	what := "language model"
	if name == "stt" {
		what = "speech-to-text model"
	}
	var sw *slot.SwappingError
	if !errors.As(err, &sw) {
		return &engine.Error{Kind: engine.KindNotReady, Message: "the " + what + " is still loading; retry shortly"}
	}
	retry := max(time.Until(sw.Until), time.Second)
	return &engine.Error{Kind: engine.KindLoading, RetryAfter: retry,
		Message: fmt.Sprintf("the %s is being switched; retry in %d s", what, int64((retry+time.Second-1)/time.Second))}
}

// chosenModels makes the models this box chose on the admin page (stored
// per box: store.ModelChoice) the ones to load, in place of
// REPLYD_LLM_MODEL and REPLYD_WHISPER_MODEL, which are the first start's
// default only. A chosen file that is gone, or a store that cannot be read,
// leaves the configured one, with a warning.
func chosenModels(db store.Store, cfg *Config, log *slog.Logger) {
	cs, err := db.ModelChoices()
	if err != nil {
		log.Warn("the models chosen on the admin page could not be read: loading the configured ones", "error", err.Error())
		return
	}
	for _, c := range cs {
		if c.Node != cfg.NodeName {
			continue
		}
		var dst *string
		switch c.Kind {
		case "llm":
			dst = &cfg.LLMModel
		case "whisper":
			dst = &cfg.WhisperModel
		default:
			continue
		}
		if _, err := os.Stat(c.Model); err != nil {
			log.Warn("the model chosen on the admin page is gone: loading the configured one", "kind", c.Kind, "model", c.Model, "configured", *dst, "error", err.Error())
			continue
		}
		if *dst != c.Model {
			log.Info("loading the model chosen on the admin page", "kind", c.Kind, "model", c.Model, "configured", *dst, "chosen_at", c.At.UTC().Format(time.RFC3339))
			*dst = c.Model
		}
	}
}
