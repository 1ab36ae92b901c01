package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/replyd/replyd/store"
)

// SetModelChoice stores a box's choice of model in one statement; see
// store.Store.
func (s *Store) SetModelChoice(c store.ModelChoice) error {
	if !store.ValidModelChoice(c) {
		return invalid("a model choice needs a node, a kind and a model")
	}
	if c.At.IsZero() {
		c.At = s.now()
	}
	return s.run("store model choice", func(ctx context.Context) error {
		_, err := s.pool.Exec(ctx, `INSERT INTO model_choices (node, kind, model, previous, at_ns) VALUES ($1, $2, $3, $4, $5)
			ON CONFLICT (node, kind) DO UPDATE SET model = EXCLUDED.model, previous = EXCLUDED.previous, at_ns = EXCLUDED.at_ns`,
			c.Node, c.Kind, c.Model, c.Previous, ns(c.At))
		return err
	})
}

// ModelChoices returns every box's choices; see store.Store.
func (s *Store) ModelChoices() ([]store.ModelChoice, error) {
	var out []store.ModelChoice
	err := s.run("read model choices", func(ctx context.Context) error {
		var err error
		out, err = modelChoices(ctx, s.pool)
		return err
	})
	return out, err
}

type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

func modelChoices(ctx context.Context, q querier) ([]store.ModelChoice, error) {
	return queryAll(ctx, q, func(r pgx.CollectableRow) (store.ModelChoice, error) {
		var c store.ModelChoice
		var at int64
		err := r.Scan(&c.Node, &c.Kind, &c.Model, &c.Previous, &at)
		c.At = fromNS(at)
		return c, err
	}, "SELECT node, kind, model, previous, at_ns FROM model_choices ORDER BY node COLLATE \"C\", kind COLLATE \"C\"")
}

// PutModelRecord stores a box's timing, comparison or window declaration in one statement; see
// store.Store.
func (s *Store) PutModelRecord(r store.ModelRecord) error {
	if !store.ValidModelRecord(r) {
		return invalid("a model record needs a node, a file, a kind (timing, comparison or window) and a body")
	}
	if r.At.IsZero() {
		r.At = s.now()
	}
	return s.run("store model record", func(ctx context.Context) error { return putModelRecord(ctx, s.pool, r) })
}

// putModelRecord stores r, replacing the record of the same node, file and
// what.
func putModelRecord(ctx context.Context, q execer, r store.ModelRecord) error {
	_, err := q.Exec(ctx, `INSERT INTO model_records (node, file, what, bytes, mod_time_ns, at_ns, body) VALUES ($1, $2, $3, $4, $5, $6, $7)
		ON CONFLICT (node, file, what) DO UPDATE SET bytes = EXCLUDED.bytes, mod_time_ns = EXCLUDED.mod_time_ns, at_ns = EXCLUDED.at_ns, body = EXCLUDED.body`,
		r.Node, r.File, r.What, r.Bytes, ns(r.ModTime), ns(r.At), r.Body)
	return err
}

// ModelRecords returns a box's records of its model files; see store.Store.
func (s *Store) ModelRecords(node string) ([]store.ModelRecord, error) {
	var out []store.ModelRecord
	err := s.run("read model records", func(ctx context.Context) error {
		var err error
		out, err = modelRecords(ctx, s.pool, "WHERE node = $1", node)
		return err
	})
	return out, err
}

// modelRecords reads the records that where (with its args; "" for every
// box's) selects, by node, file, then what. The result is never nil.
func modelRecords(ctx context.Context, q querier, where string, args ...any) ([]store.ModelRecord, error) {
	return queryAll(ctx, q, func(r pgx.CollectableRow) (store.ModelRecord, error) {
		var m store.ModelRecord
		var mt, at int64
		err := r.Scan(&m.Node, &m.File, &m.What, &m.Bytes, &mt, &at, &m.Body)
		m.ModTime, m.At = fromNS(mt), fromNS(at)
		return m, err
	}, `SELECT node, file, what, bytes, mod_time_ns, at_ns, body FROM model_records `+where+`
		ORDER BY node COLLATE "C", file COLLATE "C", what COLLATE "C"`, args...)
}

// DeleteModelRecords deletes a box's records of one file; see store.Store.
func (s *Store) DeleteModelRecords(node, file string) error {
	return s.run("delete model records", func(ctx context.Context) error {
		_, err := s.pool.Exec(ctx, `DELETE FROM model_records WHERE node = $1 AND file = $2`, node, file)
		return err
	})
}
