package api

import (
	"sync"
	"time"

	"github.com/replyd/replyd/store"
)

// memoryLimiter is the store.RateLimiter of a single box: all state is in
// memory behind one mutex, so admission is exact under any concurrency and
// nothing is written per request. Boxes that share a PostgreSQL store use
// its limiter instead (Options.Limiter), so that the limit is global.
type memoryLimiter struct {
	mu      sync.Mutex
	buckets map[string]*rateBucket
	sweepAt time.Time
}

type rateBucket struct {
	start time.Time // when the current window opened
	count int       // requests admitted in it
}

func newMemoryLimiter() *memoryLimiter {
	return &memoryLimiter{buckets: make(map[string]*rateBucket)}
}

// Allow implements store.RateLimiter; it never fails.
func (l *memoryLimiter) Allow(key string, limit int, now time.Time) (bool, time.Duration, error) {
	if limit <= 0 {
		return true, 0, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sweep(now)
	b := l.buckets[key]
	if b == nil {
		b = &rateBucket{start: now}
		l.buckets[key] = b
	}
	if store.RateWindowOver(b.start, now) {
		b.start, b.count = now, 0
	}
	if b.count >= limit {
		return false, b.start.Add(store.RateWindow).Sub(now), nil
	}
	b.count++
	return true, 0, nil
}

// sweep drops buckets whose window closed more than a window ago, at most
// once a window. The caller holds l.mu.
func (l *memoryLimiter) sweep(now time.Time) {
	if now.Before(l.sweepAt) {
		return
	}
	l.sweepAt = now.Add(store.RateWindow)
	for k, b := range l.buckets {
		if now.Sub(b.start) > 2*store.RateWindow {
			delete(l.buckets, k)
		}
	}
}

// Refund implements store.RateLimiter: it gives back one request admitted
// in key's current window.
func (l *memoryLimiter) Refund(key string, now time.Time) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if b := l.buckets[key]; b != nil && b.count > 0 && !store.RateWindowOver(b.start, now) {
		b.count--
	}
	return nil
}

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
