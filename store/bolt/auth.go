package bolt

import (
	"encoding/binary"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/replyd/replyd/store"
)

// AdminKeyHash returns the stored hash of the admin key (secret.HashAdminKey's
// Argon2id form, or the hex SHA-256 earlier versions stored), or "" when none
// is set.
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

// SetAdminKeyHashIfAbsent stores hash when no admin key hash is stored, in
// one transaction, and reports whether it did.
func (db *DB) SetAdminKeyHashIfAbsent(hash string) (bool, error) {
	if hash == "" {
		return false, invalid("empty admin key hash")
	}
	var stored bool
	err := db.update(func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		if stored = meta.Get(metaAdminKeyHash) == nil; !stored {
			return nil
		}
		return meta.Put(metaAdminKeyHash, []byte(hash))
	})
	return stored && err == nil, err
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
			return fmt.Errorf("store: session: %w", store.ErrExists)
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
		cut := nanos(now)
		var err error
		n, err = deleteWhere(tx.Bucket(bucketSessions), func(_, v []byte) bool {
			return len(v) != 8 || binary.BigEndian.Uint64(v) <= cut
		})
		return err
	})
	return n, err
}
