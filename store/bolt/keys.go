package bolt

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/replyd/replyd/store"
)

// CreateKey stores k under k.Hash. It returns ErrExists when the hash is
// already stored (revoked or not). A zero CreatedAt is set from the clock and
// an empty Status becomes StatusActive.
func (db *DB) CreateKey(k store.APIKey) error {
	k, err := k.Created(db.now())
	if err != nil {
		return err
	}
	val, err := json.Marshal(k)
	if err != nil {
		return fmt.Errorf("store: encode key: %w", err)
	}
	return db.update(func(tx *bolt.Tx) error {
		keys := tx.Bucket(bucketKeys)
		if keys.Get([]byte(k.Hash)) != nil {
			return fmt.Errorf("store: key %s: %w", shortHash(k.Hash), store.ErrExists)
		}
		if err := keys.Put([]byte(k.Hash), val); err != nil {
			return err
		}
		byAge := tx.Bucket(bucketKeysByAge)
		seq, err := byAge.NextSequence()
		if err != nil {
			return err
		}
		return byAge.Put(timeKey(k.CreatedAt, seq), []byte(k.Hash))
	})
}

// GetKey returns the key stored under hash, or ErrNotFound.
func (db *DB) GetKey(hash string) (store.APIKey, error) {
	var k store.APIKey
	err := db.view(func(tx *bolt.Tx) error {
		var err error
		k, err = getKey(tx, hash)
		return err
	})
	return k, err
}

// getKey decodes the key stored under hash inside tx.
func getKey(tx *bolt.Tx, hash string) (store.APIKey, error) {
	var k store.APIKey
	v := tx.Bucket(bucketKeys).Get([]byte(hash))
	if v == nil {
		return k, fmt.Errorf("store: key %s: %w", shortHash(hash), store.ErrNotFound)
	}
	if err := json.Unmarshal(v, &k); err != nil {
		return k, fmt.Errorf("store: decode key %s: %w", shortHash(hash), err)
	}
	return k, nil
}

// ListKeys returns up to limit keys, newest CreatedAt first (keys created in
// the same nanosecond: last created first). Revoked keys are skipped unless
// includeRevoked is set. A limit <= 0 means no limit.
func (db *DB) ListKeys(limit int, includeRevoked bool) ([]store.APIKey, error) {
	out := []store.APIKey{}
	err := db.view(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketKeysByAge).Cursor()
		for k, hash := c.Last(); k != nil; k, hash = c.Prev() {
			key, err := getKey(tx, string(hash))
			if err != nil {
				return err
			}
			if !includeRevoked && key.Status == store.StatusRevoked {
				continue
			}
			out = append(out, key)
			if limit > 0 && len(out) >= limit {
				break
			}
		}
		return nil
	})
	return out, err
}

// RevokeKey marks the key revoked at at and returns the stored record. It is
// idempotent: revoking a revoked key changes nothing and returns the record
// with its first RevokedAt. An unknown hash gives ErrNotFound.
func (db *DB) RevokeKey(hash string, at time.Time) (store.APIKey, error) {
	var k store.APIKey
	err := db.update(func(tx *bolt.Tx) error {
		var err error
		if k, err = getKey(tx, hash); err != nil {
			return err
		}
		if k.Status == store.StatusRevoked && !k.RevokedAt.IsZero() {
			return nil
		}
		k.Status = store.StatusRevoked
		k.RevokedAt = at
		return putKey(tx, k)
	})
	return k, err
}

// TouchKey records that the key was used at at. To spare an fsync on every
// authenticated request it persists at most once per minute per key (tracked
// in memory, so a restart allows one early write); calls inside that minute
// return nil without touching the file and without checking that the key
// exists. A persisted touch of an unknown key gives ErrNotFound. LastUsedAt
// never moves backwards.
func (db *DB) TouchKey(hash string, at time.Time) error {
	if !db.touches.Begin(hash, at) {
		return nil
	}
	err := db.update(func(tx *bolt.Tx) error {
		k, err := getKey(tx, hash)
		if err != nil {
			return err
		}
		if !at.After(k.LastUsedAt) {
			return nil
		}
		k.LastUsedAt = at
		return putKey(tx, k)
	})
	if err != nil {
		db.touches.Failed(hash, at)
	}
	return err
}

// putKey encodes and stores k inside tx.
func putKey(tx *bolt.Tx, k store.APIKey) error {
	val, err := json.Marshal(k)
	if err != nil {
		return fmt.Errorf("store: encode key: %w", err)
	}
	return tx.Bucket(bucketKeys).Put([]byte(k.Hash), val)
}

// shortHash shortens a hash for error messages. Hashes are not secret, but
// long ones clutter logs.
func shortHash(h string) string {
	if len(h) > 12 {
		return h[:12] + "…"
	}
	return h
}

// ListKeysPage returns the page of ListKeys after the position after; see
// store.Store. Positions are the keys_by_age keys (created nanos ‖ seq).
func (db *DB) ListKeysPage(after *store.KeyCursor, limit int, includeRevoked bool) ([]store.APIKey, *store.KeyCursor, error) {
	if limit < 1 {
		return nil, nil, invalid("a page holds at least one key")
	}
	out := []store.APIKey{}
	var next *store.KeyCursor
	err := db.view(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketKeysByAge).Cursor()
		var k, hash []byte
		if after == nil {
			k, hash = c.Last()
		} else {
			// The first position before after: Seek finds the first at or
			// past it (or none), so one step back.
			pos := make([]byte, 16)
			binary.BigEndian.PutUint64(pos, uint64(after.CreatedNS))
			binary.BigEndian.PutUint64(pos[8:], uint64(after.Seq))
			if k, _ = c.Seek(pos); k == nil {
				k, hash = c.Last()
			} else {
				k, hash = c.Prev()
			}
			for k != nil && bytes.Compare(k, pos) >= 0 {
				k, hash = c.Prev()
			}
		}
		var last []byte
		for ; k != nil; k, hash = c.Prev() {
			key, err := getKey(tx, string(hash))
			if err != nil {
				return err
			}
			if !includeRevoked && key.Status == store.StatusRevoked {
				continue
			}
			if len(out) == limit {
				// One more follows: the page ends at the last one kept.
				next = &store.KeyCursor{CreatedNS: int64(keyNanos(last)), Seq: int64(binary.BigEndian.Uint64(last[8:]))}
				return nil
			}
			out = append(out, key)
			last = append(last[:0], k...)
		}
		return nil
	})
	return out, next, err
}
