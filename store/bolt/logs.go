package bolt

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/replyd/replyd/store"
)

// AppendLog stores e under "Timestamp nanos ‖ sequence" (a zero Timestamp is
// set from the clock). Concurrent calls are grouped into one transaction by
// bbolt's Batch; the entry is on disk (fsynced) when AppendLog returns nil.
// Entries of stream StreamInfer are also indexed for Stats; an answered
// inference (e.Inference) becomes findable by its id for feedback, and its
// e.Inference.Remember texts are stored encrypted under the key of the user
// e.Subject names (created on first use), never in the log itself.
func (db *DB) AppendLog(e store.LogEntry) error {
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
	return db.noteWrite(err)
}

// putLog stores the entry e, encoded as val, under "Timestamp nanos ‖
// sequence", and indexes it for Stats when it is of stream StreamInfer.
func putLog(tx *bolt.Tx, e store.LogEntry, val []byte, now time.Time) error {
	_, err := putLogKey(tx, e, val, now)
	return err
}

// putLogKey is putLog returning the entry's key: an infer entry is also
// indexed for Stats, an answered inference (e.Inference) becomes findable
// by its id, and its Remember texts are stored sealed under the key of the
// user e.Subject names (created at now on first use).
func putLogKey(tx *bolt.Tx, e store.LogEntry, val []byte, now time.Time) ([]byte, error) {
	logs := tx.Bucket(bucketLogs)
	seq, err := logs.NextSequence()
	if err != nil {
		return nil, err
	}
	k := timeKey(e.Timestamp, seq)
	if err := logs.Put(k, val); err != nil {
		return nil, err
	}
	if isSteered(e) {
		return k, putSteered(tx, e, k)
	}
	if e.StreamName != store.StreamInfer {
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
		return k, putTexts(tx, e.Subject, inf.UserTag, e.ResourceID, k, inf.Remember, now)
	}
	return k, nil
}

// Logs returns the entries with Timestamp >= q.Since (inclusive) that match
// q.Level and q.Stream when those are set, newest first, at most q.Limit of
// them (q.Limit <= 0: all). Entries with equal timestamps come last-appended
// first.
func (db *DB) Logs(q store.LogQuery) ([]store.LogEntry, error) {
	out := []store.LogEntry{}
	since := nanos(q.Since)
	err := db.view(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketLogs).Cursor()
		for k, v := c.Last(); k != nil && keyNanos(k) >= since; k, v = c.Prev() {
			var e store.LogEntry
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
		batch = store.DefaultPruneBatch
	}
	cut := u64(nanos(before))
	n := 0
	err := db.update(func(tx *bolt.Tx) error {
		var err error
		n, err = deleteOldest(tx, batch, cut)
		return err
	})
	return n, err
}

// deleteOldest deletes up to n of the oldest log entries (and their index
// entries) whose key sorts before cut (nil: any) inside tx.
func deleteOldest(tx *bolt.Tx, n int, cut []byte) (int, error) {
	logs, idx, ids := tx.Bucket(bucketLogs), tx.Bucket(bucketInferIdx), tx.Bucket(bucketInferences)
	// Collect first: deleting under a moving cursor skips keys.
	var dead [][]byte
	c := logs.Cursor()
	for k, _ := c.First(); k != nil && len(dead) < n && (cut == nil || bytes.Compare(k[:8], cut) < 0); k, _ = c.Next() {
		dead = append(dead, append([]byte(nil), k...))
	}
	for _, k := range dead {
		if err := logs.Delete(k); err != nil {
			return 0, err
		}
		if err := deleteSteered(tx, k); err != nil {
			return 0, err
		}
		if v := idx.Get(k); v != nil {
			row, err := decodeRow(v)
			if err != nil {
				return 0, err
			}
			if row.inferenceID != "" {
				if err := ids.Delete([]byte(row.inferenceID)); err != nil {
					return 0, err
				}
			}
			if err := idx.Delete(k); err != nil {
				return 0, err
			}
		}
	}
	return len(dead), nil
}

// LogBytes returns the bytes the log entries and their indexes (the stats'
// and the steered answers') occupy in the file (whole pages) and the number
// of entries. It walks the pages of the buckets: call it from housekeeping,
// not per request.
func (db *DB) LogBytes() (size int64, entries int, err error) {
	err = db.view(func(tx *bolt.Tx) error {
		ls, is := tx.Bucket(bucketLogs).Stats(), tx.Bucket(bucketInferIdx).Stats()
		size = int64(ls.BranchAlloc + ls.LeafAlloc + is.BranchAlloc + is.LeafAlloc)
		if sb := tx.Bucket(bucketSteerIdx); sb != nil {
			ss := sb.Stats()
			size += int64(ss.BranchAlloc + ss.LeafAlloc)
		}
		entries = ls.KeyN
		return nil
	})
	return size, entries, err
}

// PruneLogsToSize deletes the oldest log entries until the log (LogBytes)
// takes at most maxBytes, in transactions of at most batch entries (<= 0:
// DefaultPruneBatch) so that writers are not held up, and returns how many
// it deleted. Freed pages are reused by later writes; the file itself does
// not shrink.
func (db *DB) PruneLogsToSize(maxBytes int64, batch int) (int, error) {
	if batch <= 0 {
		batch = store.DefaultPruneBatch
	}
	total := 0
	for {
		size, n, err := db.LogBytes()
		if err != nil || size <= maxBytes || n == 0 {
			return total, err
		}
		// Delete in proportion to the excess (at least one batch's worth
		// per round, so pages freed only when emptied still add up).
		excess := int((size - maxBytes) * int64(n) / size)
		if excess < 1 {
			excess = 1
		}
		for excess > 0 {
			k := min(excess, batch)
			deleted, err := db.pruneOldest(k)
			total += deleted
			if err != nil || deleted == 0 {
				return total, err
			}
			excess -= deleted
		}
	}
}

// pruneOldest deletes the n oldest log entries in one transaction.
func (db *DB) pruneOldest(n int) (int, error) {
	deleted := 0
	err := db.update(func(tx *bolt.Tx) error {
		var err error
		deleted, err = deleteOldest(tx, n, nil)
		return err
	})
	return deleted, err
}
