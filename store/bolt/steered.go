package bolt

import (
	"encoding/json"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/replyd/replyd/store"
)

// Steered answers (issue 22): the log entry of a steered request (stream
// StreamSteer) with an Inference that names its Turn is indexed in
// steer_index under the entry's key, and its id in inferences, so that
// Inference finds it after a restart. It is not in infer_index: it counts
// in no statistics and takes no outcome.

// steerRow is the value of one steer_index entry.
type steerRow struct {
	ID        string `json:"i"`
	KeyHash   string `json:"k"`
	Subject   string `json:"s,omitempty"`
	Version   string `json:"v,omitempty"`
	Chars     []int  `json:"c,omitempty"`
	Turn      string `json:"t"`
	SteerMode string `json:"m"`
}

// isSteered reports whether e is the entry of a steered answer.
func isSteered(e store.LogEntry) bool {
	return e.StreamName == store.StreamSteer && e.Inference != nil && e.Inference.ID != "" && e.Inference.Turn != ""
}

// putSteered indexes the steered answer e stored under log key k.
func putSteered(tx *bolt.Tx, e store.LogEntry, k []byte) error {
	inf := e.Inference
	v, err := json.Marshal(steerRow{ID: inf.ID, KeyHash: e.ResourceID, Subject: e.Subject, Version: inf.PromptVersion,
		Chars: inf.CandidateChars, Turn: inf.Turn, SteerMode: inf.SteerMode})
	if err != nil {
		return err
	}
	if err := tx.Bucket(bucketSteerIdx).Put(k, v); err != nil {
		return err
	}
	return tx.Bucket(bucketInferences).Put([]byte(inf.ID), k)
}

// steeredInference returns the steered answer stored under log key lk, or
// ErrNotFound.
func steeredInference(tx *bolt.Tx, lk []byte) (store.Inference, error) {
	b := tx.Bucket(bucketSteerIdx)
	var v []byte
	if b != nil {
		v = b.Get(lk)
	}
	if v == nil {
		return store.Inference{}, fmt.Errorf("store: inference: %w", store.ErrNotFound)
	}
	var r steerRow
	if err := json.Unmarshal(v, &r); err != nil {
		return store.Inference{}, fmt.Errorf("store: decode steered answer: %w", err)
	}
	return store.Inference{ID: r.ID, At: fromNanos(keyNanos(lk)), KeyHash: r.KeyHash, Subject: r.Subject,
		PromptVersion: r.Version, CandidateChars: r.Chars, Turn: r.Turn, SteerMode: r.SteerMode}, nil
}

// deleteSteered forgets the steered answer of log key k, if it is one.
func deleteSteered(tx *bolt.Tx, k []byte) error {
	b := tx.Bucket(bucketSteerIdx)
	v := b.Get(k)
	if v == nil {
		return nil
	}
	var r steerRow
	if err := json.Unmarshal(v, &r); err == nil && r.ID != "" {
		if err := tx.Bucket(bucketInferences).Delete([]byte(r.ID)); err != nil {
			return err
		}
	}
	return b.Delete(k)
}
