package postgres

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/replyd/replyd/store"
)

// keyCols are the api_keys columns scanKey reads, in its order.
const keyCols = "hash, client_id, status, scopes, rate_limit_per_minute, created_ns, revoked_ns, last_used_ns"

// scanKey reads one api_keys row selected with keyCols.
func scanKey(row pgx.Row) (store.APIKey, error) { return scanKeyAnd(row) }

// scanKeyAnd reads a row of keyCols followed by the columns extra scans.
func scanKeyAnd(row pgx.Row, extra ...any) (store.APIKey, error) {
	var k store.APIKey
	var created int64
	var revoked, used *int64
	err := row.Scan(append([]any{&k.Hash, &k.ClientID, &k.Status, &k.Scopes, &k.RateLimitPerMinute, &created, &revoked, &used}, extra...)...)
	k.CreatedAt, k.RevokedAt, k.LastUsedAt = fromNS(created), fromNullNS(revoked), fromNullNS(used)
	return k, err
}

// CreateKey inserts k; see store.Store.
func (s *Store) CreateKey(k store.APIKey) error {
	k, err := k.Created(s.now())
	if err != nil {
		return err
	}
	return s.run("create key", func(ctx context.Context) error {
		tag, err := s.pool.Exec(ctx, `INSERT INTO api_keys (hash, client_id, status, scopes, rate_limit_per_minute, created_ns, revoked_ns, last_used_ns)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (hash) DO NOTHING`,
			k.Hash, k.ClientID, k.Status, k.Scopes, k.RateLimitPerMinute, ns(k.CreatedAt), nullNS(k.RevokedAt), nullNS(k.LastUsedAt))
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("store: key %s: %w", shortHash(k.Hash), store.ErrExists)
		}
		return nil
	})
}

// GetKey reads the key's row; see store.Store.
func (s *Store) GetKey(hash string) (store.APIKey, error) {
	var k store.APIKey
	err := s.run("get key", func(ctx context.Context) error {
		var err error
		k, err = scanKey(s.pool.QueryRow(ctx, "SELECT "+keyCols+" FROM api_keys WHERE hash = $1", hash))
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("store: key %s: %w", shortHash(hash), store.ErrNotFound)
		}
		return err
	})
	return k, err
}

// ListKeys lists keys newest first; see store.Store.
func (s *Store) ListKeys(limit int, includeRevoked bool) ([]store.APIKey, error) {
	out := []store.APIKey{}
	var lim *int
	if limit > 0 {
		lim = &limit
	}
	err := s.run("list keys", func(ctx context.Context) error {
		var err error
		out, err = queryAll(ctx, s.pool, asRow(scanKey), "SELECT "+keyCols+` FROM api_keys
			WHERE $1 OR status <> 'revoked' ORDER BY created_ns DESC, seq DESC LIMIT $2`, includeRevoked, lim)
		return err
	})
	return out, err
}

// RevokeKey marks the key revoked in one statement; see store.Store.
func (s *Store) RevokeKey(hash string, at time.Time) (store.APIKey, error) {
	var k store.APIKey
	err := s.run("revoke key", func(ctx context.Context) error {
		var err error
		k, err = scanKey(s.pool.QueryRow(ctx, `UPDATE api_keys SET status = 'revoked',
			revoked_ns = CASE WHEN status = 'revoked' AND revoked_ns IS NOT NULL THEN revoked_ns ELSE $2 END
			WHERE hash = $1 RETURNING `+keyCols, hash, nullNS(at)))
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("store: key %s: %w", shortHash(hash), store.ErrNotFound)
		}
		return err
	})
	return k, err
}

// TouchKey records the key's last use, at most once a minute per key and
// box; see store.Store.
func (s *Store) TouchKey(hash string, at time.Time) error {
	if !s.touches.Begin(hash, at) {
		return nil
	}
	err := s.run("touch key", func(ctx context.Context) error {
		// GREATEST ignores NULL: LastUsedAt never moves backwards.
		tag, err := s.pool.Exec(ctx, "UPDATE api_keys SET last_used_ns = GREATEST(last_used_ns, $2) WHERE hash = $1", hash, ns(at))
		if err == nil && tag.RowsAffected() == 0 {
			err = fmt.Errorf("store: key %s: %w", shortHash(hash), store.ErrNotFound)
		}
		return err
	})
	if err != nil {
		s.touches.Failed(hash, at)
	}
	return err
}

// shortHash shortens a hash for error messages.
func shortHash(h string) string {
	if len(h) > 12 {
		return h[:12] + "…"
	}
	return h
}

// ListKeysPage returns the page of ListKeys after the position after, in
// the (created_ns, seq) order of the api_keys_by_age index; see
// store.Store.
func (s *Store) ListKeysPage(after *store.KeyCursor, limit int, includeRevoked bool) ([]store.APIKey, *store.KeyCursor, error) {
	if limit < 1 {
		return nil, nil, fmt.Errorf("store: %w: a page holds at least one key", store.ErrInvalid)
	}
	type row struct {
		key     store.APIKey
		created int64
		seq     int64
	}
	var rows []row
	from := store.KeyCursor{CreatedNS: math.MaxInt64, Seq: math.MaxInt64}
	if after != nil {
		from = *after
	}
	err := s.run("list keys", func(ctx context.Context) error {
		rs, err := s.pool.Query(ctx, "SELECT "+keyCols+`, seq FROM api_keys
			WHERE ($1 OR status <> 'revoked') AND ($2::bool OR (created_ns, seq) < ($3, $4))
			ORDER BY created_ns DESC, seq DESC LIMIT $5`, includeRevoked, after == nil, from.CreatedNS, from.Seq, limit+1)
		if err != nil {
			return err
		}
		rows, err = pgx.CollectRows(rs, func(r pgx.CollectableRow) (row, error) {
			var x row
			k, err := scanKeyAnd(r, &x.seq)
			x.key, x.created = k, ns(k.CreatedAt)
			return x, err
		})
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	out := []store.APIKey{}
	var next *store.KeyCursor
	for i, r := range rows {
		if i == limit {
			last := rows[i-1]
			next = &store.KeyCursor{CreatedNS: last.created, Seq: last.seq}
			break
		}
		out = append(out, r.key)
	}
	return out, next, nil
}
