package bolt

import (
	"time"

	"github.com/replyd/replyd/store"
)

// The bbolt store keeps the contract.
var _ store.Store = (*DB)(nil)

// Allow counts a request of key against limit; see store.RateLimiter. One
// process holds the file, so the windows are kept in memory
// (store.MemoryLimiter) and nothing is written per request.
func (db *DB) Allow(key string, limit int, now time.Time) (bool, time.Duration, error) {
	return db.limiter.Allow(key, limit, now)
}

// Refund gives back one request of key's current window; see
// store.RateLimiter.
func (db *DB) Refund(key string, now time.Time) error {
	return db.limiter.Refund(key, now)
}

// Take spends one request of key's token bucket; see store.RateLimiter.
// Like the windows, the buckets are kept in memory (one process).
func (db *DB) Take(key string, perMinute, burst int, now time.Time) (bool, time.Duration, error) {
	return db.limiter.Take(key, perMinute, burst, now)
}
