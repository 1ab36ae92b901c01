package postgres

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/replyd/replyd/store"
)

// Names in the settings table.
const (
	settingAdminKeyHash  = "admin_key_hash"
	settingOTPLastIssued = "otp_last_issued_ns"
)

// AdminKeyHash reads the admin key hash; see store.Store.
func (s *Store) AdminKeyHash() (string, error) {
	var h string
	err := s.run("read admin key", func(ctx context.Context) error {
		err := s.pool.QueryRow(ctx, "SELECT value FROM settings WHERE name = $1", settingAdminKeyHash).Scan(&h)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		return err
	})
	return h, err
}

// SetAdminKeyHash replaces or ("") removes the admin key hash.
func (s *Store) SetAdminKeyHash(hash string) error {
	return s.run("store admin key", func(ctx context.Context) error {
		var err error
		if hash == "" {
			_, err = s.pool.Exec(ctx, "DELETE FROM settings WHERE name = $1", settingAdminKeyHash)
		} else {
			_, err = s.pool.Exec(ctx, `INSERT INTO settings (name, value) VALUES ($1, $2)
				ON CONFLICT (name) DO UPDATE SET value = excluded.value`, settingAdminKeyHash, hash)
		}
		return err
	})
}

// SaveOTP replaces the outstanding code and records when it was issued, in
// one statement.
func (s *Store) SaveOTP(codeHash string, issuedAt, expiresAt time.Time) error {
	if codeHash == "" {
		return invalid("empty OTP hash")
	}
	return s.run("save OTP", func(ctx context.Context) error {
		_, err := s.pool.Exec(ctx, `WITH code AS (
				INSERT INTO otp (id, hash, issued_ns, expires_ns, attempts) VALUES (1, $1, $2, $3, 0)
				ON CONFLICT (id) DO UPDATE SET hash = excluded.hash, issued_ns = excluded.issued_ns,
					expires_ns = excluded.expires_ns, attempts = 0)
			INSERT INTO settings (name, value) VALUES ($4, $2::bigint::text)
			ON CONFLICT (name) DO UPDATE SET value = excluded.value`,
			codeHash, ns(issuedAt), ns(expiresAt), settingOTPLastIssued)
		return err
	})
}

// LastOTPIssued reads when the last code was issued; see store.Store.
func (s *Store) LastOTPIssued() (time.Time, error) {
	var t time.Time
	err := s.run("read OTP issue time", func(ctx context.Context) error {
		var v string
		err := s.pool.QueryRow(ctx, "SELECT value FROM settings WHERE name = $1", settingOTPLastIssued).Scan(&v)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return fmt.Errorf("decode %s %q: %w", settingOTPLastIssued, v, err)
		}
		t = fromNS(n)
		return nil
	})
	return t, err
}

// VerifyOTP checks a code; see store.Store. Every verification first counts
// itself with one atomic increment, which gives each concurrent verifier (on
// any box) a distinct attempt number; the hashes are then compared in
// constant time here, and a code is deleted only by a statement that names
// the code it read, so exactly one verifier uses, burns or expires it.
func (s *Store) VerifyOTP(codeHash string, now time.Time, maxAttempts int) (store.OTPResult, error) {
	if maxAttempts < 1 {
		maxAttempts = 1
	}
	res := store.OTPNone
	err := s.run("verify OTP", func(ctx context.Context) error {
		var hash string
		var issued, expires int64
		var attempts int
		err := s.pool.QueryRow(ctx, `UPDATE otp SET attempts = attempts + 1 WHERE id = 1
			RETURNING hash, issued_ns, expires_ns, attempts`).Scan(&hash, &issued, &expires, &attempts)
		if errors.Is(err, pgx.ErrNoRows) {
			res = store.OTPNone
			return nil
		}
		if err != nil {
			return err
		}
		// consume deletes the code read above; false when another verifier
		// (or a new SaveOTP) got there first.
		consume := func() (bool, error) {
			tag, err := s.pool.Exec(ctx, "DELETE FROM otp WHERE id = 1 AND hash = $1 AND issued_ns = $2", hash, issued)
			return tag.RowsAffected() == 1, err
		}
		match := subtle.ConstantTimeCompare([]byte(hash), []byte(codeHash)) == 1
		var outcome store.OTPResult
		switch {
		case ns(now) >= expires:
			outcome = store.OTPExpired
		case attempts > maxAttempts:
			// Earlier verifiers used up the attempts; the one that made the
			// last wrong try is burning the code.
			res = store.OTPNone
			return nil
		case match:
			outcome = store.OTPOK
		case attempts == maxAttempts:
			outcome = store.OTPBurned
		default:
			res = store.OTPWrong
			return nil
		}
		ok, err := consume()
		if err != nil {
			return err
		}
		res = store.OTPNone
		if ok {
			res = outcome
		}
		return nil
	})
	if err != nil {
		return store.OTPNone, err
	}
	return res, nil
}

// CreateSession stores a session; see store.Store.
func (s *Store) CreateSession(tokenHash string, expiresAt time.Time) error {
	if tokenHash == "" {
		return invalid("empty session hash")
	}
	return s.run("create session", func(ctx context.Context) error {
		tag, err := s.pool.Exec(ctx, `INSERT INTO sessions (token_hash, expires_ns) VALUES ($1, $2)
			ON CONFLICT (token_hash) DO NOTHING`, tokenHash, ns(expiresAt))
		if err == nil && tag.RowsAffected() == 0 {
			err = fmt.Errorf("store: session: %w", store.ErrExists)
		}
		return err
	})
}

// SessionValid reads the session's expiry; see store.Store.
func (s *Store) SessionValid(tokenHash string, now time.Time) (bool, error) {
	var ok bool
	err := s.run("check session", func(ctx context.Context) error {
		return s.pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM sessions WHERE token_hash = $1 AND expires_ns > $2)", tokenHash, ns(now)).Scan(&ok)
	})
	return ok, err
}

// DeleteSession removes a session; see store.Store.
func (s *Store) DeleteSession(tokenHash string) error {
	return s.run("delete session", func(ctx context.Context) error {
		_, err := s.pool.Exec(ctx, "DELETE FROM sessions WHERE token_hash = $1", tokenHash)
		return err
	})
}

// PruneSessions deletes expired sessions; see store.Store.
func (s *Store) PruneSessions(now time.Time) (int, error) {
	var n int
	err := s.run("prune sessions", func(ctx context.Context) error {
		tag, err := s.pool.Exec(ctx, "DELETE FROM sessions WHERE expires_ns <= $1", ns(now))
		n = int(tag.RowsAffected())
		return err
	})
	return n, err
}
