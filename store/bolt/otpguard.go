package bolt

import (
	"encoding/json"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	. "github.com/replyd/replyd/store"
)

// metaOTPGuard holds the JSON OTPGuard.
var metaOTPGuard = []byte("otp_guard")

// OTPLock returns the end of the current pause of login by code, or the
// zero Time when there is none at now.
func (db *DB) OTPLock(now time.Time) (time.Time, error) {
	var g OTPGuard
	err := db.view(func(tx *bolt.Tx) error {
		var err error
		g, err = getOTPGuard(tx)
		return err
	})
	if err != nil || !now.Before(g.LockedUntil) {
		return time.Time{}, err
	}
	return g.LockedUntil, nil
}

// OTPFailed counts one wrong login code at now under rule and returns the
// end of the pause it started (the zero Time when it started none).
func (db *DB) OTPFailed(now time.Time, rule OTPLockRule) (time.Time, error) {
	var until time.Time
	err := db.update(func(tx *bolt.Tx) error {
		until = time.Time{}
		g, err := getOTPGuard(tx)
		if err != nil {
			return err
		}
		g, started := rule.Next(g, now)
		if started {
			until = g.LockedUntil
		}
		return putOTPGuard(tx, g)
	})
	return until, err
}

func getOTPGuard(tx *bolt.Tx) (OTPGuard, error) {
	var g OTPGuard
	if v := tx.Bucket(bucketMeta).Get(metaOTPGuard); v != nil {
		if err := json.Unmarshal(v, &g); err != nil {
			return g, fmt.Errorf("store: decode OTP guard: %w", err)
		}
	}
	return g, nil
}

func putOTPGuard(tx *bolt.Tx, g OTPGuard) error {
	v, err := json.Marshal(g)
	if err != nil {
		return err
	}
	return tx.Bucket(bucketMeta).Put(metaOTPGuard, v)
}
