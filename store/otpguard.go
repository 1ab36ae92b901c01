package store

import (
	"encoding/json"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// OTPLockRule is how wrong login codes pause login by code for everyone:
// every Every wrong codes start a pause of Base, doubled once for each
// earlier pause, at most Max; the doubling steps back once for every Decay
// without a wrong code. The stores keep the state (OTPGuard) so that every
// box of a cluster shares one pause.
type OTPLockRule struct {
	Every int
	Base  time.Duration
	Max   time.Duration
	Decay time.Duration
}

// OTPGuard is the shared state of the pause.
type OTPGuard struct {
	Fails       int       // wrong codes since the last pause began
	Level       int       // pauses so far, less the decay
	LastFail    time.Time // the latest wrong code
	LockedUntil time.Time // the end of the current or last pause
}

// Length is the pause at level: Base doubled level times, at most Max.
func (r OTPLockRule) Length(level int) time.Duration {
	d := r.Base
	for i := 0; i < level && d < r.Max; i++ {
		d *= 2
	}
	return min(d, r.Max)
}

// Next returns the state after a wrong code at now, and whether that code
// started a pause.
func (r OTPLockRule) Next(g OTPGuard, now time.Time) (OTPGuard, bool) {
	if !g.LastFail.IsZero() && now.After(g.LastFail) && r.Decay > 0 {
		g.Level = max(0, g.Level-int(now.Sub(g.LastFail)/r.Decay))
	}
	g.LastFail = now
	g.Fails++
	if g.Fails < max(r.Every, 1) {
		return g, false
	}
	g.Fails = 0
	g.LockedUntil = now.Add(r.Length(g.Level))
	g.Level++
	return g, true
}

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
