package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/replyd/replyd/store"
)

// pairingLock is the transaction-level advisory lock CreatePairing holds so
// that boxes creating pairings at once cannot both pass the bound on
// pending ones. ("pair" in ASCII.)
const pairingLock int64 = 0x70616972

// CreatePairing stores a pending pairing, deleting expired ones and
// checking the bound in the same transaction; see store.Store.
func (s *Store) CreatePairing(p store.Pairing, maxPending int, now time.Time) error {
	p, err := p.Pending(now)
	if err != nil {
		return err
	}
	status := p.Key.Status
	if status == "" {
		status = store.StatusActive
	}
	return s.tx("create pairing", func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", pairingLock); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "DELETE FROM pairings WHERE expires_ns <= $1", ns(now)); err != nil {
			return err
		}
		if maxPending > 0 {
			var pending int
			if err := tx.QueryRow(ctx, "SELECT count(*) FROM pairings WHERE used_ns IS NULL").Scan(&pending); err != nil {
				return err
			}
			if pending >= maxPending {
				return fmt.Errorf("store: %d pairings are pending: %w", pending, store.ErrLimit)
			}
		}
		tag, err := tx.Exec(ctx, `INSERT INTO pairings (code_hash, client_id, status, scopes, rate_limit_per_minute, created_ns, expires_ns, memory_subject)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (code_hash) DO NOTHING`,
			p.CodeHash, p.Key.ClientID, status, p.Key.Scopes, p.Key.RateLimitPerMinute, ns(p.CreatedAt), ns(p.ExpiresAt), p.MemorySubject)
		if err == nil && tag.RowsAffected() == 0 {
			err = fmt.Errorf("store: pairing: %w", store.ErrExists)
		}
		return err
	})
}

// RedeemPairing mints the pairing's key and marks the pairing used, in one
// transaction that locks the pairing's row, so that of two boxes redeeming
// one code at once exactly one gets the key; see store.Store.
func (s *Store) RedeemPairing(codeHash, keyHash string, now time.Time) (store.APIKey, error) {
	if codeHash == "" || keyHash == "" {
		return store.APIKey{}, invalid("empty pairing code or key hash")
	}
	var k store.APIKey
	var outcome error
	err := s.tx("redeem pairing", func(ctx context.Context, tx pgx.Tx) error {
		outcome = nil
		var expires int64
		var used *int64
		var memSubject string
		err := tx.QueryRow(ctx, `SELECT client_id, status, scopes, rate_limit_per_minute, expires_ns, used_ns, memory_subject
			FROM pairings WHERE code_hash = $1 FOR UPDATE`, codeHash).
			Scan(&k.ClientID, &k.Status, &k.Scopes, &k.RateLimitPerMinute, &expires, &used, &memSubject)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			outcome = store.ErrNotFound
			return nil
		case err != nil:
			return err
		case ns(now) >= expires:
			outcome = store.ErrExpired
			_, err := tx.Exec(ctx, "DELETE FROM pairings WHERE code_hash = $1", codeHash)
			return err
		case used != nil:
			outcome = store.ErrUsed
			return nil
		}
		k.Hash, k.CreatedAt = keyHash, fromNS(ns(now))
		if k.Status == store.StatusRevoked {
			k.RevokedAt = k.CreatedAt
		}
		tag, err := tx.Exec(ctx, `INSERT INTO api_keys (hash, client_id, status, scopes, rate_limit_per_minute, created_ns, revoked_ns)
			VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (hash) DO NOTHING`,
			k.Hash, k.ClientID, k.Status, k.Scopes, k.RateLimitPerMinute, ns(k.CreatedAt), nullNS(k.RevokedAt))
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			outcome = store.ErrExists
			return nil
		}
		if memSubject != "" {
			// The memory may have been deleted since: then there is
			// nothing to link.
			if _, err := tx.Exec(ctx, `INSERT INTO memory_links (key_hash, tag, subject)
				SELECT $1, tag, subject FROM memory_users WHERE subject = $2
				ON CONFLICT (key_hash, tag) DO UPDATE SET subject = EXCLUDED.subject`, keyHash, memSubject); err != nil {
				return err
			}
		}
		_, err = tx.Exec(ctx, "UPDATE pairings SET used_ns = $2, key_hash = $3 WHERE code_hash = $1", codeHash, ns(now), keyHash)
		return err
	})
	if err != nil {
		return store.APIKey{}, err
	}
	if outcome != nil {
		return store.APIKey{}, fmt.Errorf("store: pairing: %w", outcome)
	}
	return k, nil
}

// PrunePairings deletes expired pairings; see store.Store.
func (s *Store) PrunePairings(now time.Time) (int, error) {
	var n int
	err := s.run("prune pairings", func(ctx context.Context) error {
		tag, err := s.pool.Exec(ctx, "DELETE FROM pairings WHERE expires_ns <= $1", ns(now))
		n = int(tag.RowsAffected())
		return err
	})
	return n, err
}
