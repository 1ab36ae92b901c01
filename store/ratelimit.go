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
