package models

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/replyd/replyd/engine/slot"
	"github.com/replyd/replyd/models/modelfile"
)

// model is a loaded model of a test: the file it came from.
type model struct {
	path   string
	closed bool
}

func (m *model) Close() error { m.closed = true; return nil }

// opens opens every path but those of fail, which fail with a reason.
func opens(fail ...string) func(string) (*model, error) {
	return func(p string) (*model, error) {
		for _, f := range fail {
			if p == f {
				return nil, fmt.Errorf("cannot load %s: bad tensor", filepath.Base(p))
			}
		}
		return &model{path: p}, nil
	}
}

// statusLog records what SwitchSlot shows of an engine.
type statusLog struct {
	mu     sync.Mutex
	events []string
}

func (s *statusLog) add(e string)        { s.mu.Lock(); s.events = append(s.events, e); s.mu.Unlock() }
func (s *statusLog) Loading(path string) { s.add("loading " + path) }
func (s *statusLog) Down(err error)      { s.add("down: " + err.Error()) }
func (s *statusLog) Loaded(took time.Duration) {
	if took > 0 {
		s.add("loaded, timed")
	} else {
		s.add("loaded")
	}
}

func (s *statusLog) String() string { return strings.Join(s.events, "; ") }

// current is the path of the slot's model, "" when it is empty.
func current(t *testing.T, s *slot.Slot[*model]) string {
	t.Helper()
	m, release, err := s.Acquire()
	if err != nil {
		return ""
	}
	defer release()
	return m.path
}

var quiet = slog.New(slog.DiscardHandler)

// TestSwitchSlot: the new model serves after a switch beside or after
// freeing the old one, and the status shows the one being loaded.
func TestSwitchSlot(t *testing.T) {
	for _, mode := range []string{"beside", "swap"} {
		var s slot.Slot[*model]
		old := &model{path: "old.gguf"}
		s.Put(old)
		var st statusLog
		if err := SwitchSlot(&s, opens(), &st, quiet, "llm", mode, "new.gguf", "old.gguf", time.Second); err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
		want := "loaded, timed"
		if mode == "swap" {
			want = "loading new.gguf; loaded, timed"
		}
		if got := current(t, &s); got != "new.gguf" || !old.closed || st.String() != want {
			t.Errorf("%s: serving %q, old closed %v, status %q; want new.gguf, closed, %q", mode, got, old.closed, st.String(), want)
		}
	}
}

// TestSwitchSlotFailures: the swap's failure paths. A new model that
// fails beside the old one leaves the old one serving, untouched; after
// freeing the old one, the old one is loaded again; when that fails too,
// the engine is down, its status says why, and the error names both.
func TestSwitchSlotFailures(t *testing.T) {
	t.Run("beside", func(t *testing.T) {
		var s slot.Slot[*model]
		old := &model{path: "old.gguf"}
		s.Put(old)
		var st statusLog
		err := SwitchSlot(&s, opens("new.gguf"), &st, quiet, "llm", "beside", "new.gguf", "old.gguf", time.Second)
		if !errors.Is(err, ErrUnusable) || err.Error() != "the model cannot be used: cannot load new.gguf: bad tensor" {
			t.Errorf("error %v", err)
		}
		if got := current(t, &s); got != "old.gguf" || old.closed || st.String() != "loaded" {
			t.Errorf("serving %q, old closed %v, status %q", got, old.closed, st.String())
		}
	})
	t.Run("old reloaded", func(t *testing.T) {
		var s slot.Slot[*model]
		old := &model{path: "old.gguf"}
		s.Put(old)
		var st statusLog
		err := SwitchSlot(&s, opens("new.gguf"), &st, quiet, "stt", "swap", "new.gguf", "old.gguf", time.Second)
		if !errors.Is(err, ErrUnusable) || err.Error() != "the model cannot be used: cannot load new.gguf: bad tensor" {
			t.Errorf("error %v", err)
		}
		if got := current(t, &s); got != "old.gguf" || !old.closed || st.String() != "loading new.gguf; loading old.gguf; loaded, timed" {
			t.Errorf("serving %q (a new instance), old closed %v, status %q", got, old.closed, st.String())
		}
	})
	t.Run("engine down", func(t *testing.T) {
		var s slot.Slot[*model]
		s.Put(&model{path: "old.gguf"})
		var st statusLog
		err := SwitchSlot(&s, opens("new.gguf", "old.gguf"), &st, quiet, "llm", "swap", "new.gguf", "old.gguf", time.Second)
		if !errors.Is(err, ErrUnusable) || !strings.Contains(err.Error(), "cannot load new.gguf: bad tensor") ||
			!strings.Contains(err.Error(), "reloading old.gguf: cannot load old.gguf: bad tensor") {
			t.Errorf("error %v", err)
		}
		if _, _, err := s.Acquire(); !errors.Is(err, slot.ErrEmpty) {
			t.Errorf("acquire after both failed: %v, want slot.ErrEmpty", err)
		}
		if st.String() != "loading new.gguf; loading old.gguf; down: cannot load old.gguf: bad tensor" {
			t.Errorf("status %q", st.String())
		}
	})
}

