package api

import (
	"sync"
	"time"

	"github.com/replyd/replyd/store"
)

// refusalLog remembers, per key, when a refusal by its rate limit was last
// logged, so that a key holder flooding past its limit adds at most one log
// entry a window (the refusals are still counted in the metrics).
type refusalLog struct {
	mu     sync.Mutex
	logged map[string]time.Time
}

// first reports whether a refusal of key at now is the first to be logged
// in a window, and records it if so.
func (r *refusalLog) first(key string, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if last, ok := r.logged[key]; ok && !store.RateWindowOver(last, now) {
		return false
	}
	if r.logged == nil || len(r.logged) >= maxTrackedAddrs {
		r.logged = make(map[string]time.Time) // forgetting only logs one more
	}
	r.logged[key] = now
	return true
}
