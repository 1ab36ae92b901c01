// Package slot holds the model one engine serves with while the server
// runs: the current model, the requests using it, and its replacement by
// another (a hot swap), either loaded beside the old one or after the old
// one has drained and been freed.
//
// It is the part of ollama's scheduler (server/sched.go: a loaded runner's
// reference count, unloading once it reaches zero) that replyd needs for its
// two engines, as one small type with its own tests; it knows nothing of
// the engines, their files or HTTP.
package slot

import (
	"errors"
	"sync"
	"time"
)

// Model is what a slot holds: a loaded model that Close frees. Close is
// called once, after every request that acquired the model has released
// it.
type Model interface {
	Close() error
}

// ErrEmpty is Acquire's error when the slot holds no model: none was put
// in yet, or a swap could load neither the new model nor the old one again.
var ErrEmpty = errors.New("no model is loaded")

// SwappingError is Acquire's error while a swap has freed the old model
// and loads the new one: Until is the swap's expected end.
type SwappingError struct {
	Until time.Time
}

func (e *SwappingError) Error() string {
	return "the model is being switched until " + e.Until.Format(time.RFC3339)
}

// Error is a failed swap's error. New is why the new model did not load.
// Old is nil when the old model serves again; otherwise it is why the old
// one did not load again either, and the slot is empty (ErrEmpty). It
// unwraps to both, so errors.Is finds either cause.
type Error struct {
	New error
	Old error
}

func (e *Error) Error() string {
	if e.Old == nil {
		return e.New.Error()
	}
	return e.New.Error() + "; reloading the old model: " + e.Old.Error()
}

func (e *Error) Unwrap() []error {
	if e.Old == nil {
		return []error{e.New}
	}
	return []error{e.New, e.Old}
}

// Slot holds one engine's current model. The zero value is an empty slot
// ready to use; a Slot must not be copied after first use.
//
// Every request takes the model with Acquire and gives it back with the
// release it returned; a swap makes new requests take the new model at
// once and frees the old one when the last request using it has released
// it. Swaps (Beside, Swap) run one at a time.
type Slot[M Model] struct {
	swap sync.Mutex // one swap at a time

	mu  sync.RWMutex // guards the fields below
	cur M
	has bool
	// use counts the requests holding cur. Each model gets its own group,
	// replaced under mu when the model is, so that every Add on a group
	// happens before the swap that Waits on it.
	use *sync.WaitGroup
	// until is the expected end of a Swap that has emptied the slot, zero
	// otherwise.
	until time.Time
	// closing is set by Close: the slot takes no model any more.
	closing bool
}

// Acquire returns the current model and the release to call once the
// request is done with it (calling it more than once is harmless). The
// model is not freed before release is called, even when a swap replaces
// it meanwhile. With no model it returns *SwappingError while a Swap
// loads, ErrEmpty otherwise.
func (s *Slot[M]) Acquire() (m M, release func(), err error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if !s.has {
		if !s.until.IsZero() {
			return m, nil, &SwappingError{Until: s.until}
		}
		return m, nil, ErrEmpty
	}
	use := s.use
	use.Add(1)
	var once sync.Once
	return s.cur, func() { once.Do(use.Done) }, nil
}

// Peek calls f with the current model under the slot's read lock, so that
// the model cannot be freed while f runs (f must not call the slot's
// swaps), and reports whether there was one. It suits quick reads such as
// a status; a request uses Acquire.
func (s *Slot[M]) Peek(f func(M)) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.has {
		f(s.cur)
	}
	return s.has
}

// Swapping returns the expected end of a Swap that has emptied the slot,
// and false when none has.
func (s *Slot[M]) Swapping() (time.Time, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.until, !s.until.IsZero()
}

// Put makes m the current model without a swap: the first load. It
// returns false, leaving the slot as it was, when the slot already holds a
// model or is closed; the caller then frees m.
func (s *Slot[M]) Put(m M) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.has || s.closing {
		return false
	}
	s.put(m)
	return true
}

// put makes m current with a new group of users. s.mu must be held.
func (s *Slot[M]) put(m M) {
	s.cur, s.has, s.use, s.until = m, true, new(sync.WaitGroup), time.Time{}
}

// take empties the slot and returns what it held; until, when not zero,
// makes Acquire answer *SwappingError meanwhile. s.mu must be held.
func (s *Slot[M]) take(until time.Time) (old M, had bool, use *sync.WaitGroup) {
	var zero M
	old, had, use = s.cur, s.has, s.use
	s.cur, s.has, s.use, s.until = zero, false, nil, until
	return old, had, use
}

// free waits until the requests using a model taken from the slot have
// released it, then closes it.
func free[M Model](m M, had bool, use *sync.WaitGroup) {
	if !had {
		return
	}
	use.Wait()
	_ = m.Close()
}

// Beside loads a new model with open while the current one keeps serving,
// then makes it current: requests that begin afterwards take the new one,
// those running on the old one finish there. It returns once the old model
// has drained and been freed. When open fails the old model serves on,
// untouched, and the error is an *Error with only New set.
func (s *Slot[M]) Beside(open func() (M, error)) error {
	s.swap.Lock()
	defer s.swap.Unlock()
	m, err := open()
	if err != nil {
		return &Error{New: err}
	}
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		_ = m.Close()
		return &Error{New: errClosed}
	}
	old, had, use := s.take(time.Time{})
	s.put(m)
	s.mu.Unlock()
	free(old, had, use)
	return nil
}

// Swap frees the current model first and then loads the new one with open:
// for a new model that does not fit in memory beside the old one. From the
// start, Acquire answers *SwappingError with the expected end (now plus
// expect); the requests running on the old model finish there, it is
// freed, and open runs. When open fails, reopen (nil: none) loads the old
// model again so that the engine keeps serving: the error is an *Error
// with New set, and Old too when reopen failed as well, which leaves the
// slot empty.
func (s *Slot[M]) Swap(expect time.Duration, open, reopen func() (M, error)) error {
	s.swap.Lock()
	defer s.swap.Unlock()
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return &Error{New: errClosed}
	}
	old, had, use := s.take(time.Now().Add(expect))
	s.mu.Unlock()
	free(old, had, use)

	m, err := open()
	if err == nil {
		return s.settle(m, nil)
	}
	if reopen == nil {
		return s.settle(m, &Error{New: err, Old: errors.New("no way to reload it")})
	}
	m, rerr := reopen()
	if rerr != nil {
		return s.settle(m, &Error{New: err, Old: rerr})
	}
	return s.settle(m, &Error{New: err})
}

// settle ends a Swap: with e nil or e.Old nil, m becomes current (freed at
// once instead when the slot was closed meanwhile); otherwise the slot
// stays empty and stops answering *SwappingError.
func (s *Slot[M]) settle(m M, e *Error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	loaded := e == nil || e.Old == nil
	switch {
	case loaded && s.closing:
		_ = m.Close()
		s.until = time.Time{}
	case loaded:
		s.put(m)
	default:
		s.until = time.Time{}
	}
	if e == nil {
		return nil
	}
	return e
}

var errClosed = errors.New("the slot is closed")

// Close empties the slot for good: it waits until the requests using the
// current model have released it, then frees it, and returns its Close
// error. A swap still running frees what it loads. Later Puts and swaps
// fail, and Acquire answers ErrEmpty.
func (s *Slot[M]) Close() error {
	s.mu.Lock()
	s.closing = true
	old, had, use := s.take(time.Time{})
	s.mu.Unlock()
	if !had {
		return nil
	}
	use.Wait()
	return old.Close()
}
