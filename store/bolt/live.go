package bolt

import (
	"encoding/json"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/replyd/replyd/store"
)

// CreateLiveTicket stores t under t.Hash, deleting the expired tickets in
// the same transaction; see store.Store.
func (db *DB) CreateLiveTicket(t store.LiveTicket, now time.Time) error {
	if err := t.Valid(now); err != nil {
		return err
	}
	val, err := json.Marshal(t)
	if err != nil {
		return fmt.Errorf("store: encode live ticket: %w", err)
	}
	return db.update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketLiveTickets)
		_, err := deleteWhere(b, func(_, v []byte) bool {
			var old store.LiveTicket
			return json.Unmarshal(v, &old) != nil || !now.Before(old.ExpiresAt)
		})
		if err != nil {
			return err
		}
		if b.Get([]byte(t.Hash)) != nil {
			return fmt.Errorf("store: live ticket: %w", store.ErrExists)
		}
		return b.Put([]byte(t.Hash), val)
	})
}

// TakeLiveTicket removes and returns the ticket stored under hash; see
// store.Store. A read-only look comes first: unknown tickets (guesses,
// replays) are the common case under attack and cost no write.
func (db *DB) TakeLiveTicket(hash string, now time.Time) (store.LiveTicket, error) {
	var t store.LiveTicket
	if hash == "" {
		return t, fmt.Errorf("store: live ticket: %w", store.ErrNotFound)
	}
	var found bool
	if err := db.view(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketLiveTickets)
		found = b != nil && b.Get([]byte(hash)) != nil
		return nil
	}); err != nil {
		return t, err
	}
	if !found {
		return t, fmt.Errorf("store: live ticket: %w", store.ErrNotFound)
	}
	var outcome error
	err := db.update(func(tx *bolt.Tx) error {
		outcome = nil
		b := tx.Bucket(bucketLiveTickets)
		v := b.Get([]byte(hash))
		if v == nil {
			outcome = store.ErrNotFound
			return nil
		}
		if err := json.Unmarshal(v, &t); err != nil {
			return fmt.Errorf("store: decode live ticket: %w", err)
		}
		if !now.Before(t.ExpiresAt) {
			outcome = store.ErrExpired
		}
		return b.Delete([]byte(hash))
	})
	if err != nil {
		return store.LiveTicket{}, err
	}
	if outcome != nil {
		return store.LiveTicket{}, fmt.Errorf("store: live ticket: %w", outcome)
	}
	return t, nil
}

// SetLiveOff switches live listening off or on for a key; see store.Store.
func (db *DB) SetLiveOff(keyHash string, off bool) error {
	return db.update(func(tx *bolt.Tx) error {
		if _, err := getKey(tx, keyHash); err != nil {
			return err
		}
		b := tx.Bucket(bucketLiveOff)
		if off {
			return b.Put([]byte(keyHash), nil)
		}
		return b.Delete([]byte(keyHash))
	})
}

// LiveOff reports whether live listening is off for keyHash; see
// store.Store.
func (db *DB) LiveOff(keyHash string) (bool, error) {
	var off bool
	err := db.view(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketLiveOff)
		off = b != nil && keyHash != "" && b.Get([]byte(keyHash)) != nil
		return nil
	})
	return off, err
}
