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
	infer := e.StreamName == StreamInfer
	subject := []byte(e.Subject)
	// Batch may run this function more than once (a failed batch is retried
	// one call at a time); it only depends on its arguments and the Tx.
	err = db.bolt.Batch(func(tx *bolt.Tx) error {
		logs := tx.Bucket(bucketLogs)
		seq, err := logs.NextSequence()
		if err != nil {
			return err
		}
		k := timeKey(e.Timestamp, seq)
		if err := logs.Put(k, val); err != nil {
			return err
		}
		if infer {
			return tx.Bucket(bucketInferIdx).Put(k, subject)
		}
		return nil
	})
	return db.noteWrite(err)
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
		var err error
		n, err = deleteOldest(tx, batch, cut)
		return err
	})
	return n, err
}

// deleteOldest deletes up to n of the oldest log entries (and their index
// entries) whose key sorts before cut (nil: any) inside tx.
func deleteOldest(tx *bolt.Tx, n int, cut []byte) (int, error) {
	logs, idx := tx.Bucket(bucketLogs), tx.Bucket(bucketInferIdx)
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
		if err := idx.Delete(k); err != nil {
			return 0, err
		}
	}
	return len(dead), nil
}

// LogBytes returns the bytes the log entries and their stats index occupy in
// the file (whole pages) and the number of entries. It walks the pages of
// both buckets: call it from housekeeping, not per request.
func (db *DB) LogBytes() (size int64, entries int, err error) {
	err = db.view(func(tx *bolt.Tx) error {
		ls, is := tx.Bucket(bucketLogs).Stats(), tx.Bucket(bucketInferIdx).Stats()
		size = int64(ls.BranchAlloc + ls.LeafAlloc + is.BranchAlloc + is.LeafAlloc)
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
		batch = DefaultPruneBatch
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
