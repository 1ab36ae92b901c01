package bolt

import (
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
