package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// queryAll runs sql with args on q and scans every row with scan: the rows
// in the query's order, never nil.
func queryAll[T any](ctx context.Context, q querier, scan pgx.RowToFunc[T], sql string, args ...any) ([]T, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	out, err := pgx.CollectRows(rows, scan)
	if out == nil {
		out = []T{}
	}
	return out, err
}

// asRow adapts a scanner of one pgx.Row (which QueryRow's answer also is)
// to pgx.CollectRows.
func asRow[T any](scan func(pgx.Row) (T, error)) pgx.RowToFunc[T] {
	return func(r pgx.CollectableRow) (T, error) { return scan(r) }
}
