package storetest

import (
	"testing"
	"time"

	"github.com/replyd/replyd/store"
)

// limiter adapts a scenario of the RateLimiter part of the contract (every
// Store is a RateLimiter) to the scenario table.
func limiter(run func(t *testing.T, l store.RateLimiter)) func(t *testing.T, e Env) {
	return func(t *testing.T, e Env) { run(t, e.S) }
}

// allow calls l.Allow and checks the outcome (and, when refused, the retry).
func allow(t *testing.T, l store.RateLimiter, key string, limit int, now time.Time, wantOK bool, wantRetry time.Duration) {
	t.Helper()
	ok, retry, err := l.Allow(key, limit, now)
	Must(t, err)
	if ok != wantOK || (!ok && retry != wantRetry) {
		t.Errorf("Allow(%s, %d, T0+%s) = %v, retry %s; want %v, retry %s", key, limit, now.Sub(T0), ok, retry, wantOK, wantRetry)
	}
}

func limiterWindow(t *testing.T, l store.RateLimiter) {
	start := T0.Add(10 * time.Second) // windows are not aligned to the minute
	for i := range 3 {
		allow(t, l, "k", 3, start.Add(time.Duration(i)*time.Second), true, 0)
	}
	allow(t, l, "k", 3, start.Add(20*time.Second), false, 40*time.Second)
	allow(t, l, "k", 3, start.Add(59*time.Second), false, time.Second)
	// The window closes at start+1m; the next request opens a new one.
	allow(t, l, "k", 3, start.Add(time.Minute), true, 0)
	allow(t, l, "k", 3, start.Add(time.Minute+time.Second), true, 0)
	allow(t, l, "k", 3, start.Add(time.Minute+2*time.Second), true, 0)
	allow(t, l, "k", 3, start.Add(time.Minute+3*time.Second), false, 57*time.Second)
	// A quiet spell: the window opens with the first request after it.
	late := start.Add(10 * time.Minute)
	allow(t, l, "k", 3, late, true, 0)
	allow(t, l, "k", 3, late.Add(30*time.Second), true, 0)
	allow(t, l, "k", 3, late.Add(30*time.Second), true, 0)
	allow(t, l, "k", 3, late.Add(30*time.Second), false, 30*time.Second)
}

func limiterUnlimitedAndKeys(t *testing.T, l store.RateLimiter) {
	for range 100 {
		allow(t, l, "free", 0, T0, true, 0)
	}
	allow(t, l, "neg", -1, T0, true, 0)
	allow(t, l, "a", 1, T0, true, 0)
	allow(t, l, "b", 1, T0, true, 0) // another key: its own window
	allow(t, l, "a", 1, T0, false, time.Minute)
	allow(t, l, "b", 1, T0.Add(time.Second), false, 59*time.Second)
}

func limiterClocks(t *testing.T, l store.RateLimiter) {
	allow(t, l, "k", 2, T0, true, 0)
	// Another box's clock, 300 ms behind: still this window.
	allow(t, l, "k", 2, T0.Add(-300*time.Millisecond), true, 0)
	allow(t, l, "k", 2, T0.Add(-300*time.Millisecond), false, time.Minute+300*time.Millisecond)
	// A clock set back by more than a window opens a new window.
	back := T0.Add(-2 * time.Minute)
	allow(t, l, "k", 2, back, true, 0)
	allow(t, l, "k", 2, back, true, 0)
	allow(t, l, "k", 2, back, false, time.Minute)
}

func limiterLowered(t *testing.T, l store.RateLimiter) {
	for range 3 {
		allow(t, l, "k", 5, T0, true, 0)
	}
	// The admin lowers the key's limit to 2: it has used 3 this window.
	allow(t, l, "k", 2, T0.Add(time.Second), false, 59*time.Second)
	allow(t, l, "k", 5, T0.Add(2*time.Second), true, 0)
	allow(t, l, "k", 5, T0.Add(2*time.Second), true, 0)
	allow(t, l, "k", 5, T0.Add(2*time.Second), false, 58*time.Second)
}

// limiterConcurrent: 40 requests at once under a limit of 7 admit exactly 7.
func limiterConcurrent(t *testing.T, l store.RateLimiter) {
	n := admitted(t, 40, func() (bool, error) {
		ok, _, err := l.Allow("k", 7, T0)
		return ok, err
	})
	if n != 7 {
		t.Errorf("%d of 40 concurrent requests admitted under a limit of 7", n)
	}
}

// limiterRefund: a refunded request can be made again in the same window; a
// refund never goes below zero nor reaches into a closed window.
func limiterRefund(t *testing.T, l store.RateLimiter) {
	allow(t, l, "k", 2, T0, true, 0)
	allow(t, l, "k", 2, T0.Add(time.Second), true, 0)
	allow(t, l, "k", 2, T0.Add(2*time.Second), false, 58*time.Second)
	Must(t, l.Refund("k", T0.Add(3*time.Second))) // one of the two was shed
	allow(t, l, "k", 2, T0.Add(4*time.Second), true, 0)
	allow(t, l, "k", 2, T0.Add(5*time.Second), false, 55*time.Second)
	// Refunds past what was admitted change nothing.
	for range 5 {
		Must(t, l.Refund("k", T0.Add(6*time.Second)))
	}
	allow(t, l, "k", 2, T0.Add(7*time.Second), true, 0)
	allow(t, l, "k", 2, T0.Add(8*time.Second), true, 0)
	allow(t, l, "k", 2, T0.Add(9*time.Second), false, 51*time.Second)
	// After the window, a refund does not carry into the next one.
	Must(t, l.Refund("k", T0.Add(time.Minute+time.Second)))
	allow(t, l, "k", 2, T0.Add(time.Minute+2*time.Second), true, 0)
	allow(t, l, "k", 2, T0.Add(time.Minute+3*time.Second), true, 0)
	allow(t, l, "k", 2, T0.Add(time.Minute+4*time.Second), false, 58*time.Second)
	Must(t, l.Refund("unknown", T0))
}
