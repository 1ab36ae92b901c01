package bolt

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/replyd/replyd/internal/secret"
)

// otpRecord is the code outstanding for one scope.
type otpRecord struct {
	Hash      string    `json:"hash"`
	IssuedAt  time.Time `json:"issued_at"`
	ExpiresAt time.Time `json:"expires_at"`
}

// SaveOTP makes codeHash the code outstanding for scope, unless the scope's
// code was issued less than resend ago; see Store.
func (db *DB) SaveOTP(scope, codeHash string, issuedAt, expiresAt time.Time, resend time.Duration) (time.Duration, error) {
	if scope == "" || codeHash == "" {
		return 0, invalid("empty OTP scope or hash")
	}
	val, err := json.Marshal(otpRecord{Hash: codeHash, IssuedAt: issuedAt, ExpiresAt: expiresAt})
	if err != nil {
		return 0, fmt.Errorf("store: encode OTP: %w", err)
	}
	var retry time.Duration
	err = db.update(func(tx *bolt.Tx) error {
		retry = 0
		b, err := tx.CreateBucketIfNotExists(bucketOTP)
		if err != nil {
			return err
		}
		rec, ok, err := getOTP(tx, scope)
		if err != nil {
			return err
		}
		if ok && !issuedAt.Before(rec.IssuedAt) && issuedAt.Sub(rec.IssuedAt) < resend {
			retry = rec.IssuedAt.Add(resend).Sub(issuedAt)
			return nil
		}
		return b.Put([]byte(scope), val)
	})
	return retry, err
}

// UseOTP spends scope's code when codeHash matches it (compared in constant
// time) and now is before its expiry, and reports whether it did. A wrong,
// expired or missing code is false and writes nothing: wrong guesses cost no
// disk and never touch the code, so only its lifetime and the caller's
// attempt limits end it.
func (db *DB) UseOTP(scope, codeHash string, now time.Time) (bool, error) {
	match := false
	err := db.view(func(tx *bolt.Tx) error {
		rec, ok, err := getOTP(tx, scope)
		match = ok && now.Before(rec.ExpiresAt) && secret.Equal(rec.Hash, codeHash)
		return err
	})
	if err != nil || !match {
		return false, err
	}
	used := false
	err = db.update(func(tx *bolt.Tx) error {
		// Check again under the write lock: two requests with the right
		// code must not both succeed.
		rec, ok, err := getOTP(tx, scope)
		if err != nil || !ok || !now.Before(rec.ExpiresAt) || !secret.Equal(rec.Hash, codeHash) {
			return err
		}
		used = true
		return tx.Bucket(bucketOTP).Delete([]byte(scope))
	})
	return used && err == nil, err
}

// getOTP reads scope's record inside tx.
func getOTP(tx *bolt.Tx, scope string) (otpRecord, bool, error) {
	var rec otpRecord
	b := tx.Bucket(bucketOTP)
	if b == nil {
		return rec, false, nil
	}
	v := b.Get([]byte(scope))
	if v == nil {
		return rec, false, nil
	}
	if err := json.Unmarshal(v, &rec); err != nil {
		return rec, false, fmt.Errorf("store: decode OTP: %w", err)
	}
	return rec, true, nil
}

// DeleteOTP removes scope's code, if any (a code that could not be
// delivered).
func (db *DB) DeleteOTP(scope string) error {
	return db.update(func(tx *bolt.Tx) error {
		if b := tx.Bucket(bucketOTP); b != nil {
			return b.Delete([]byte(scope))
		}
		return nil
	})
}

// PruneOTPs deletes every code whose expiry is at or before now and returns
// how many it deleted.
func (db *DB) PruneOTPs(now time.Time) (int, error) {
	n := 0
	err := db.update(func(tx *bolt.Tx) error {
		n = 0
		b := tx.Bucket(bucketOTP)
		if b == nil {
			return nil
		}
		var err error
		n, err = deleteWhere(b, func(_, v []byte) bool {
			var rec otpRecord
			return json.Unmarshal(v, &rec) != nil || !now.Before(rec.ExpiresAt)
		})
		return err
	})
	return n, err
}

// UseTOTPStep records that a TOTP code of time step step (Unix time / 30 s)
// was accepted, and reports whether it may be: true only when step is later
// than every step accepted before, so each code works once, even within the
// ±1 step tolerance and across the boxes sharing the store.
func (db *DB) UseTOTPStep(step int64) (bool, error) {
	if step < 0 {
		return false, invalid("negative TOTP step")
	}
	ok := false
	err := db.update(func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		if v := meta.Get(metaTOTPLastStep); len(v) == 8 && int64(binary.BigEndian.Uint64(v)) >= step {
			return nil
		}
		ok = true
		return meta.Put(metaTOTPLastStep, u64(uint64(step)))
	})
	return ok && err == nil, err
}
