package models

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/replyd/replyd/models/modelfile"
)

// CanSwitch is whether this box can switch models while it runs
// (ServiceOptions.Engines is set): without, a switch is ErrNotSupported.
func (s *Service) CanSwitch() bool { return s.engines != nil }

// CanTime is whether this box can time models (the engines, both engines'
// models and the scheduler are set).
func (s *Service) CanTime() bool {
	return s.engines != nil && s.llm != nil && s.stt != nil && s.cpu != nil
}

// CanCompare is whether this box can compare language models (the
// engines, the language models and the scheduler are set).
func (s *Service) CanCompare() bool { return s.engines != nil && s.llm != nil && s.cpu != nil }

// ErrNotSupported: this box cannot run the model action (CanSwitch,
// CanTime, CanCompare).
var ErrNotSupported = errors.New("this server cannot run model actions while it runs")

// ActiveModel returns the path of kind's model now, or of the one being
// loaded ("" for an unknown kind, or when the box has no engines).
func (s *Service) ActiveModel(kind string) string {
	if _, err := engineName(kind); err != nil || s.engines == nil {
		return ""
	}
	return s.engines.State(kind).Model
}

// action is where a model action (a switch, a timing, a comparison)
// starts from: the engine it concerns, the file's size and the engine's
// state, and the memory available now.
type action struct {
	name     string // "llm" or "stt"
	size     int64
	state    EngineState
	avail    int64
	availErr error
}

// plan is PlanSwitch's decision for this action in mode.
func (a action) plan(mode string) (Switch, error) {
	return PlanSwitch(mode, a.size, HeadroomFor(a.name), a.avail, a.availErr, a.state.GPU)
}

// beginAction starts a model action on kind's engine with the file path:
// it takes the Service's one model action (one switch, timing or
// comparison at a time: ErrBusy), checks that the engine has loaded
// (ErrBusy too) and that the file is there (modelfile.ErrNotFound: 404;
// unreadable: ErrUnusable), and reads the memory available. On success
// the caller holds the action and calls release when it ends.
func (s *Service) beginAction(kind, path string) (a action, release func(), err error) {
	if a.name, err = engineName(kind); err != nil {
		return a, nil, err
	}
	s.mu.Lock()
	if s.acting {
		s.mu.Unlock()
		return a, nil, ErrBusy
	}
	s.acting = true
	s.mu.Unlock()
	release = func() {
		s.mu.Lock()
		s.acting = false
		s.mu.Unlock()
	}
	a.state = s.engines.State(kind)
	if !a.state.Ready {
		release()
		return a, nil, fmt.Errorf("%w: the %s model is still loading", ErrBusy, kind)
	}
	st, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		release()
		return a, nil, fmt.Errorf("%w: %s", modelfile.ErrNotFound, filepath.Base(path))
	}
	if err != nil {
		release()
		return a, nil, fmt.Errorf("%w: %s: %v", ErrUnusable, filepath.Base(path), err)
	}
	a.size = st.Size()
	a.avail, a.availErr = s.memAvailable()
	return a, release, nil
}

// Switch switches the model an engine uses while the server runs: it loads
// the model file req.Path for engine req.Kind ("llm" or "whisper") and
// makes it the one new requests use; requests already running finish on
// the old one, which is freed after them. With room for both, the new
// model loads (and warms up) beside the old one while the old one serves;
// without, new requests get KindLoading (503 loading, Retry-After the
// expected load time) from the moment the switch starts, the requests
// running on the old model finish, it is freed, and the new one loads. A
// new model that fails to load leaves the old one in use (reloaded, in the
// second case). It returns once the new model serves, or failed to load.
// Errors wrap ErrBusy, ErrNoRoom, ErrUnusable or ErrNotSupported; anything
// else is internal.
func (s *Service) Switch(ctx context.Context, req SwitchRequest) (Switch, error) {
	if !s.CanSwitch() {
		return Switch{}, ErrNotSupported
	}
	a, release, err := s.beginAction(req.Kind, req.Path)
	if err != nil {
		return Switch{}, err
	}
	defer release()
	old := a.state.Model
	if abs, err := filepath.Abs(old); err == nil {
		old = abs
	}
	out := Switch{Kind: req.Kind, Model: req.Path, Previous: old}
	plan, err := a.plan(req.Mode)
	out.Mode, out.Reason, out.BytesNeeded, out.BytesAvailable = plan.Mode, plan.Reason, plan.BytesNeeded, plan.BytesAvailable
	if err != nil {
		return out, err
	}
	// The expected load time: the last load of this engine, scaled by the
	// files' sizes.
	took := a.state.LoadTook
	expect := took
	if ost, err := os.Stat(old); err == nil && ost.Size() > 0 && a.size > ost.Size() {
		expect = time.Duration(float64(took) * float64(a.size) / float64(ost.Size()))
	}
	t0 := s.now()
	err = s.engines.Switch(req.Kind, out.Mode, req.Path, old, expect)
	out.LoadMS = s.now().Sub(t0).Milliseconds()
	if err != nil {
		return out, err
	}
	s.log.Info("model switched", "engine", a.name, "model", req.Path, "previous", old, "mode", out.Mode, "ms", out.LoadMS,
		"bytes_needed", out.BytesNeeded, "bytes_available", out.BytesAvailable)
	return out, nil
}
