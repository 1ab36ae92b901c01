package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/replyd/replyd/store"
)

// logCols are the logs columns scanLog reads, in its order.
const logCols = "ts_ns, level, message, resource_type, resource_id, stream, subject, status, latency_ms, node, error_code, inference_id, prompt_version, candidate_chars, steer_turn, steer_mode, model, speech_model"

// scanLog reads one logs row selected with logCols.
func scanLog(r pgx.Row) (store.LogEntry, error) {
	var e store.LogEntry
	var ts int64
	var id *string
	var version string
	var chars []int32
	var turn, mode, model, speech string
	err := r.Scan(&ts, &e.Level, &e.Message, &e.ResourceType, &e.ResourceID, &e.StreamName, &e.Subject, &e.Status, &e.LatencyMS, &e.Node,
		&e.ErrorCode, &id, &version, &chars, &turn, &mode, &model, &speech)
	e.Timestamp = fromNS(ts)
	if id != nil {
		e.Inference = &store.InferenceInfo{ID: *id, PromptVersion: version, CandidateChars: ints(chars), Turn: turn, SteerMode: mode,
			Model: model, SpeechModel: speech}
	}
	return e, err
}

// inferenceCols are the logs columns of an entry's Inference: kept for an
// infer entry and for a steered answer (a steer entry that names its
// turn), whose id Inference then finds; none for any other entry.
type inferenceCols struct {
	id                  *string
	version, turn, mode string
	chars               []int32
	model, speech       string
}

func inferenceColsOf(e store.LogEntry) inferenceCols {
	var c inferenceCols
	inf := e.Inference
	if inf == nil {
		return c
	}
	steered := e.StreamName == store.StreamSteer && inf.ID != "" && inf.Turn != ""
	if e.StreamName != store.StreamInfer && !steered {
		return c
	}
	if inf.ID != "" {
		c.id = &inf.ID
	}
	c.version, c.chars = inf.PromptVersion, int32s(inf.CandidateChars)
	c.model, c.speech = inf.Model, inf.SpeechModel
	if steered {
		c.turn, c.mode = inf.Turn, inf.SteerMode
	}
	return c
}

// AppendLog inserts one entry, durable at commit; see store.Store.
// PostgreSQL shares one WAL flush among concurrent commits. An answered
// inference's remembered texts go, sealed, into memory_texts in the same
// transaction.
func (s *Store) AppendLog(e store.LogEntry) error {
	if e.Timestamp.IsZero() {
		e.Timestamp = s.now()
	}
	c := inferenceColsOf(e)
	var texts *store.RememberedTexts
	if inf := e.Inference; inf != nil && e.StreamName == store.StreamInfer && e.Subject != "" {
		texts = inf.Remember
	}
	now := s.now()
	return s.tx("append log", func(ctx context.Context, tx pgx.Tx) error {
		var seq int64
		err := tx.QueryRow(ctx, `INSERT INTO logs (ts_ns, level, message, resource_type, resource_id, stream, subject, status, latency_ms, node,
				error_code, inference_id, prompt_version, candidate_chars, remembered, steer_turn, steer_mode, model, speech_model)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19) RETURNING seq`,
			ns(e.Timestamp), e.Level, e.Message, e.ResourceType, e.ResourceID, e.StreamName, e.Subject, e.Status, e.LatencyMS, e.Node,
			e.ErrorCode, c.id, c.version, c.chars, texts != nil, c.turn, c.mode, c.model, c.speech).Scan(&seq)
		if err != nil || texts == nil {
			return err
		}
		key, err := ensureMemoryUser(ctx, tx, e.Subject, e.Inference.UserTag, e.ResourceID, now)
		if err != nil {
			return err
		}
		sealed, err := store.SealStrings(key, memAAD("memory_texts", e.Subject, seq), append([]string{texts.Partner}, texts.Candidates...)...)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `INSERT INTO memory_texts (subject, seq, ts_ns, sealed) VALUES ($1, $2, $3, $4)`, e.Subject, seq, ns(e.Timestamp), sealed)
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
		var err error
		out, err = queryAll(ctx, s.pool, asRow(scanLog), `SELECT `+logCols+`
			FROM logs WHERE ts_ns >= $1 AND ($2 = '' OR level = $2) AND ($3 = '' OR stream = $3)
			ORDER BY ts_ns DESC, seq DESC LIMIT $4`, ns(q.Since), q.Level, q.Stream, lim)
		return err
	})
	return out, err
}

