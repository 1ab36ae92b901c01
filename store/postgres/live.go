package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/replyd/replyd/store"
)

// CreateLiveTicket stores t, deleting the expired tickets in the same
// transaction; see store.Store.
func (s *Store) CreateLiveTicket(t store.LiveTicket, now time.Time) error {
	if err := t.Valid(now); err != nil {
		return err
	}
	return s.tx("create live ticket", func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "DELETE FROM live_tickets WHERE expires_ns <= $1", ns(now)); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `INSERT INTO live_tickets (hash, key_hash, created_ns, expires_ns) VALUES ($1, $2, $3, $4)
			ON CONFLICT (hash) DO NOTHING`, t.Hash, t.KeyHash, ns(t.CreatedAt), ns(t.ExpiresAt))
		if err == nil && tag.RowsAffected() == 0 {
			err = fmt.Errorf("store: live ticket: %w", store.ErrExists)
		}
		return err
	})
}

// TakeLiveTicket deletes the ticket and returns it in one statement, so
// that exactly one box gets it; see store.Store.
func (s *Store) TakeLiveTicket(hash string, now time.Time) (store.LiveTicket, error) {
	t := store.LiveTicket{Hash: hash}
	var created, expires int64
	err := s.run("take live ticket", func(ctx context.Context) error {
		return s.pool.QueryRow(ctx, "DELETE FROM live_tickets WHERE hash = $1 RETURNING key_hash, created_ns, expires_ns", hash).
			Scan(&t.KeyHash, &created, &expires)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return store.LiveTicket{}, fmt.Errorf("store: live ticket: %w", store.ErrNotFound)
	}
	if err != nil {
		return store.LiveTicket{}, err
	}
	t.CreatedAt, t.ExpiresAt = fromNS(created), fromNS(expires)
	if !now.Before(t.ExpiresAt) {
		return store.LiveTicket{}, fmt.Errorf("store: live ticket: %w", store.ErrExpired)
	}
	return t, nil
}

// SetLiveOff switches live listening off or on for a key; see store.Store.
func (s *Store) SetLiveOff(keyHash string, off bool) error {
	return s.tx("set live off", func(ctx context.Context, tx pgx.Tx) error {
		var exists bool
		if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM api_keys WHERE hash = $1)", keyHash).Scan(&exists); err != nil {
			return err
		}
		if !exists {
			return fmt.Errorf("store: key: %w", store.ErrNotFound)
		}
		var err error
		if off {
			_, err = tx.Exec(ctx, "INSERT INTO live_off (key_hash) VALUES ($1) ON CONFLICT DO NOTHING", keyHash)
		} else {
			_, err = tx.Exec(ctx, "DELETE FROM live_off WHERE key_hash = $1", keyHash)
		}
		return err
	})
}

// LiveOff reports whether live listening is off for keyHash; see
// store.Store.
func (s *Store) LiveOff(keyHash string) (bool, error) {
	var off bool
	err := s.run("read live off", func(ctx context.Context) error {
		return s.pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM live_off WHERE key_hash = $1)", keyHash).Scan(&off)
	})
	return off, err
}
