package store

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// DefaultPruneBatch is the number of log entries PruneLogs deletes per
// transaction when its batch argument is <= 0.
const DefaultPruneBatch = 1000

// AppendLog stores e under "Timestamp nanos ‖ sequence" (a zero Timestamp is
// set from the clock). Concurrent calls are grouped into one transaction by
// bbolt's Batch; the entry is on disk (fsynced) when AppendLog returns nil.
// Entries of stream StreamInfer are also indexed for Stats; an answered
// inference (e.Inference) becomes findable by its id for feedback, and its
// e.Inference.Remember texts are stored encrypted under the key of the user
// e.Subject names (created on first use), never in the log itself.
func (db *DB) AppendLog(e LogEntry) error {
	if e.Timestamp.IsZero() {
		e.Timestamp = db.now()
	}
	val, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("store: encode log entry: %w", err)
	}
	now := db.now()
	// Batch may run this function more than once (a failed batch is retried
	// one call at a time); it only depends on its arguments and the Tx.
	err = db.batch(func(tx *bolt.Tx) error { return putLog(tx, e, val, now) })
	if err != nil {
		return db.wrap(err)
	}
	return nil
}

// putLog stores the entry e, encoded as val, under "Timestamp nanos ‖
// sequence", and indexes it for Stats when it is of stream StreamInfer.
func putLog(tx *bolt.Tx, e LogEntry, val []byte, now time.Time) error {
	_, err := putLogKey(tx, e, val, now)
	return err
}

// putLogKey is putLog returning the entry's key: an infer entry is also
// indexed for Stats, an answered inference (e.Inference) becomes findable
// by its id, and its Remember texts are stored sealed under the key of the
// user e.Subject names (created at now on first use).
func putLogKey(tx *bolt.Tx, e LogEntry, val []byte, now time.Time) ([]byte, error) {
	logs := tx.Bucket(bucketLogs)
	seq, err := logs.NextSequence()
	if err != nil {
		return nil, err
	}
	k := timeKey(e.Timestamp, seq)
	if err := logs.Put(k, val); err != nil {
		return nil, err
	}
	if e.StreamName != StreamInfer {
		return k, nil
	}
	if err := tx.Bucket(bucketInferIdx).Put(k, rowOf(e).encode()); err != nil {
		return nil, err
	}
	inf := e.Inference
	if inf == nil {
		return k, nil
	}
	if inf.ID != "" {
		if err := tx.Bucket(bucketInferences).Put([]byte(inf.ID), k); err != nil {
			return nil, err
		}
	}
	if inf.Remember != nil && e.Subject != "" {
		return k, putTexts(tx, e.Subject, k, inf.Remember, now)
	}
	return k, nil
}

// Logs returns the entries with Timestamp >= q.Since (inclusive) that match
// q.Level and q.Stream when those are set, newest first, at most q.Limit of
// them (q.Limit <= 0: all). Entries with equal timestamps come last-appended
// first.
func (db *DB) Logs(q LogQuery) ([]LogEntry, error) {
	out := []LogEntry{}
	since := nanos(q.Since)
	err := db.view(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketLogs).Cursor()
		for k, v := c.Last(); k != nil && keyNanos(k) >= since; k, v = c.Prev() {
			var e LogEntry
			if err := json.Unmarshal(v, &e); err != nil {
				return fmt.Errorf("store: decode log entry: %w", err)
			}
			if (q.Level != "" && e.Level != q.Level) || (q.Stream != "" && e.StreamName != q.Stream) {
				continue
			}
			out = append(out, e)
			if q.Limit > 0 && len(out) >= q.Limit {
				break
			}
		}
		return nil
	})
	return out, err
}

// PruneLogs deletes up to batch of the oldest entries whose Timestamp is
// before before, in one short transaction so that writers are not held up,
// and returns how many it deleted. Callers loop until it returns fewer than
// batch. A batch <= 0 means DefaultPruneBatch.
func (db *DB) PruneLogs(before time.Time, batch int) (int, error) {
	if batch <= 0 {
		batch = DefaultPruneBatch
	}
	cut := u64(nanos(before))
	n := 0
	err := db.update(func(tx *bolt.Tx) error {
		n = 0
		logs, idx, ids := tx.Bucket(bucketLogs), tx.Bucket(bucketInferIdx), tx.Bucket(bucketInferences)
		// Collect first: deleting under a moving cursor skips keys.
		var dead [][]byte
		c := logs.Cursor()
		for k, _ := c.First(); k != nil && len(dead) < batch && bytes.Compare(k[:8], cut) < 0; k, _ = c.Next() {
			dead = append(dead, append([]byte(nil), k...))
		}
		for _, k := range dead {
			if err := logs.Delete(k); err != nil {
				return err
			}
			if v := idx.Get(k); v != nil {
				row, err := decodeRow(v)
				if err != nil {
					return err
				}
				if row.inferenceID != "" {
					if err := ids.Delete([]byte(row.inferenceID)); err != nil {
						return err
					}
				}
				if err := idx.Delete(k); err != nil {
					return err
				}
			}
		}
		n = len(dead)
		return nil
	})
	return n, err
}
