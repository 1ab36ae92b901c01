package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/replyd/replyd/internal/tokenbucket"
	"github.com/replyd/replyd/store"
)

// The PostgreSQL store is the limiter of the boxes that share it.
var _ store.RateLimiter = (*Store)(nil)

// Allow counts one request against key's window in a single atomic
// statement (INSERT … ON CONFLICT … DO UPDATE … RETURNING), so that boxes
// admitting requests of one key at the same moment share one count; see
// store.RateLimiter. The window rule is store.RateWindowOver's, in SQL. The
// row is in an UNLOGGED table: the statement waits for no disk flush.
func (s *Store) Allow(key string, limit int, now time.Time) (bool, time.Duration, error) {
	if limit <= 0 {
		return true, 0, nil
	}
	var start int64
	var admitted bool
	err := s.run("rate limit", func(ctx context.Context) error {
		// In SET every expression sees the row as it was: "over" is the
		// old window's end, and a refused request is not counted.
		return s.pool.QueryRow(ctx, `INSERT INTO rate_windows AS r (key_hash, start_ns, count, admitted) VALUES ($1, $2, 1, true)
			ON CONFLICT (key_hash) DO UPDATE SET
				start_ns = CASE WHEN $2 >= r.start_ns + $3 OR $2 < r.start_ns - $3 THEN $2 ELSE r.start_ns END,
				count    = CASE WHEN $2 >= r.start_ns + $3 OR $2 < r.start_ns - $3 THEN 1
				                WHEN r.count < $4 THEN r.count + 1 ELSE r.count END,
				admitted = ($2 >= r.start_ns + $3 OR $2 < r.start_ns - $3 OR r.count < $4)
			RETURNING start_ns, admitted`, key, ns(now), int64(store.RateWindow), limit).Scan(&start, &admitted)
	})
	if err != nil {
		return false, 0, err
	}
	if admitted {
		return true, 0, nil
	}
	return false, fromNS(start).Add(store.RateWindow).Sub(now), nil
}

// Refund gives back one request of key's current window in one atomic
// statement; see store.RateLimiter.
func (s *Store) Refund(key string, now time.Time) error {
	return s.run("rate limit refund", func(ctx context.Context) error {
		_, err := s.pool.Exec(ctx, `UPDATE rate_windows SET count = count - 1
			WHERE key_hash = $1 AND count > 0 AND $2 < start_ns + $3 AND $2 >= start_ns - $3`, key, ns(now), int64(store.RateWindow))
		return err
	})
}

// Take spends one request of key's token bucket, shared by every box; see
// store.RateLimiter. One transaction locks the key's row (created full on
// first use) and applies internal/tokenbucket, the arithmetic of the bbolt
// store's buckets, so that concurrent keystrokes on several boxes are
// counted one after the other.
func (s *Store) Take(key string, perMinute, burst int, now time.Time) (bool, time.Duration, error) {
	if perMinute <= 0 || burst <= 0 {
		return true, 0, nil
	}
	var ok bool
	var retry time.Duration
	err := s.tx("steering budget", func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO rate_buckets (key_hash, tokens, at_ns) VALUES ($1, $2, $3) ON CONFLICT (key_hash) DO NOTHING`,
			key, float64(burst), ns(now)); err != nil {
			return err
		}
		var tokens float64
		var at int64
		if err := tx.QueryRow(ctx, `SELECT tokens, at_ns FROM rate_buckets WHERE key_hash = $1 FOR UPDATE`, key).Scan(&tokens, &at); err != nil {
			return err
		}
		var after tokenbucket.Bucket
		after, ok, retry = tokenbucket.Bucket{Tokens: tokens, At: fromNS(at)}.Take(now, float64(burst), tokenbucket.PerMinute(perMinute))
		_, err := tx.Exec(ctx, `UPDATE rate_buckets SET tokens = $2, at_ns = greatest(at_ns, $3) WHERE key_hash = $1`, key, after.Tokens, ns(now))
		return err
	})
	if err != nil {
		return false, 0, err
	}
	return ok, retry, nil
}
