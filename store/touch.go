package store

import (
	"sync"
	"time"
)

// TouchInterval is the least time between two persisted LastUsedAt updates
// of one key (see Store.TouchKey).
const TouchInterval = time.Minute

// TouchThrottle remembers, in memory, when each key's "last used" time was
// last persisted, so that a Store writes it at most once per TouchInterval.
// The zero value is ready to use; it is safe for concurrent use.
type TouchThrottle struct {
	mu      sync.Mutex
	touched map[string]time.Time // key hash -> last persisted LastUsedAt
}

// Begin reports whether a touch of hash at at should be persisted now, and
// if so records it. A time earlier than the recorded one passes (the store
// keeps the later of the two).
func (t *TouchThrottle) Begin(hash string, at time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	last, ok := t.touched[hash]
	if ok && at.Sub(last) < TouchInterval && !at.Before(last) {
		return false
	}
	if t.touched == nil {
		t.touched = make(map[string]time.Time)
	}
	t.touched[hash] = at
	return true
}

// Failed forgets the touch Begin recorded when persisting it failed, so that
// the next call tries again instead of losing the touch for a minute.
func (t *TouchThrottle) Failed(hash string, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.touched[hash].Equal(at) {
		delete(t.touched, hash)
	}
}
