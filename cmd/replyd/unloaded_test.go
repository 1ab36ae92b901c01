package main

import (
	"errors"
	"testing"
	"time"

	"github.com/replyd/replyd/engine"
	"github.com/replyd/replyd/engine/slot"
)

// TestUnloaded: a request that finds a slot empty is told to retry while the
// model loads or is being switched, and is told that retrying will not help
// once the model failed to load (at start, or a failed switch that could not
// reload the old one), never "still loading" forever.
func TestUnloaded(t *testing.T) {
	e := newEngines(&Config{})
	if err := e.unloaded("llm", slot.ErrEmpty); engine.KindOf(err) != engine.KindNotReady {
		t.Errorf("loading at start: %v, want KindNotReady", err)
	}
	sw := &slot.SwappingError{Until: time.Now().Add(3 * time.Second)}
	var ee *engine.Error
	if err := e.unloaded("llm", sw); !errors.As(err, &ee) || ee.Kind != engine.KindLoading || ee.RetryAfter <= 0 {
		t.Errorf("being switched: %v, want KindLoading with a Retry-After", err)
	}
	e.setError("llm", errors.New("missing tensor 'output_norm.weight'"))
	if err := e.unloaded("llm", slot.ErrEmpty); engine.KindOf(err) != engine.KindModelUnavailable {
		t.Errorf("failed to load: %v, want KindModelUnavailable", err)
	}
	if err := e.unloaded("llm", sw); engine.KindOf(err) != engine.KindLoading {
		t.Errorf("a new switch after a failure: %v, want KindLoading", err)
	}
	if err := e.unloaded("stt", slot.ErrEmpty); engine.KindOf(err) != engine.KindNotReady {
		t.Errorf("the other engine, still loading: %v, want KindNotReady", err)
	}
}