// Stats reads the window's infer entries, in time order, into a
// store.StatsBuilder; see store.Store. Its cost grows with the window.
func (s *Store) Stats(since, until time.Time) (store.Stats, error) {
	b := store.NewStatsBuilder()
	if !until.After(since) {
		return b.Stats(), nil
	}
	err := s.run("read stats", func(ctx context.Context) error {
		b = store.NewStatsBuilder() // run may call this twice
		rows, err := s.pool.Query(ctx, `SELECT subject, resource_id, status, error_code, latency_ms, prompt_version, inference_id IS NOT NULL, model,
				`+outcomeColumns+`
			FROM logs WHERE stream = 'infer' AND ts_ns >= $1 AND ts_ns < $2 ORDER BY ts_ns, seq`, ns(since), ns(until))
		if err != nil {
			return err
		}
		var r store.StatsRow
		var oc outcomeCols
		_, err = pgx.ForEachRow(rows, append([]any{&r.Subject, &r.KeyHash, &r.Status, &r.ErrorCode, &r.LatencyMS, &r.PromptVersion, &r.Answered, &r.Model}, oc.dest()...), func() error {
			row := r
			row.Outcome = oc.outcome()
			b.Add(row)
			return nil
		})
		return err
	})
	return b.Stats(), err
}

// StatsSeries computes the buckets in one grouped query; see store.Store.
func (s *Store) StatsSeries(since, until time.Time, bucket time.Duration) ([]store.StatsBucket, error) {
	return store.CountSeries(since, until, bucket, func(out []store.StatsBucket) error {
		n := int64(len(out))
		return s.run("read stats series", func(ctx context.Context) error {
			// numeric: (ts - since) cannot overflow however far apart they are.
			rows, err := s.pool.Query(ctx, `SELECT div(ts_ns::numeric - $1::numeric, $3::numeric)::bigint AS b,
					count(*), count(DISTINCT NULLIF(subject, '')), count(outcome_kind),
					count(*) FILTER (WHERE outcome_kind IN ('`+store.OutcomeSpoken+`', '`+store.OutcomeEdited+`'))
				FROM logs WHERE stream = 'infer' AND ts_ns >= $1 AND ts_ns < $2 GROUP BY b`, ns(since), ns(until), int64(bucket))
			if err != nil {
				return err
			}
			var b int64
			var total, users, outcomes, accepted int
			_, err = pgx.ForEachRow(rows, []any{&b, &total, &users, &outcomes, &accepted}, func() error {
				if b >= 0 && b < n {
					out[b].TotalRequests, out[b].ActiveUsers, out[b].Outcomes, out[b].Accepted = total, users, outcomes, accepted
				}
				return nil
			})
			return err
		})
	})
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

// PruneLogsToSize deletes the oldest entries until the rows take at most
// maxBytes (the sum of their stored sizes; PostgreSQL reuses the space a
// vacuum frees, it does not shrink the table file); see store.Store.
func (s *Store) PruneLogsToSize(maxBytes int64, batch int) (int, error) {
	if batch <= 0 {
		batch = store.DefaultPruneBatch
	}
	total := 0
	for {
		var size, count int64
		err := s.run("measure logs", func(ctx context.Context) error {
			return s.pool.QueryRow(ctx, "SELECT COALESCE(SUM(pg_column_size(l.*)), 0), COUNT(*) FROM logs l").Scan(&size, &count)
		})
		if err != nil || size <= maxBytes || count == 0 {
			return total, err
		}
		excess := max(1, (size-maxBytes)*count/size)
		for excess > 0 {
			var n int
			err := s.run("prune logs to size", func(ctx context.Context) error {
				tag, err := s.pool.Exec(ctx, `DELETE FROM logs WHERE seq IN (
					SELECT seq FROM logs ORDER BY ts_ns, seq LIMIT $1 FOR UPDATE SKIP LOCKED)`, min(excess, int64(batch)))
				n = int(tag.RowsAffected())
				return err
			})
			total += n
			if err != nil || n == 0 {
				return total, err
			}
			excess -= int64(n)
		}
	}
}
