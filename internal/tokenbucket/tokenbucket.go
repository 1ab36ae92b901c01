// Package tokenbucket is the token bucket's arithmetic, the one every
// limiter of replyd that refills a budget uses: the steering budget of both
// stores (store.MemoryLimiter in memory, store/postgres in a row shared by
// every box) and the login code sends of the API (per address and for all
// addresses together). A bucket holds at most a burst of tokens, starts
// full, and refills at a steady rate; a request takes one token or, when
// less than one is left, is told how long until one is.
//
// It holds no lock and no clock: callers keep the Bucket (in a map behind
// their own lock, or in a database row they lock) and pass the time.
package tokenbucket

import (
	"math"
	"time"
)

// Rate is how fast a bucket refills: n tokens every per. It is kept as the
// two numbers, not their quotient, so that a bucket refilled for exactly
// per/n has exactly one token more (1/per in floating point is not exact).
type Rate struct {
	n   float64
	per time.Duration
}

// PerMinute is the rate of n tokens a minute.
func PerMinute(n int) Rate { return Rate{n: float64(n), per: time.Minute} }

// Every is the rate of one token every d.
func Every(d time.Duration) Rate { return Rate{n: 1, per: d} }

// refill is the tokens the rate adds in d.
func (r Rate) refill(d time.Duration) float64 { return float64(d) * r.n / float64(r.per) }

// wait is the time the rate takes to add tokens, in nanoseconds.
func (r Rate) wait(tokens float64) float64 { return tokens * float64(r.per) / r.n }

// Bucket is a bucket's state: Tokens held at At, the time of its last
// request. The zero Bucket is full (it has never been used).
type Bucket struct {
	Tokens float64
	At     time.Time
}

// Level is the bucket's tokens at now: refilled at rate since At, at most
// burst. A time before At (another box's clock) refills nothing.
func (b Bucket) Level(now time.Time, burst float64, rate Rate) float64 {
	if b.At.IsZero() {
		return burst
	}
	if d := now.Sub(b.At); d > 0 {
		return min(burst, b.Tokens+rate.refill(d))
	}
	return b.Tokens
}

// Take refills the bucket to now and takes one token. It returns the
// bucket after the request (At is the later of At and now, so a clock that
// reads earlier never refills twice), whether a token was taken, and, when
// none was, the wait until one is, in whole milliseconds rounded up. A
// refused request takes nothing but is still the bucket's latest.
func (b Bucket) Take(now time.Time, burst float64, rate Rate) (after Bucket, ok bool, wait time.Duration) {
	level := b.Level(now, burst, rate)
	at := now
	if b.At.After(now) {
		at = b.At
	}
	if level < 1 {
		// Whole milliseconds, rounded up (a hair of float error aside).
		ms := math.Ceil(rate.wait(1-level)/float64(time.Millisecond) - 1e-6)
		return Bucket{Tokens: level, At: at}, false, time.Duration(ms) * time.Millisecond
	}
	return Bucket{Tokens: level - 1, At: at}, true, 0
}

// Give returns one token taken for a request that did not happen, up to
// burst.
func (b Bucket) Give(burst float64) Bucket {
	b.Tokens = min(burst, b.Tokens+1)
	return b
}

// Full is how long a bucket emptied takes to be full again: one left alone
// that long may be forgotten (a new one starts full).
func Full(burst float64, rate Rate) time.Duration {
	return time.Duration(rate.wait(burst))
}
