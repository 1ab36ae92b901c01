package bolt

import (
	"bytes"
	"encoding/json"
	"fmt"

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
	out := []store.ModelChoice{}
	b := tx.Bucket(bucketModelChoices)
	if b == nil {
		return out, nil
	}
	err := b.ForEach(func(_, v []byte) error {
		var c store.ModelChoice
		if err := json.Unmarshal(v, &c); err != nil {
			return fmt.Errorf("store: decode model choice: %w", err)
		}
		out = append(out, c)
		return nil
	})
	return out, err
}

// bucketModelRecords holds the boxes' records of their model files: node ‖ 0 ‖
// file ‖ 0 ‖ what -> JSON ModelRecord. It is created by the first write
// (readers find it missing in older files).
var bucketModelRecords = []byte("model_records")

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
	v, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return db.update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bucketModelRecords)
		if err != nil {
			return err
		}
		return b.Put(modelRecordKey(r.Node, r.File, r.What), v)
	})
}

// ModelRecords returns a box's records of its model files; see store.Store.
func (db *DB) ModelRecords(node string) ([]store.ModelRecord, error) {
	out := []store.ModelRecord{}
	err := db.view(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketModelRecords)
		if b == nil {
			return nil
		}
		p := modelRecordPrefix(node)
		c := b.Cursor()
		for k, v := c.Seek(p); k != nil && bytes.HasPrefix(k, p); k, v = c.Next() {
			var r store.ModelRecord
			if err := json.Unmarshal(v, &r); err != nil {
				return fmt.Errorf("store: decode model record: %w", err)
			}
			out = append(out, r)
		}
		return nil
	})
	return out, err
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
		for _, k := range keys {
			if err := b.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
}