// fakeEngines are engines for the Service's actions: a switch records
// its call and makes the path current.
type fakeEngines struct {
	mu     sync.Mutex
	state  map[string]EngineState
	calls  []string
	err    error
	during func() // called inside Switch, the action held
}

func (f *fakeEngines) State(kind string) EngineState {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.state[kind]
}

func (f *fakeEngines) Switch(kind, mode, path, old string, expect time.Duration) error {
	if f.during != nil {
		f.during()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, fmt.Sprintf("%s %s %s (was %s), expect %v", kind, mode, filepath.Base(path), filepath.Base(old), expect))
	if f.err != nil {
		return f.err
	}
	st := f.state[kind]
	st.Model = path
	f.state[kind] = st
	return nil
}

// TestServiceSwitch: the Service plans a switch from the file's size and
// the memory available, gives the engines the expected load time, and
// runs one model action at a time.
func TestServiceSwitch(t *testing.T) {
	dir := t.TempDir()
	oldPath, newPath := filepath.Join(dir, "old.gguf"), filepath.Join(dir, "new.gguf")
	mustWrite(t, dir, "old.gguf", make([]byte, 1000))
	mustWrite(t, dir, "new.gguf", make([]byte, 3000))
	eng := &fakeEngines{state: map[string]EngineState{"llm": {Ready: true, Model: oldPath, LoadTook: 2 * time.Second}}}
	avail := int64(1 << 30)
	s := NewService(ServiceOptions{Engines: eng, MemAvailable: func() (int64, error) { return avail, nil }})
	if !s.CanSwitch() || s.CanTime() || s.CanCompare() {
		t.Errorf("can switch %v, time %v, compare %v; want only switch", s.CanSwitch(), s.CanTime(), s.CanCompare())
	}
	ctx := context.Background()
	res, err := s.Switch(ctx, SwitchRequest{Kind: "llm", Path: newPath})
	if err != nil {
		t.Fatal(err)
	}
	need := int64(3000 + 3000/4 + SwitchHeadroom)
	if res.Mode != "beside" || res.Previous != oldPath || res.BytesNeeded != need || res.BytesAvailable != avail ||
		res.Reason != fmt.Sprintf("the new model needs about %d MiB and 1024 MiB are available: it loads beside the old one", need>>20) {
		t.Errorf("switch %+v", res)
	}
	// The expected load time scales the last one by the files' sizes.
	if len(eng.calls) != 1 || eng.calls[0] != "llm beside new.gguf (was old.gguf), expect 6s" {
		t.Errorf("calls %q", eng.calls)
	}
	if got := s.ActiveModel("llm"); got != newPath {
		t.Errorf("active %q", got)
	}

	// Too little memory for mode beside: ErrNoRoom, nothing switched.
	avail = 10 << 20
	if _, err := s.Switch(ctx, SwitchRequest{Kind: "llm", Path: oldPath, Mode: "beside"}); !errors.Is(err, ErrNoRoom) {
		t.Errorf("beside without room: %v", err)
	}
	// A missing file, an unknown kind.
	if _, err := s.Switch(ctx, SwitchRequest{Kind: "llm", Path: filepath.Join(dir, "gone.gguf")}); !errors.Is(err, modelfile.ErrNotFound) {
		t.Errorf("missing file: %v", err)
	}
	if _, err := s.Switch(ctx, SwitchRequest{Kind: "vad", Path: oldPath}); !errors.Is(err, ErrUnusable) {
		t.Errorf("kind vad: %v", err)
	}
	// One action at a time: a switch meanwhile, or a timing, is ErrBusy.
	eng.during = func() {
		if _, err := s.Switch(ctx, SwitchRequest{Kind: "llm", Path: newPath}); !errors.Is(err, ErrBusy) {
			t.Errorf("a second switch meanwhile: %v", err)
		}
	}
	if _, err := s.Switch(ctx, SwitchRequest{Kind: "llm", Path: oldPath, Mode: "swap"}); err != nil {
		t.Fatal(err)
	}
	eng.during = nil
	if len(eng.calls) != 2 || eng.calls[1] != "llm swap old.gguf (was new.gguf), expect 2s" {
		t.Errorf("calls %q", eng.calls)
	}
	// The engines' error is the switch's.
	eng.err = fmt.Errorf("%w: cannot load", ErrUnusable)
	if _, err := s.Switch(ctx, SwitchRequest{Kind: "llm", Path: newPath, Mode: "swap"}); !errors.Is(err, ErrUnusable) {
		t.Errorf("failed load: %v", err)
	}
	// An engine still loading at start.
	eng.err = nil
	eng.state["whisper"] = EngineState{Model: oldPath}
	if _, err := s.Switch(ctx, SwitchRequest{Kind: "whisper", Path: newPath}); !errors.Is(err, ErrBusy) || !strings.Contains(err.Error(), "still loading") {
		t.Errorf("loading engine: %v", err)
	}
	// Without engines, nothing can be switched.
	none := NewService(ServiceOptions{})
	if _, err := none.Switch(ctx, SwitchRequest{Kind: "llm", Path: newPath}); !errors.Is(err, ErrNotSupported) || none.ActiveModel("llm") != "" {
		t.Errorf("no engines: %v", err)
	}
	if _, err := os.Stat(newPath); err != nil {
		t.Fatal(err)
	}
}
