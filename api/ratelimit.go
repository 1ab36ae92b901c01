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
	// refusals counts the requests refused in the window; only the first
	// gets a log entry.
	refusals int
	// touched is when the key's "last used" time was last written.
	touched time.Time
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
		b.start, b.count, b.refusals = now, 0, 0
	}
	if limit <= 0 {
		return true, 0
	}
	if b.count >= limit {
		b.refusals++
		return false, b.start.Add(rateWindow).Sub(now)
	}
	b.count++
	return true, 0
}

// refund gives back one request admitted in key's current window (a
// request that was then shed).
func (l *rateLimiter) refund(key string, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if b := l.buckets[key]; b != nil && b.count > 0 && now.Sub(b.start) < rateWindow && !now.Before(b.start) {
		b.count--
	}
}

// firstRefusal reports whether the latest refusal of key was the first in
// its window.
func (l *rateLimiter) firstRefusal(key string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.buckets[key]
	return b == nil || b.refusals <= 1
}

// shouldTouch reports whether the key's last-used time should be written now
// (at most once a minute per key) and records that it is.
func (l *rateLimiter) shouldTouch(key string, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.buckets[key]
	if b == nil {
		b = &rateBucket{start: now}
		l.buckets[key] = b
	}
	if !b.touched.IsZero() && now.Sub(b.touched) < time.Minute && !now.Before(b.touched) {
		return false
	}
	b.touched = now
	return true
}

// sweep drops buckets idle for more than two windows, at most once a minute.
// The caller holds l.mu.
func (l *rateLimiter) sweep(now time.Time) {
	if now.Before(l.sweepAt) {
		return
	}
	l.sweepAt = now.Add(rateWindow)
	for k, b := range l.buckets {
		if now.Sub(b.start) > 2*rateWindow && now.Sub(b.touched) > 2*rateWindow {
			delete(l.buckets, k)
		}
	}
}
