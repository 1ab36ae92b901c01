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
