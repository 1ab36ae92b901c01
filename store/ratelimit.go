package store

import (
	"sync"
	"time"
)

// MemoryLimiter is the RateLimiter of a single box: all state is in memory
// behind one mutex, so admission is exact under any concurrency and nothing
// is written per request. The bbolt store (one process) limits with it;
// boxes that share a PostgreSQL store share its limiter instead, so that
// the limit is global. The zero value is ready to use; it is safe for
// concurrent use.
type MemoryLimiter struct {
	mu      sync.Mutex
	buckets map[string]*rateBucket
	sweepAt time.Time
}

type rateBucket struct {
	start time.Time // when the current window opened
	count int       // requests admitted in it
}

// NewMemoryLimiter returns an empty MemoryLimiter.
func NewMemoryLimiter() *MemoryLimiter {
	return &MemoryLimiter{buckets: make(map[string]*rateBucket)}
}

// Allow implements RateLimiter; it never fails.
func (l *MemoryLimiter) Allow(key string, limit int, now time.Time) (bool, time.Duration, error) {
	if limit <= 0 {
		return true, 0, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sweep(now)
	if l.buckets == nil {
		l.buckets = make(map[string]*rateBucket)
	}
	b := l.buckets[key]
	if b == nil {
		b = &rateBucket{start: now}
		l.buckets[key] = b
	}
	if RateWindowOver(b.start, now) {
		b.start, b.count = now, 0
	}
	if b.count >= limit {
		return false, b.start.Add(RateWindow).Sub(now), nil
	}
	b.count++
	return true, 0, nil
}

// sweep drops buckets whose window closed more than a window ago, at most
// once a window. The caller holds l.mu.
func (l *MemoryLimiter) sweep(now time.Time) {
	if now.Before(l.sweepAt) {
		return
	}
	l.sweepAt = now.Add(RateWindow)
	for k, b := range l.buckets {
		if now.Sub(b.start) > 2*RateWindow {
			delete(l.buckets, k)
		}
	}
}

// Refund implements RateLimiter: it gives back one request admitted
// in key's current window.
func (l *MemoryLimiter) Refund(key string, now time.Time) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if b := l.buckets[key]; b != nil && b.count > 0 && !RateWindowOver(b.start, now) {
		b.count--
	}
	return nil
}
