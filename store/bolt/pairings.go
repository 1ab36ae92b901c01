package bolt

import (
	"encoding/json"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/replyd/replyd/store"
)

// CreatePairing stores a pending pairing under p.CodeHash. In the same
// transaction it deletes every pairing whose ExpiresAt is at or before now,
// so expired pairings leave nothing behind. It returns ErrLimit when
// maxPending unused, unexpired pairings already exist (maxPending <= 0 means
// no bound) and ErrExists when the code hash is taken.
func (db *DB) CreatePairing(p store.Pairing, maxPending int, now time.Time) error {
	p, err := p.Pending(now)
	if err != nil {
		return err
	}
	p.UsedAt, p.KeyHash = time.Time{}, ""
	val, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("store: encode pairing: %w", err)
	}
	return db.update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketPairings)
		if _, err := prunePairings(b, now); err != nil {
			return err
		}
		if b.Get([]byte(p.CodeHash)) != nil {
			return fmt.Errorf("store: pairing: %w", store.ErrExists)
		}
		if maxPending > 0 {
			pending := 0
			err := b.ForEach(func(_, v []byte) error {
				var q store.Pairing
				if err := json.Unmarshal(v, &q); err != nil {
					return fmt.Errorf("store: decode pairing: %w", err)
				}
				if q.UsedAt.IsZero() {
					pending++
				}
				return nil
			})
			if err != nil {
				return err
			}
			if pending >= maxPending {
				return fmt.Errorf("store: %d pairings are pending: %w", pending, store.ErrLimit)
			}
		}
		return b.Put([]byte(p.CodeHash), val)
	})
}

// RedeemPairing trades the pairing stored under codeHash for a new API key
// with hash keyHash, in one transaction: the key is created from p.Key's
// settings with CreatedAt now, and the pairing is marked used. It returns
// the created key, or
//   - ErrNotFound when no pairing has this hash (nothing is written, so
//     guessing costs no disk);
//   - ErrExpired when the pairing expired (it is deleted);
//   - ErrUsed when it was redeemed before (nothing is written);
//   - ErrExists when keyHash is taken (nothing is written).
func (db *DB) RedeemPairing(codeHash, keyHash string, now time.Time) (store.APIKey, error) {
	if codeHash == "" || keyHash == "" {
		return store.APIKey{}, invalid("empty pairing code or key hash")
	}
	// A read-only look first: wrong codes are the common case under attack.
	var found bool
	err := db.view(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketPairings)
		found = b != nil && b.Get([]byte(codeHash)) != nil
		return nil
	})
	if err != nil {
		return store.APIKey{}, err
	}
	if !found {
		return store.APIKey{}, fmt.Errorf("store: pairing: %w", store.ErrNotFound)
	}
	var k store.APIKey
	var outcome error
	err = db.update(func(tx *bolt.Tx) error {
		outcome = nil
		b := tx.Bucket(bucketPairings)
		v := b.Get([]byte(codeHash))
		if v == nil {
			outcome = store.ErrNotFound
			return nil
		}
		var p store.Pairing
		if err := json.Unmarshal(v, &p); err != nil {
			return fmt.Errorf("store: decode pairing: %w", err)
		}
		switch {
		case !now.Before(p.ExpiresAt):
			outcome = store.ErrExpired
			return b.Delete([]byte(codeHash))
		case !p.UsedAt.IsZero():
			outcome = store.ErrUsed
			return nil
		case tx.Bucket(bucketKeys).Get([]byte(keyHash)) != nil:
			outcome = store.ErrExists
			return nil
		}
		k = p.Key
		k.Hash, k.CreatedAt, k.LastUsedAt, k.RevokedAt = keyHash, now, time.Time{}, time.Time{}
		if k.Status == "" {
			k.Status = store.StatusActive
		}
		if k.Status == store.StatusRevoked {
			k.RevokedAt = now
		}
		if err := putKey(tx, k); err != nil {
			return err
		}
		byAge := tx.Bucket(bucketKeysByAge)
		seq, err := byAge.NextSequence()
		if err != nil {
			return err
		}
		if err := byAge.Put(timeKey(k.CreatedAt, seq), []byte(k.Hash)); err != nil {
			return err
		}
		if p.MemorySubject != "" {
			// The memory may have been deleted since: then there is
			// nothing to link.
			u, err := getUser(tx, p.MemorySubject)
			if err != nil {
				return err
			}
			if u != nil {
				if err := putLink(tx, keyHash, u.tagOf(p.MemorySubject), p.MemorySubject); err != nil {
					return err
				}
			}
		}
		p.UsedAt, p.KeyHash = now, keyHash
		val, err := json.Marshal(p)
		if err != nil {
			return fmt.Errorf("store: encode pairing: %w", err)
		}
		return b.Put([]byte(codeHash), val)
	})
	if err != nil {
		return store.APIKey{}, err
	}
	if outcome != nil {
		return store.APIKey{}, fmt.Errorf("store: pairing: %w", outcome)
	}
	return k, nil
}

// PrunePairings deletes every pairing, used or not, whose ExpiresAt is at or
// before now, and returns how many it deleted. It writes only when there is
// something to delete.
func (db *DB) PrunePairings(now time.Time) (int, error) {
	var due bool
	err := db.view(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketPairings)
		if b == nil {
			return nil
		}
		n, err := expiredPairings(b, now)
		due = len(n) > 0
		return err
	})
	if err != nil || !due {
		return 0, err
	}
	n := 0
	err = db.update(func(tx *bolt.Tx) error {
		var err error
		n, err = prunePairings(tx.Bucket(bucketPairings), now)
		return err
	})
	return n, err
}

// prunePairings deletes the expired pairings of b inside a write transaction.
func prunePairings(b *bolt.Bucket, now time.Time) (int, error) {
	dead, err := expiredPairings(b, now)
	if err != nil {
		return 0, err
	}
	return deleteKeys(b, dead)
}

// expiredPairings returns copies of the keys of b's pairings that expired at
// or before now. Pairings are few (bounded by CreatePairing's maxPending and
// their short life), so a full scan is cheap.
func expiredPairings(b *bolt.Bucket, now time.Time) ([][]byte, error) {
	var dead [][]byte
	err := eachJSON(b, nil, "pairing", func(k []byte, p store.Pairing) error {
		if !now.Before(p.ExpiresAt) {
			dead = append(dead, append([]byte(nil), k...))
		}
		return nil
	})
	return dead, err
}
