package bolt

import (
	"bytes"
	"encoding/json"

	bolt "go.etcd.io/bbolt"

	"github.com/replyd/replyd/store"
)

func modelChoiceKey(node, kind string) []byte {
	return append(append([]byte(node), 0), kind...)
}

// SetModelChoice stores a box's choice of model; see store.Store.
func (db *DB) SetModelChoice(c store.ModelChoice) error {
	if !store.ValidModelChoice(c) {
		return invalid("a model choice needs a node, a kind and a model")
	}
	if c.At.IsZero() {
		c.At = db.now()
	}
	v, err := json.Marshal(c)
	if err != nil {
		return err
	}
	return db.update(func(tx *bolt.Tx) error {
		return putModelChoice(tx, c.Node, c.Kind, v)
	})
}

func putModelChoice(tx *bolt.Tx, node, kind string, v []byte) error {
	b, err := tx.CreateBucketIfNotExists(bucketModelChoices)
	if err != nil {
		return err
	}
	return b.Put(modelChoiceKey(node, kind), v)
}

// ModelChoices returns every box's choices; see store.Store.
func (db *DB) ModelChoices() ([]store.ModelChoice, error) {
	var out []store.ModelChoice
	err := db.view(func(tx *bolt.Tx) error {
		var err error
		out, err = modelChoices(tx)
		return err
	})
	return out, err
}

// modelChoices reads the choices in key order: by node, then kind.
func modelChoices(tx *bolt.Tx) ([]store.ModelChoice, error) {
	return listJSON[store.ModelChoice](tx.Bucket(bucketModelChoices), nil, "model choice")
}

func modelRecordPrefix(node string) []byte { return append([]byte(node), 0) }

func modelRecordKey(node, file, what string) []byte {
	return append(append(append(modelRecordPrefix(node), file...), 0), what...)
}

// PutModelRecord stores a box's record of a model file; see store.Store.
func (db *DB) PutModelRecord(r store.ModelRecord) error {
	if !store.ValidModelRecord(r) {
		return invalid("a model record needs a node, a file, a kind (timing, comparison or window) and a body")
	}
	if r.At.IsZero() {
		r.At = db.now()
	}
	return db.update(func(tx *bolt.Tx) error { return putModelRecord(tx, r) })
}

func putModelRecord(tx *bolt.Tx, r store.ModelRecord) error {
	v, err := json.Marshal(r)
	if err != nil {
		return err
	}
	b, err := tx.CreateBucketIfNotExists(bucketModelRecords)
	if err != nil {
		return err
	}
	return b.Put(modelRecordKey(r.Node, r.File, r.What), v)
}

// ModelRecords returns a box's records of its model files; see store.Store.
func (db *DB) ModelRecords(node string) ([]store.ModelRecord, error) {
	var out []store.ModelRecord
	err := db.view(func(tx *bolt.Tx) error {
		var err error
		out, err = modelRecords(tx, modelRecordPrefix(node))
		return err
	})
	return out, err
}

// modelRecords reads the records whose keys start with prefix (nil: every
// box's) in key order: by node, file, then what. The result is never nil.
func modelRecords(tx *bolt.Tx, prefix []byte) ([]store.ModelRecord, error) {
	return listJSON[store.ModelRecord](tx.Bucket(bucketModelRecords), prefix, "model record")
}

// DeleteModelRecords deletes a box's records of one file, of every kind;
// see store.Store.
func (db *DB) DeleteModelRecords(node, file string) error {
	return db.update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketModelRecords)
		if b == nil {
			return nil
		}
		// node ‖ 0 ‖ file ‖ 0: names hold no NUL, so the prefix is this
		// file's records only.
		p := append(append(modelRecordPrefix(node), file...), 0)
		var keys [][]byte
		c := b.Cursor()
		for k, _ := c.Seek(p); k != nil && bytes.HasPrefix(k, p); k, _ = c.Next() {
			keys = append(keys, bytes.Clone(k))
		}
		_, err := deleteKeys(b, keys)
		return err
	})
}
