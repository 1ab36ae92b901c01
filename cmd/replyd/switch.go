package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/replyd/replyd/engine"
	"github.com/replyd/replyd/engine/llm"
	"github.com/replyd/replyd/engine/modelfile"
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
	switch {
	case name == "llm" && e.llm != nil:
		return e.llm.Status().Model
	case name == "stt" && e.stt != nil:
		return e.stt.Status().Model
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
	ready := e.cpu != nil && e.log != nil && (a.name == "llm" && e.llm != nil || a.name == "stt" && e.stt != nil)
	// The language model's backend: its memory is the GPU's unless "cpu".
	a.gpu = a.name == "llm" && ready && e.llm.Status().Backend != "cpu"
	a.took = e.loadTook[a.name]
	e.mu.RUnlock()
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
	if out.Mode == "beside" {
		err = e.switchBeside(name, req.Path)
	} else {
		err = e.switchSwap(name, req.Path, old, expect)
	}
	out.LoadMS = time.Since(t0).Milliseconds()
	if err != nil {
		return out, err
	}
	e.log.Info("model switched", "engine", name, "model", req.Path, "previous", old, "mode", out.Mode, "ms", out.LoadMS,
		"bytes_needed", out.BytesNeeded, "bytes_available", out.BytesAvailable)
	return out, nil
}

// open loads the model of engine name at path, warm.
func (e *engines) open(name, path string) (llmEng *llm.Engine, stt *whisper.Model, err error) {
	if name == "llm" {
		llmEng, err = openLLM(e.cfg, path, e.cpu, e.log)
		return llmEng, nil, err
	}
	stt, err = openWhisper(e.cfg, path, e.log)
	if err == nil {
		// Warm it: the first transcription touches every weight once.
		_, _ = stt.Transcribe(context.Background(), make([]float32, 16000), engine.TranscribeOptions{})
	}
	return nil, stt, err
}

// swapIn makes the loaded model current and returns the one it replaced
// with the group of requests still using it.
func (e *engines) swapIn(name string, lm *llm.Engine, stt *whisper.Model, took time.Duration) (oldLLM *llm.Engine, oldSTT *whisper.Model, use *sync.WaitGroup) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.swapping, name)
	delete(e.pend, name)
	e.loadTook[name] = took
	if name == "llm" {
		oldLLM, use = e.llm, e.llmUse
		e.llm, e.llmUse = lm, new(sync.WaitGroup)
		return oldLLM, nil, use
	}
	oldSTT, use = e.stt, e.sttUse
	e.stt, e.sttUse = stt, new(sync.WaitGroup)
	return nil, oldSTT, use
}

// free closes a model replaced by a switch once the requests using it are
// done.
func free(lm *llm.Engine, stt *whisper.Model, use *sync.WaitGroup) {
	if use != nil {
		use.Wait()
	}
	if lm != nil {
		_ = lm.Close()
	}
	if stt != nil {
		_ = stt.Close()
	}
}

func (e *engines) switchBeside(name, path string) error {
	t0 := time.Now()
	lm, stt, err := e.open(name, path)
	if err != nil {
		return loadError(name, err)
	}
	free(e.swapIn(name, lm, stt, time.Since(t0)))
	return nil
}

func (e *engines) switchSwap(name, path, old string, expect time.Duration) error {
	e.mu.Lock()
	e.swapping[name] = time.Now().Add(expect)
	st := engine.EngineStatus{Name: name, Model: path, Demo: isDemoModel(path)}
	var oldLLM *llm.Engine
	var oldSTT *whisper.Model
	var use *sync.WaitGroup
	if name == "llm" {
		oldLLM, use = e.llm, e.llmUse
		e.llm, e.llmUse = nil, new(sync.WaitGroup)
	} else {
		oldSTT, use = e.stt, e.sttUse
		e.stt, e.sttUse = nil, new(sync.WaitGroup)
	}
	e.pend[name] = st
	e.mu.Unlock()
	free(oldLLM, oldSTT, use)

	t0 := time.Now()
	lm, stt, err := e.open(name, path)
	if err == nil {
		e.swapIn(name, lm, stt, time.Since(t0))
		return nil
	}
	// Back to the old model, so that the box keeps answering.
	e.log.Warn("the new model failed to load: reloading the old one", "engine", name, "model", path, "error", err.Error(), "old", old)
	e.mu.Lock()
	e.pend[name] = engine.EngineStatus{Name: name, Model: old, Demo: isDemoModel(old)}
	e.mu.Unlock()
	t1 := time.Now()
	lm, stt, rerr := e.open(name, old)
	if rerr != nil {
		e.mu.Lock()
		delete(e.swapping, name)
		st := e.pend[name]
		st.Error = rerr.Error()
		e.pend[name] = st
		e.mu.Unlock()
		e.log.Error("the old model failed to load again: the engine is down", "engine", name, "model", old, "error", rerr.Error())
		return errors.Join(loadError(name, err), fmt.Errorf("reloading %s: %w", filepath.Base(old), rerr))
	}
	e.swapIn(name, lm, stt, time.Since(t1))
	return loadError(name, err)
}

// loadError marks a model that failed to load as the admin's mistake.
func loadError(name string, err error) error {
	return fmt.Errorf("%w: %v", models.ErrUnusable, err)
}

// loadingLocked returns the KindLoading error of engine name while a switch
// has unloaded it, nil otherwise. e.mu must be held.
func (e *engines) loadingLocked(name string) error {
	until, ok := e.swapping[name]
	if !ok {
		return nil
	}
	retry := max(time.Until(until), time.Second)
	what := "language model"
	if name == "stt" {
		what = "speech-to-text model"
	}
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
