package api

import (
	"context"
	"errors"
	"sync"

	"github.com/replyd/replyd/engine"
)

// errSuperseded is the cause a request's context is cancelled with when a
// newer request of the same API key and dialog_id arrives: engine's, which
// a live turn's committed pass knows it by (engine.LiveOutcome.Superseded).
var errSuperseded = engine.ErrSuperseded

// dialogFlights is the inference in flight for each API key and dialog_id,
// so that a newer request for a dialog cancels the older one: the partner
// spoke again, the old answer is of no use, and its work would only delay
// the new one. Requests without a dialog_id are never superseded, and one
// key's requests never cancel another key's.
//
// Which request is newer is decided by when it arrived (order), not by
// when it is recorded: a live turn (engine.LiveSession, through
// keyDialogs) is recorded only once it was heard to hold speech, and a turn that ended earlier but was heard later must not
// cancel the turn after it.
type dialogFlights struct {
	mu  sync.Mutex
	m   map[flightKey]*flight
	seq uint64 // the last order given out
}

type flightKey struct{ key, dialog string }

type flight struct {
	cancel context.CancelCauseFunc
	order  uint64
}

func newDialogFlights() *dialogFlights { return &dialogFlights{m: map[flightKey]*flight{}} }

// order returns the arrival number of a request: later requests get
// larger numbers.
func (d *dialogFlights) order() uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.seq++
	return d.seq
}

// start records a request of keyHash for dialog that arrives now (see
// startAt).
func (d *dialogFlights) start(keyHash, dialog string, cancel context.CancelCauseFunc) (end func()) {
	return d.startAt(keyHash, dialog, d.order(), cancel)
}

// startAt records the request of keyHash for dialog that arrived at order,
// cancelling the request recorded before it with errSuperseded, and
// returns the function that forgets it when it ends (unless a newer one
// took its place). When the request recorded is newer than this one, this
// one is cancelled instead.
func (d *dialogFlights) startAt(keyHash, dialog string, order uint64, cancel context.CancelCauseFunc) (end func()) {
	if dialog == "" {
		return func() {}
	}
	k := flightKey{keyHash, dialog}
	f := &flight{cancel: cancel, order: order}
	d.mu.Lock()
	old := d.m[k]
	if old != nil && old.order > order {
		d.mu.Unlock()
		cancel(errSuperseded)
		return func() {}
	}
	d.m[k] = f
	d.mu.Unlock()
	if old != nil {
		old.cancel(errSuperseded)
	}
	return func() {
		d.mu.Lock()
		if d.m[k] == f {
			delete(d.m, k)
		}
		d.mu.Unlock()
	}
}

// superseded reports whether ctx was cancelled because a newer request for
// its dialog arrived.
func superseded(ctx context.Context) bool {
	return errors.Is(context.Cause(ctx), errSuperseded)
}
