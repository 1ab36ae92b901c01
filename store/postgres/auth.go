package postgres

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/replyd/replyd/store"
)

// Names in the settings table.
const (
	settingAdminKeyHash = "admin_key_hash"
	settingTOTPLastStep = "totp_last_step"
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

// SetAdminKeyHashIfAbsent stores hash when no admin key hash is stored, in
// one atomic statement (INSERT … ON CONFLICT DO NOTHING), so that of boxes
// starting together exactly one stores its hash; see store.Store.
func (s *Store) SetAdminKeyHashIfAbsent(hash string) (bool, error) {
	if hash == "" {
		return false, invalid("empty admin key hash")
	}
	var stored bool
	err := s.run("store admin key", func(ctx context.Context) error {
		tag, err := s.pool.Exec(ctx, `INSERT INTO settings (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING`, settingAdminKeyHash, hash)
		stored = err == nil && tag.RowsAffected() == 1
		return err
	})
	return stored, err
}

// SaveOTP makes codeHash scope's code, replacing only that scope's earlier
// one, in one atomic statement that also refuses a code issued less than
// resend after the scope's last (shared by every box); see store.Store.
func (s *Store) SaveOTP(scope, codeHash string, issuedAt, expiresAt time.Time, resend time.Duration) (time.Duration, error) {
	if scope == "" || codeHash == "" {
		return 0, invalid("empty OTP scope or hash")
	}
	var retry time.Duration
	err := s.run("save OTP", func(ctx context.Context) error {
		retry = 0
		var one int
		err := s.pool.QueryRow(ctx, `INSERT INTO otp_codes AS o (scope, hash, issued_ns, expires_ns) VALUES ($1, $2, $3, $4)
			ON CONFLICT (scope) DO UPDATE SET hash = excluded.hash, issued_ns = excluded.issued_ns, expires_ns = excluded.expires_ns
			WHERE excluded.issued_ns >= o.issued_ns + $5 OR excluded.issued_ns < o.issued_ns
			RETURNING 1`, scope, codeHash, ns(issuedAt), ns(expiresAt), int64(resend)).Scan(&one)
		if !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		var issued int64
		if err := s.pool.QueryRow(ctx, "SELECT issued_ns FROM otp_codes WHERE scope = $1", scope).Scan(&issued); err != nil {
			return err
		}
		retry = max(fromNS(issued).Add(resend).Sub(issuedAt), time.Nanosecond)
		return nil
	})
	return retry, err
}

// UseOTP spends scope's code when codeHash matches it; see store.Store. The
// hashes are compared in constant time here, and the code is deleted only by
// a statement that names the code it read, so of concurrent uses (on any
// box) exactly one succeeds. A wrong guess only reads.
func (s *Store) UseOTP(scope, codeHash string, now time.Time) (bool, error) {
	used := false
	err := s.run("use OTP", func(ctx context.Context) error {
		var hash string
		var issued, expires int64
		err := s.pool.QueryRow(ctx, "SELECT hash, issued_ns, expires_ns FROM otp_codes WHERE scope = $1", scope).Scan(&hash, &issued, &expires)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		if ns(now) >= expires || subtle.ConstantTimeCompare([]byte(hash), []byte(codeHash)) != 1 {
			return nil
		}
		tag, err := s.pool.Exec(ctx, "DELETE FROM otp_codes WHERE scope = $1 AND hash = $2 AND issued_ns = $3", scope, hash, issued)
		used = err == nil && tag.RowsAffected() == 1
		return err
	})
	return used, err
}

// DeleteOTP removes scope's code; see store.Store.
func (s *Store) DeleteOTP(scope string) error {
	return s.run("delete OTP", func(ctx context.Context) error {
		_, err := s.pool.Exec(ctx, "DELETE FROM otp_codes WHERE scope = $1", scope)
		return err
	})
}

// PruneOTPs deletes the expired codes; see store.Store.
func (s *Store) PruneOTPs(now time.Time) (int, error) {
	var n int
	err := s.run("prune OTPs", func(ctx context.Context) error {
		tag, err := s.pool.Exec(ctx, "DELETE FROM otp_codes WHERE expires_ns <= $1", ns(now))
		if err != nil {
			return err
		}
		n = int(tag.RowsAffected())
		_, err = s.pool.Exec(ctx, "DELETE FROM otp_guards WHERE scope <> '' AND locked_until_ns <= $1 AND last_fail_ns <= $2",
			ns(now), ns(now.Add(-store.OTPGuardIdle)))
		return err
	})
	return n, err
}

// UseTOTPStep records an accepted TOTP step in one atomic statement: the
// row changes only for a later step, and only a change returns a row.
func (s *Store) UseTOTPStep(step int64) (bool, error) {
	if step < 0 {
		return false, invalid("negative TOTP step")
	}
	ok := false
	err := s.run("use TOTP step", func(ctx context.Context) error {
		var one int
		err := s.pool.QueryRow(ctx, `INSERT INTO settings (name, value) VALUES ($1, $2::bigint::text)
			ON CONFLICT (name) DO UPDATE SET value = excluded.value
			WHERE settings.value::bigint < excluded.value::bigint
			RETURNING 1`, settingTOTPLastStep, step).Scan(&one)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		ok = err == nil
		return err
	})
	return ok, err
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

// OTPLock reads the end of the pause of guard scope; see store.Store.
func (s *Store) OTPLock(scope string, now time.Time) (time.Time, error) {
	var until time.Time
	err := s.run("read OTP lock", func(ctx context.Context) error {
		var v int64
		err := s.pool.QueryRow(ctx, "SELECT locked_until_ns FROM otp_guards WHERE scope = $1", scope).Scan(&v)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err == nil && ns(now) < v {
			until = fromNS(v)
		}
		return err
	})
	return until, err
}

// OTPFailed counts a wrong code under the row lock of the scope's guard
// row, so that boxes failing at once each see the other's count; see
// store.Store.
func (s *Store) OTPFailed(scope, source string, now time.Time, rule store.OTPLockRule) (time.Time, error) {
	var until time.Time
	err := s.tx("count OTP failure", func(ctx context.Context, tx pgx.Tx) error {
		until = time.Time{}
		if _, err := tx.Exec(ctx, `INSERT INTO otp_guards (scope, fails, level, last_fail_ns, locked_until_ns) VALUES ($1, 0, 0, 0, 0)
			ON CONFLICT (scope) DO NOTHING`, scope); err != nil {
			return err
		}
		g, err := scanOTPGuard(tx.QueryRow(ctx, "SELECT fails, level, last_fail_ns, locked_until_ns, sources FROM otp_guards WHERE scope = $1 FOR UPDATE", scope))
		if err != nil {
			return err
		}
		g, started := rule.Next(g, source, now)
		if started {
			until = g.LockedUntil
		}
		_, err = tx.Exec(ctx, "UPDATE otp_guards SET fails = $1, level = $2, last_fail_ns = $3, locked_until_ns = $4, sources = $5 WHERE scope = $6",
			g.Fails, g.Level, zeroNS(g.LastFail), zeroNS(g.LockedUntil), nonNil(g.Sources), scope)
		return err
	})
	return until, err
}

// scanOTPGuard reads the columns fails, level, last_fail_ns,
// locked_until_ns, sources of otp_guards, after the columns lead scans.
func scanOTPGuard(row pgx.Row, lead ...any) (store.OTPGuard, error) {
	var g store.OTPGuard
	var last, locked int64
	if err := row.Scan(append(lead, &g.Fails, &g.Level, &last, &locked, &g.Sources)...); err != nil {
		return g, err
	}
	if last != 0 {
		g.LastFail = fromNS(last)
	}
	if locked != 0 {
		g.LockedUntil = fromNS(locked)
	}
	if len(g.Sources) == 0 {
		g.Sources = nil
	}
	return g, nil
}

// nonNil is ss, or an empty slice for nil (a NOT NULL text[]).
func nonNil(ss []string) []string {
	if ss == nil {
		return []string{}
	}
	return ss
}

// zeroNS is ns with the zero Time as 0 (the guard row's "never").
func zeroNS(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return ns(t)
}
