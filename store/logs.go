package store

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// MaxSeriesBuckets bounds the number of buckets StatsSeries computes.
const MaxSeriesBuckets = 10000

// DefaultPruneBatch is the number of log entries PruneLogs deletes per
// transaction when its batch argument is <= 0.
const DefaultPruneBatch = 1000

// AppendLog stores e under "Timestamp nanos ‖ sequence" (a zero Timestamp is
// set from the clock). Concurrent calls are grouped into one transaction by
// bbolt's Batch; the entry is on disk (fsynced) when AppendLog returns nil.
// Entries of stream StreamInfer are also indexed for Stats.
func (db *DB) AppendLog(e LogEntry) error {
	if e.Timestamp.IsZero() {
		e.Timestamp = db.now()
	}
	val, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("store: encode log entry: %w", err)
	}
	// Batch may run this function more than once (a failed batch is retried
	// one call at a time); it only depends on its arguments and the Tx.
	err = db.bolt.Batch(func(tx *bolt.Tx) error { return putLog(tx, e, val) })
	if err != nil {
		return db.wrap(err)
	}
	return nil
}

// putLog stores the entry e, encoded as val, under "Timestamp nanos ‖
// sequence", and indexes it for Stats when it is of stream StreamInfer.
func putLog(tx *bolt.Tx, e LogEntry, val []byte) error {
	logs := tx.Bucket(bucketLogs)
	seq, err := logs.NextSequence()
	if err != nil {
		return err
	}
	k := timeKey(e.Timestamp, seq)
	if err := logs.Put(k, val); err != nil {
		return err
	}
	if e.StreamName == StreamInfer {
		return tx.Bucket(bucketInferIdx).Put(k, []byte(e.Subject))
	}
	return nil
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

// Stats counts the StreamInfer entries with since <= Timestamp < until
// (TotalRequests) and the distinct non-empty Subjects among them
// (ActiveUsers). It seeks to since in a time-ordered index that holds only
// the subject, so its cost grows with the window, not with the whole log.
func (db *DB) Stats(since, until time.Time) (Stats, error) {
	var s Stats
	if !until.After(since) {
		return s, nil
	}
	from, to := nanos(since), nanos(until)
	err := db.view(func(tx *bolt.Tx) error {
		users := make(map[string]struct{})
		c := tx.Bucket(bucketInferIdx).Cursor()
		for k, subj := c.Seek(u64(from)); k != nil && keyNanos(k) < to; k, subj = c.Next() {
			s.TotalRequests++
			if len(subj) > 0 {
				if _, ok := users[string(subj)]; !ok {
					users[string(subj)] = struct{}{}
				}
			}
		}
		s.ActiveUsers = len(users)
		return nil
	})
	return s, err
}

// StatsSeries splits [since, until) into consecutive buckets of the given
// width starting at since (the last one may reach past until but counts
// nothing at or after until) and returns the Stats of each, empty buckets
// included, oldest first. bucket must be positive and the series at most
// MaxSeriesBuckets long.
func (db *DB) StatsSeries(since, until time.Time, bucket time.Duration) ([]StatsBucket, error) {
	if bucket <= 0 {
		return nil, invalid("bucket width %s is not positive", bucket)
	}
	if !until.After(since) {
		return []StatsBucket{}, nil
	}
	span := until.Sub(since)
	n := int64(span / bucket)
	if span%bucket != 0 {
		n++
	}
	if n > MaxSeriesBuckets {
		return nil, invalid("%d buckets of %s exceed the maximum of %d", n, bucket, MaxSeriesBuckets)
	}
	out := make([]StatsBucket, n)
	for i := range out {
		out[i].Start = since.Add(time.Duration(i) * bucket)
	}
	from, to, width := nanos(since), nanos(until), uint64(bucket)
	err := db.view(func(tx *bolt.Tx) error {
		// Keys come in time order, so bucket indexes only grow: a subject is
		// new to bucket i exactly when the last bucket it was counted in is
		// not i. One map for the whole series, one entry per subject.
		lastBucket := make(map[string]*uint64) // pointers: updating needs no key string
		c := tx.Bucket(bucketInferIdx).Cursor()
		for k, subj := c.Seek(u64(from)); k != nil && keyNanos(k) < to; k, subj = c.Next() {
			i := (keyNanos(k) - from) / width
			out[i].TotalRequests++
			if len(subj) == 0 {
				continue
			}
			last := lastBucket[string(subj)]
			if last == nil {
				last = new(uint64)
				*last = i
				lastBucket[string(subj)] = last
			} else if *last == i {
				continue
			}
			*last = i
			out[i].ActiveUsers++
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
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
		logs, idx := tx.Bucket(bucketLogs), tx.Bucket(bucketInferIdx)
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
			if err := idx.Delete(k); err != nil {
				return err
			}
		}
		n = len(dead)
		return nil
	})
	return n, err
}
