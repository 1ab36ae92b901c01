package api

import (
	"sync"
	"time"
)

// rateWindow is the length of the rate-limit window.
const rateWindow = time.Minute

// rateLimiter admits at most limit requests per key in each fixed one-minute
// window. A window opens with the first request after the previous one
// closed. All state is in memory behind one mutex, so admission is exact
// under any concurrency; nothing is written to the store per request.
type rateLimiter struct {
	mu      sync.Mutex
	buckets map[string]*rateBucket
	sweepAt time.Time
}

type rateBucket struct {
	start time.Time // when the current window opened
	count int       // requests admitted in it
}

func newRateLimiter() *rateLimiter {
	return &rateLimiter{buckets: make(map[string]*rateBucket)}
}

// allow admits one request for key at now when fewer than limit were admitted
// in the current window. A limit of 0 or less means unlimited. When refused,
// retry is the time until the window closes.
func (l *rateLimiter) allow(key string, limit int, now time.Time) (ok bool, retry time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sweep(now)
	b := l.buckets[key]
	if b == nil {
		b = &rateBucket{start: now}
		l.buckets[key] = b
	}
	if now.Sub(b.start) >= rateWindow || now.Before(b.start) {
		b.start, b.count = now, 0
	}
	if limit <= 0 {
		return true, 0
	}
	if b.count >= limit {
		return false, b.start.Add(rateWindow).Sub(now)
	}
	b.count++
	return true, 0
}

// sweep drops buckets idle for more than two windows, at most once a minute.
// The caller holds l.mu.
func (l *rateLimiter) sweep(now time.Time) {
	if now.Before(l.sweepAt) {
		return
	}
	l.sweepAt = now.Add(rateWindow)
	for k, b := range l.buckets {
		if now.Sub(b.start) > 2*rateWindow {
			delete(l.buckets, k)
		}
	}
}
