package store

import (
	"sync"
	"time"

	"github.com/replyd/replyd/internal/window"
)

// MemoryLimiter is the RateLimiter of a single box: all state is in memory
// behind one mutex, so admission is exact under any concurrency and nothing
// is written per request. The bbolt store (one process) limits with it;
// boxes that share a PostgreSQL store share its limiter instead, so that
// the limit is global. The zero value is ready to use; it is safe for
// concurrent use.
type MemoryLimiter struct {
	mu      sync.Mutex
	windows window.Counter[struct{}]
	buckets map[string]bucket // Take's token buckets
	swept   time.Time
}

// bucket is one key's token bucket: its level after the request at at.
type bucket struct {
	tokens float64
	at     time.Time
}

// counter returns the windows, of RateWindow each; l.mu is held.
func (l *MemoryLimiter) counter() *window.Counter[struct{}] {
	l.windows.Length = RateWindow
	return &l.windows
}

// Allow implements RateLimiter; it never fails.
func (l *MemoryLimiter) Allow(key string, limit int, now time.Time) (bool, time.Duration, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.counter()
	c.Prune(now)
	ok, retry := c.Allow(key, limit, now)
	return ok, retry, nil
}

// Refund implements RateLimiter: it gives back one request admitted in
// key's current window.
func (l *MemoryLimiter) Refund(key string, now time.Time) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.counter().Refund(key, now)
	return nil
}

// Take implements RateLimiter's token bucket; it never fails.
func (l *MemoryLimiter) Take(key string, perMinute, burst int, now time.Time) (bool, time.Duration, error) {
	if perMinute <= 0 || burst <= 0 {
		return true, 0, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.buckets == nil {
		l.buckets = map[string]bucket{}
	}
	if now.Sub(l.swept) > time.Minute {
		// A bucket left alone long enough to be full again is forgotten.
		full := time.Duration(float64(burst) / float64(perMinute) * float64(time.Minute))
		for k, b := range l.buckets {
			if now.Sub(b.at) >= full {
				delete(l.buckets, k)
			}
		}
		l.swept = now
	}
	b, found := l.buckets[key]
	if !found {
		b = bucket{tokens: float64(burst), at: now}
	}
	level, ok, retry := BucketLevel(b.tokens, b.at, now, perMinute, burst)
	l.buckets[key] = bucket{tokens: level, at: later(b.at, now)}
	return ok, retry, nil
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
