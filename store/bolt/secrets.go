package bolt

import (
	"encoding/json"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/replyd/replyd/internal/secret"

	"github.com/replyd/replyd/store"
)

// installationSecretBytes is the size of a secret InstallationSecret makes.
const installationSecretBytes = 32

// InstallationSecret returns the secret stored under name, creating it (32
// bytes from crypto/rand) in the same transaction when there is none, so
// that concurrent callers and later starts all get the same value.
func (db *DB) InstallationSecret(name string) ([]byte, error) {
	if name == "" {
		return nil, invalid("empty secret name")
	}
	out, ok, err := db.Secret(name)
	if err != nil || ok {
		return out, err
	}
	err = db.update(func(tx *bolt.Tx) error {
		v, err := installationSecret(tx, name)
		out = v
		return err
	})
	return out, err
}

// installationSecret gets or creates the named secret inside tx. The
// returned slice is a copy, valid after tx ends.
func installationSecret(tx *bolt.Tx, name string) ([]byte, error) {
	b, err := tx.CreateBucketIfNotExists(bucketSecrets)
	if err != nil {
		return nil, err
	}
	if v := b.Get([]byte(name)); v != nil {
		return append([]byte(nil), v...), nil
	}
	v, err := secret.Random(installationSecretBytes)
	if err != nil {
		return nil, err
	}
	if err := b.Put([]byte(name), v); err != nil {
		return nil, err
	}
	return v, nil
}

// Secret returns the secret stored under name and whether there is one,
// without creating it.
func (db *DB) Secret(name string) ([]byte, bool, error) {
	var out []byte
	err := db.view(func(tx *bolt.Tx) error {
		if b := tx.Bucket(bucketSecrets); b != nil {
			if v := b.Get([]byte(name)); v != nil {
				out = append([]byte(nil), v...)
			}
		}
		return nil
	})
	return out, out != nil, err
}

// SetSecret stores value under name, replacing any earlier value; an empty
// value deletes the secret.
func (db *DB) SetSecret(name string, value []byte) error {
	if name == "" {
		return invalid("empty secret name")
	}
	return db.update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bucketSecrets)
		if err != nil {
			return err
		}
		if len(value) == 0 {
			return b.Delete([]byte(name))
		}
		return b.Put([]byte(name), value)
	})
}

// migratePseudonyms is the schema 1 -> 2 migration: version 1 stored the
// hex SHA-256 of user_id as the Subject of infer log entries, which anyone
// can reverse by hashing guessed ids. It replaces each such Subject, in the
// log entry and in the stats index, by secret.PseudonymOfHash under the
// installation's pseudonym key (created here when missing). Entries whose
// Subject is their key hash (requests without user_id) are left alone: a key
// hash is not a user id. It runs inside Open's transaction, in batches so
// that no cursor is used across writes.
func migratePseudonyms(tx *bolt.Tx) error {
	key, err := installationSecret(tx, store.SecretPseudonym)
	if err != nil {
		return fmt.Errorf("pseudonym key: %w", err)
	}
	logs, idx := tx.Bucket(bucketLogs), tx.Bucket(bucketInferIdx)
	type change struct {
		k, entry, subject []byte
	}
	var from []byte
	for {
		var batch []change
		c := idx.Cursor()
		k, subj := c.First()
		if from != nil {
			if k, subj = c.Seek(from); k != nil && string(k) == string(from) {
				k, subj = c.Next()
			}
		}
		for ; k != nil && len(batch) < 1000; k, subj = c.Next() {
			from = append(from[:0], k...)
			if len(subj) == 0 {
				continue
			}
			raw := logs.Get(k)
			if raw == nil {
				continue
			}
			var e store.LogEntry
			if err := json.Unmarshal(raw, &e); err != nil {
				return fmt.Errorf("decode log entry: %w", err)
			}
			if e.Subject == "" || e.Subject == e.ResourceID {
				continue
			}
			e.Subject = secret.PseudonymOfHash(key, e.Subject)
			val, err := json.Marshal(e)
			if err != nil {
				return err
			}
			row := []byte(e.Subject) // schema 1's index value: the subject alone
			if len(subj) > 0 && subj[0] == rowFormat {
				r, err := decodeRow(subj)
				if err != nil {
					return err
				}
				r.subject = e.Subject
				row = r.encode()
			}
			batch = append(batch, change{k: append([]byte(nil), k...), entry: val, subject: row})
		}
		for _, ch := range batch {
			if err := logs.Put(ch.k, ch.entry); err != nil {
				return err
			}
			if err := idx.Put(ch.k, ch.subject); err != nil {
				return err
			}
		}
		if k == nil {
			return nil
		}
	}
}
