package store

import (
	"sync"
	"time"

	"github.com/replyd/replyd/internal/tokenbucket"
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
	buckets map[string]tokenbucket.Bucket // Take's token buckets
	swept   time.Time
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
		l.buckets = map[string]tokenbucket.Bucket{}
	}
	rate := tokenbucket.PerMinute(perMinute)
	if now.Sub(l.swept) > time.Minute {
		// A bucket left alone long enough to be full again is forgotten.
		full := tokenbucket.Full(float64(burst), rate)
		for k, b := range l.buckets {
			if now.Sub(b.At) >= full {
				delete(l.buckets, k)
			}
		}
		l.swept = now
	}
	b, ok, retry := l.buckets[key].Take(now, float64(burst), rate) // a new key's bucket starts full
	l.buckets[key] = b
	return ok, retry, nil
}
