package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"

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

func modelChoices(ctx context.Context, q querier) ([]store.ModelChoice, error) {
	rows, err := q.Query(ctx, "SELECT node, kind, model, previous, at_ns FROM model_choices ORDER BY node COLLATE \"C\", kind COLLATE \"C\"")
	if err != nil {
		return nil, err
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.ModelChoice, error) {
		var c store.ModelChoice
		var at int64
		err := r.Scan(&c.Node, &c.Kind, &c.Model, &c.Previous, &at)
		c.At = fromNS(at)
		return c, err
	})
	if out == nil {
		out = []store.ModelChoice{}
	}
	return out, err
}
