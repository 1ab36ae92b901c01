package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/replyd/replyd/engine"
	"github.com/replyd/replyd/engine/llm"
	"github.com/replyd/replyd/engine/slot"
	"github.com/replyd/replyd/engine/whisper"
	"github.com/replyd/replyd/models"
	"github.com/replyd/replyd/store"
)

// kindName is the engines' name (EngineStatus.Name) of a model kind of
// the models folder ("llm", "whisper"); "" for another.
func kindName(kind string) string {
	switch kind {
	case "llm":
		return "llm"
	case "whisper":
		return "stt"
	}
	return ""
}

// State implements models.Engines: kind's engine now, its model's path
// that of the one being loaded while it has none.
func (e *engines) State(kind string) models.EngineState {
	var st models.EngineState
	name := kindName(kind)
	if name == "" {
		return st
	}
	e.mu.RLock()
	ready := e.cpu != nil && e.log != nil
	st.LoadTook = e.loadTook[name]
	pend := e.pend[name].Model
	e.mu.RUnlock()
	var loaded bool
	if name == "llm" {
		// The language model's backend: its memory is the GPU's unless "cpu".
		loaded = e.llm.Peek(func(m *llm.Engine) { st.Model, st.GPU = m.Status().Model, m.Status().Backend != "cpu" })
	} else {
		loaded = e.stt.Peek(func(m *whisper.Model) { st.Model = m.Status().Model })
	}
	if !loaded {
		st.Model = pend
	}
	st.Ready = loaded && ready
	return st
}

// Switch implements models.Engines: models.SwitchSlot on kind's slot.
func (e *engines) Switch(kind, mode, path, old string, expect time.Duration) error {
	name := kindName(kind)
	st := slotStatus{e, name}
	switch name {
	case "llm":
		return models.SwitchSlot(&e.llm, e.openLM, st, e.log, name, mode, path, old, expect)
	case "stt":
		return models.SwitchSlot(&e.stt, e.openSTT, st, e.log, name, mode, path, old, expect)
	}
	return fmt.Errorf("%w: kind %q: want llm or whisper", models.ErrUnusable, kind)
}

// slotStatus is engine name's status while a switch empties its slot
// (models.SlotStatus): what /healthz shows.
type slotStatus struct {
	e    *engines
	name string
}

func (s slotStatus) Loading(path string) {
	s.e.setPending(engine.EngineStatus{Name: s.name, Model: path, Demo: isDemoModel(path)})
}

func (s slotStatus) Down(err error) { s.e.setError(s.name, err) }

func (s slotStatus) Loaded(took time.Duration) {
	s.e.mu.Lock()
	delete(s.e.pend, s.name)
	if took > 0 {
		s.e.loadTook[s.name] = took
	}
	s.e.mu.Unlock()
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

// setPending sets the status shown for an engine while it has no model.
func (e *engines) setPending(st engine.EngineStatus) {
	e.mu.Lock()
	e.pend[st.Name] = st
	e.mu.Unlock()
}

// unloaded is the engine error of a request that found engine name's slot
// without a model (err, from slot.Acquire): KindLoading while a switch has
// unloaded it, KindModelUnavailable once its model failed to load (at start,
// or a failed switch that could not reload the old one: retrying will not
// help until an administrator activates a model that loads), KindNotReady
// while it is still loading at start.
func (e *engines) unloaded(name string, err error) error {
	what := "language model"
	if name == "stt" {
		what = "speech-to-text model"
	}
	var sw *slot.SwappingError
	if errors.As(err, &sw) {
		retry := max(time.Until(sw.Until), time.Second)
		return &engine.Error{Kind: engine.KindLoading, RetryAfter: retry,
			Message: fmt.Sprintf("the %s is being switched; retry in %d s", what, int64((retry+time.Second-1)/time.Second))}
	}
	e.mu.RLock()
	failed := e.pend[name].Error
	e.mu.RUnlock()
	if failed != "" {
		return &engine.Error{Kind: engine.KindModelUnavailable, Err: errors.New(failed),
			Message: "the " + what + " failed to load and none is loaded; an administrator must activate a working model (the admin page's Models view)"}
	}
	return &engine.Error{Kind: engine.KindNotReady, Message: "the " + what + " is still loading; retry shortly"}
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
