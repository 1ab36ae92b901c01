package bolt

import (
	"encoding/json"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/replyd/replyd/store"
)

// metaOTPGuard holds the JSON OTPGuard of the global scope ""; the guards
// of other scopes are in bucketOTPGuards.
var metaOTPGuard = []byte("otp_guard")

// OTPLock returns the end of the current pause of guard scope, or the zero
// Time when there is none at now.
func (db *DB) OTPLock(scope string, now time.Time) (time.Time, error) {
	var g store.OTPGuard
	err := db.view(func(tx *bolt.Tx) error {
		var err error
		g, err = getOTPGuard(tx, scope)
		return err
	})
	if err != nil || !now.Before(g.LockedUntil) {
		return time.Time{}, err
	}
	return g.LockedUntil, nil
}

// OTPFailed counts one wrong login code from source at now under rule in
// guard scope and returns the end of the pause it started (the zero Time
// when it started none).
func (db *DB) OTPFailed(scope, source string, now time.Time, rule store.OTPLockRule) (time.Time, error) {
	var until time.Time
	err := db.update(func(tx *bolt.Tx) error {
		until = time.Time{}
		g, err := getOTPGuard(tx, scope)
		if err != nil {
			return err
		}
		g, started := rule.Next(g, source, now)
		if started {
			until = g.LockedUntil
		}
		return putOTPGuard(tx, scope, g)
	})
	return until, err
}

func getOTPGuard(tx *bolt.Tx, scope string) (store.OTPGuard, error) {
	var g store.OTPGuard
	var v []byte
	if scope == "" {
		v = tx.Bucket(bucketMeta).Get(metaOTPGuard)
	} else if b := tx.Bucket(bucketOTPGuards); b != nil {
		v = b.Get([]byte(scope))
	}
	if v != nil {
		if err := json.Unmarshal(v, &g); err != nil {
			return g, fmt.Errorf("store: decode OTP guard: %w", err)
		}
	}
	return g, nil
}

func putOTPGuard(tx *bolt.Tx, scope string, g store.OTPGuard) error {
	v, err := json.Marshal(g)
	if err != nil {
		return err
	}
	if scope == "" {
		return tx.Bucket(bucketMeta).Put(metaOTPGuard, v)
	}
	return tx.Bucket(bucketOTPGuards).Put([]byte(scope), v)
}

// pruneOTPGuards deletes the guards of scopes other than "" that are idle
// at now (OTPGuard.Idle).
func pruneOTPGuards(tx *bolt.Tx, now time.Time) error {
	b := tx.Bucket(bucketOTPGuards)
	if b == nil {
		return nil
	}
	_, err := deleteWhere(b, func(_, v []byte) bool {
		var g store.OTPGuard
		return json.Unmarshal(v, &g) != nil || g.Idle(now)
	})
	return err
}

// otpGuards returns the guards of scopes other than "", by scope; nil when
// there are none.
func otpGuards(tx *bolt.Tx) (map[string]store.OTPGuard, error) {
	var out map[string]store.OTPGuard
	err := eachJSON(tx.Bucket(bucketOTPGuards), nil, "OTP guard", func(k []byte, g store.OTPGuard) error {
		if out == nil {
			out = map[string]store.OTPGuard{}
		}
		out[string(k)] = g
		return nil
	})
	return out, err
}
