package bolt

import (
	"encoding/json"
	"fmt"
	"strconv"

	bolt "go.etcd.io/bbolt"

	"github.com/replyd/replyd/store"
)

// CurrentPrompt returns the most recently saved prompt version and true, or
// false when no prompt was ever saved.
func (db *DB) CurrentPrompt() (store.PromptVersion, bool, error) {
	var p store.PromptVersion
	var found bool
	err := db.view(func(tx *bolt.Tx) error {
		seq := tx.Bucket(bucketMeta).Get(metaPromptCurrent)
		if seq == nil {
			return nil
		}
		v := tx.Bucket(bucketPrompts).Get(seq)
		if v == nil {
			return fmt.Errorf("store: current prompt points at a missing version")
		}
		found = true
		return json.Unmarshal(v, &p)
	})
	return p, found, err
}

// SavePrompt appends p to the history and makes it current, in one
// transaction. p.Version must be non-empty and not used before, else
// ErrExists. A zero CreatedAt is set from the clock.
func (db *DB) SavePrompt(p store.PromptVersion) error {
	p, err := p.Saved(db.now())
	if err != nil {
		return err
	}
	val, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("store: encode prompt: %w", err)
	}
	return db.update(func(tx *bolt.Tx) error {
		idx := tx.Bucket(bucketPromptIdx)
		if idx.Get([]byte(p.Version)) != nil {
			return fmt.Errorf("store: prompt version %q: %w", p.Version, store.ErrExists)
		}
		prompts := tx.Bucket(bucketPrompts)
		n, err := prompts.NextSequence()
		if err != nil {
			return err
		}
		seq := u64(n)
		if err := prompts.Put(seq, val); err != nil {
			return err
		}
		if err := idx.Put([]byte(p.Version), seq); err != nil {
			return err
		}
		return tx.Bucket(bucketMeta).Put(metaPromptCurrent, seq)
	})
}

// PromptHistory returns up to limit saved versions, newest first. A
// limit <= 0 means all of them.
func (db *DB) PromptHistory(limit int) ([]store.PromptVersion, error) {
	out := []store.PromptVersion{}
	err := db.view(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketPrompts).Cursor()
		for k, v := c.Last(); k != nil; k, v = c.Prev() {
			var p store.PromptVersion
			if err := json.Unmarshal(v, &p); err != nil {
				return fmt.Errorf("store: decode prompt: %w", err)
			}
			out = append(out, p)
			if limit > 0 && len(out) >= limit {
				break
			}
		}
		return nil
	})
	return out, err
}

// NextPromptVersion returns one more than the largest version that is a
// non-negative decimal integer, as a string; "1" when there is none.
// Versions that are not integers ("beta") are ignored. The answer is advisory:
// a concurrent SavePrompt may take it, in which case SavePrompt reports
// ErrExists.
func (db *DB) NextPromptVersion() (string, error) {
	var max uint64
	err := db.view(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketPromptIdx).ForEach(func(k, _ []byte) error {
			if n, err := strconv.ParseUint(string(k), 10, 63); err == nil && n > max {
				max = n
			}
			return nil
		})
	})
	if err != nil {
		return "", err
	}
	return strconv.FormatUint(max+1, 10), nil
}
