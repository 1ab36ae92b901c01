package postgres

import (
	"context"
	"math"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/replyd/replyd/store"
)

// logCols are the logs columns scanLog reads, in its order.
const logCols = "ts_ns, level, message, resource_type, resource_id, stream, subject, status, latency_ms, node"

// scanLog reads one logs row selected with logCols.
func scanLog(r pgx.Row) (store.LogEntry, error) {
	var e store.LogEntry
	var ts int64
	err := r.Scan(&ts, &e.Level, &e.Message, &e.ResourceType, &e.ResourceID, &e.StreamName, &e.Subject, &e.Status, &e.LatencyMS, &e.Node)
	e.Timestamp = fromNS(ts)
	return e, err
}

// AppendLog inserts one entry, durable at commit; see store.Store.
// PostgreSQL shares one WAL flush among concurrent commits.
func (s *Store) AppendLog(e store.LogEntry) error {
	if e.Timestamp.IsZero() {
		e.Timestamp = s.now()
	}
	return s.run("append log", func(ctx context.Context) error {
		_, err := s.pool.Exec(ctx, `INSERT INTO logs (ts_ns, level, message, resource_type, resource_id, stream, subject, status, latency_ms, node)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
			ns(e.Timestamp), e.Level, e.Message, e.ResourceType, e.ResourceID, e.StreamName, e.Subject, e.Status, e.LatencyMS, e.Node)
		return err
	})
}

// Logs lists entries newest first; see store.Store.
func (s *Store) Logs(q store.LogQuery) ([]store.LogEntry, error) {
	out := []store.LogEntry{}
	var lim *int
	if q.Limit > 0 {
		lim = &q.Limit
	}
	err := s.run("read logs", func(ctx context.Context) error {
		rows, err := s.pool.Query(ctx, `SELECT `+logCols+`
			FROM logs WHERE ts_ns >= $1 AND ($2 = '' OR level = $2) AND ($3 = '' OR stream = $3)
			ORDER BY ts_ns DESC, seq DESC LIMIT $4`, ns(q.Since), q.Level, q.Stream, lim)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.LogEntry, error) { return scanLog(r) })
		if out == nil {
			out = []store.LogEntry{}
		}
		return err
	})
	return out, err
}

// Stats counts infer entries and distinct subjects in [since, until); see
// store.Store. It reads only the partial index of infer entries.
func (s *Store) Stats(since, until time.Time) (store.Stats, error) {
	var st store.Stats
	if !until.After(since) {
		return st, nil
	}
	err := s.run("read stats", func(ctx context.Context) error {
		return s.pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT NULLIF(subject, ''))
			FROM logs WHERE stream = 'infer' AND ts_ns >= $1 AND ts_ns < $2`, ns(since), ns(until)).Scan(&st.TotalRequests, &st.ActiveUsers)
	})
	return st, err
}

// StatsSeries computes the buckets in one grouped query; see store.Store.
func (s *Store) StatsSeries(since, until time.Time, bucket time.Duration) ([]store.StatsBucket, error) {
	if bucket <= 0 {
		return nil, invalid("bucket width %s is not positive", bucket)
	}
	if !until.After(since) {
		return []store.StatsBucket{}, nil
	}
	span := until.Sub(since)
	n := int64(span / bucket)
	if span%bucket != 0 {
		n++
	}
	if n > store.MaxSeriesBuckets || span == math.MaxInt64 {
		return nil, invalid("%d buckets of %s exceed the maximum of %d", n, bucket, store.MaxSeriesBuckets)
	}
	out := make([]store.StatsBucket, n)
	for i := range out {
		out[i].Start = since.Add(time.Duration(i) * bucket)
	}
	err := s.run("read stats series", func(ctx context.Context) error {
		// numeric: (ts - since) cannot overflow however far apart they are.
		rows, err := s.pool.Query(ctx, `SELECT div(ts_ns::numeric - $1::numeric, $3::numeric)::bigint AS b,
				count(*), count(DISTINCT NULLIF(subject, ''))
			FROM logs WHERE stream = 'infer' AND ts_ns >= $1 AND ts_ns < $2 GROUP BY b`, ns(since), ns(until), int64(bucket))
		if err != nil {
			return err
		}
		var b int64
		var total, users int
		_, err = pgx.ForEachRow(rows, []any{&b, &total, &users}, func() error {
			if b >= 0 && b < n {
				out[b].TotalRequests, out[b].ActiveUsers = total, users
			}
			return nil
		})
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// PruneLogs deletes up to batch of the oldest entries before before; see
// store.Store. Rows another box is pruning at the same moment are skipped,
// not waited for.
func (s *Store) PruneLogs(before time.Time, batch int) (int, error) {
	if batch <= 0 {
		batch = store.DefaultPruneBatch
	}
	var n int
	err := s.run("prune logs", func(ctx context.Context) error {
		tag, err := s.pool.Exec(ctx, `DELETE FROM logs WHERE seq IN (
			SELECT seq FROM logs WHERE ts_ns < $1 ORDER BY ts_ns, seq LIMIT $2 FOR UPDATE SKIP LOCKED)`, ns(before), batch)
		n = int(tag.RowsAffected())
		return err
	})
	return n, err
}
