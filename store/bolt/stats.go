package bolt

import (
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/replyd/replyd/store"
)

// Stats counts the StreamInfer entries with since <= Timestamp < until:
// requests, distinct subjects, errors by code, latency percentiles, the
// outcomes, and the same per API key and per system-prompt version. It
// seeks to since in a time-ordered index of compact rows, so its cost grows
// with the window, not with the whole log.
func (db *DB) Stats(since, until time.Time) (store.Stats, error) {
	b := store.NewStatsBuilder()
	if !until.After(since) {
		return b.Stats(), nil
	}
	from, to := nanos(since), nanos(until)
	err := db.view(func(tx *bolt.Tx) error {
		intern := map[string]string{}
		var o store.Outcome
		c := tx.Bucket(bucketInferIdx).Cursor()
		for k, v := c.Seek(u64(from)); k != nil && keyNanos(k) < to; k, v = c.Next() {
			row, err := decodeStatsRow(v, intern, &o)
			if err != nil {
				return err
			}
			b.Add(row)
		}
		return nil
	})
	return b.Stats(), err
}

// StatsSeries splits [since, until) into consecutive buckets of the given
// width starting at since (the last one may reach past until but counts
// nothing at or after until) and returns the requests, active users,
// outcomes and accepted outcomes of each, empty buckets included, oldest
// first. bucket must be positive and the series at most MaxSeriesBuckets
// long.
func (db *DB) StatsSeries(since, until time.Time, bucket time.Duration) ([]store.StatsBucket, error) {
	return store.CountSeries(since, until, bucket, func(out []store.StatsBucket) error {
		from, to, width := nanos(since), nanos(until), uint64(bucket)
		return db.view(func(tx *bolt.Tx) error {
			// Keys come in time order, so bucket indexes only grow: a subject is
			// new to bucket i exactly when the last bucket it was counted in is
			// not i. One map for the whole series, one entry per subject.
			lastBucket := make(map[string]*uint64) // pointers: updating needs no key string
			intern := map[string]string{}
			var o store.Outcome
			c := tx.Bucket(bucketInferIdx).Cursor()
			for k, v := c.Seek(u64(from)); k != nil && keyNanos(k) < to; k, v = c.Next() {
				i := (keyNanos(k) - from) / width
				row, err := decodeStatsRow(v, intern, &o)
				if err != nil {
					return err
				}
				out[i].TotalRequests++
				if o := row.Outcome; o != nil {
					out[i].Outcomes++
					if o.Accepted() {
						out[i].Accepted++
					}
				}
				if row.Subject == "" {
					continue
				}
				last := lastBucket[row.Subject]
				if last == nil {
					last = new(uint64)
					*last = i
					lastBucket[row.Subject] = last
				} else if *last == i {
					continue
				}
				*last = i
				out[i].ActiveUsers++
			}
			return nil
		})
	})
}
