package store

import (
	"crypto/subtle"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// AdminKeyHash returns the stored SHA-256 hex of the admin key, or "" when
// none is set.
func (db *DB) AdminKeyHash() (string, error) {
	var h string
	err := db.view(func(tx *bolt.Tx) error {
		h = string(tx.Bucket(bucketMeta).Get(metaAdminKeyHash))
		return nil
	})
	return h, err
}

// SetAdminKeyHash replaces the admin key hash; "" removes it, which disables
// X-ADMIN-KEY authentication.
func (db *DB) SetAdminKeyHash(hash string) error {
	return db.update(func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		if hash == "" {
			return meta.Delete(metaAdminKeyHash)
		}
		return meta.Put(metaAdminKeyHash, []byte(hash))
	})
}

// otpRecord is the one outstanding OTP code.
type otpRecord struct {
	Hash      string    `json:"hash"`
	IssuedAt  time.Time `json:"issued_at"`
	ExpiresAt time.Time `json:"expires_at"`
	Attempts  int       `json:"attempts"` // wrong tries so far
}

// SaveOTP makes codeHash the one outstanding code, replacing any previous
// code and resetting the wrong-attempt count.
func (db *DB) SaveOTP(codeHash string, issuedAt, expiresAt time.Time) error {
	if codeHash == "" {
		return invalid("empty OTP hash")
	}
	val, err := json.Marshal(otpRecord{Hash: codeHash, IssuedAt: issuedAt, ExpiresAt: expiresAt})
	if err != nil {
		return fmt.Errorf("store: encode OTP: %w", err)
	}
	return db.update(func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		if err := meta.Put(metaOTP, val); err != nil {
			return err
		}
		return meta.Put(metaOTPLastIssued, u64(nanos(issuedAt)))
	})
}

// LastOTPIssued returns when the most recent code was issued, even if it has
// since been used, burned or has expired, so that callers can throttle
// sending. It is the zero Time when no code was ever issued.
func (db *DB) LastOTPIssued() (time.Time, error) {
	var t time.Time
	err := db.view(func(tx *bolt.Tx) error {
		if v := tx.Bucket(bucketMeta).Get(metaOTPLastIssued); len(v) == 8 {
			t = time.Unix(0, int64(binary.BigEndian.Uint64(v))).UTC()
		}
		return nil
	})
	return t, err
}

// VerifyOTP checks codeHash against the outstanding code in constant time:
//   - OTPNone: no code is outstanding;
//   - OTPExpired: now is at or past its expiry; the code is deleted;
//   - OTPOK: it matches; the code is deleted (single use);
//   - OTPWrong: it does not match; the wrong try is counted;
//   - OTPBurned: it does not match and this was wrong try number maxAttempts;
//     the code is deleted.
//
// A maxAttempts below 1 is treated as 1.
func (db *DB) VerifyOTP(codeHash string, now time.Time, maxAttempts int) (OTPResult, error) {
	if maxAttempts < 1 {
		maxAttempts = 1
	}
	res := OTPNone
	err := db.update(func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		v := meta.Get(metaOTP)
		if v == nil {
			res = OTPNone
			return nil
		}
		var rec otpRecord
		if err := json.Unmarshal(v, &rec); err != nil {
			return fmt.Errorf("store: decode OTP: %w", err)
		}
		if !now.Before(rec.ExpiresAt) {
			res = OTPExpired
			return meta.Delete(metaOTP)
		}
		if subtle.ConstantTimeCompare([]byte(rec.Hash), []byte(codeHash)) == 1 {
			res = OTPOK
			return meta.Delete(metaOTP)
		}
		rec.Attempts++
		if rec.Attempts >= maxAttempts {
			res = OTPBurned
			return meta.Delete(metaOTP)
		}
		res = OTPWrong
		val, err := json.Marshal(rec)
		if err != nil {
			return err
		}
		return meta.Put(metaOTP, val)
	})
	if err != nil {
		return OTPNone, err
	}
	return res, nil
}

// CreateSession stores an admin session under the SHA-256 hex of its token.
// It returns ErrExists when the hash is already stored.
func (db *DB) CreateSession(tokenHash string, expiresAt time.Time) error {
	if tokenHash == "" {
		return invalid("empty session hash")
	}
	return db.update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketSessions)
		if b.Get([]byte(tokenHash)) != nil {
			return fmt.Errorf("store: session: %w", ErrExists)
		}
		return b.Put([]byte(tokenHash), u64(nanos(expiresAt)))
	})
}

// SessionValid reports whether a session with this token hash exists and
// now is before its expiry. It never writes: expired sessions stay until
// PruneSessions or DeleteSession removes them.
func (db *DB) SessionValid(tokenHash string, now time.Time) (bool, error) {
	var ok bool
	err := db.view(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketSessions).Get([]byte(tokenHash))
		ok = len(v) == 8 && nanos(now) < binary.BigEndian.Uint64(v)
		return nil
	})
	return ok, err
}

// DeleteSession removes the session (logout). Deleting an unknown session is
// not an error.
func (db *DB) DeleteSession(tokenHash string) error {
	return db.update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketSessions).Delete([]byte(tokenHash))
	})
}

// PruneSessions deletes every session whose expiry is at or before now and
// returns how many it deleted. Sessions are few, so this is one transaction.
func (db *DB) PruneSessions(now time.Time) (int, error) {
	n := 0
	err := db.update(func(tx *bolt.Tx) error {
		n = 0
		b := tx.Bucket(bucketSessions)
		var dead [][]byte
		cut := nanos(now)
		err := b.ForEach(func(k, v []byte) error {
			if len(v) != 8 || binary.BigEndian.Uint64(v) <= cut {
				dead = append(dead, append([]byte(nil), k...))
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, k := range dead {
			if err := b.Delete(k); err != nil {
				return err
			}
		}
		n = len(dead)
		return nil
	})
	return n, err
}
