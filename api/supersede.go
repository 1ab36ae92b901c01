package api

import (
	"context"
	"errors"
	"sync"
)

// errSuperseded is the cause a request's context is cancelled with when a
// newer request of the same API key and dialog_id arrives.
var errSuperseded = errors.New("superseded by a newer request for the same dialog_id")

// dialogFlights is the inference in flight for each API key and dialog_id,
// so that a newer request for a dialog cancels the older one: the partner
// spoke again, the old answer is of no use, and its work would only delay
// the new one. Requests without a dialog_id are never superseded, and one
// key's requests never cancel another key's.
type dialogFlights struct {
	mu sync.Mutex
	m  map[flightKey]*flight
}

type flightKey struct{ key, dialog string }

type flight struct{ cancel context.CancelCauseFunc }

func newDialogFlights() *dialogFlights { return &dialogFlights{m: map[flightKey]*flight{}} }

// start records the request of keyHash for dialog, cancelling the request
// recorded before it with errSuperseded, and returns the function that
// forgets it when it ends (unless a newer one took its place).
func (d *dialogFlights) start(keyHash, dialog string, cancel context.CancelCauseFunc) (end func()) {
	if dialog == "" {
		return func() {}
	}
	k := flightKey{keyHash, dialog}
	f := &flight{cancel: cancel}
	d.mu.Lock()
	old := d.m[k]
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
