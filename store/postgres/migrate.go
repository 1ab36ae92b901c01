package postgres

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// The schema is a list of versioned SQL files embedded in the binary:
// migrations/NNNN_name.sql, applied in order, each in its own transaction
// together with the row that records it in schema_version. Files are never
// edited once released; a change is a new file.
//
// Why not golang-migrate or goose (both served by the module proxy): each
// runs through database/sql, so replyd would hold a second driver and
// connection pool beside pgxpool for the sake of a forward-only list of
// files, and each brings its own dependencies. What replyd needs is this
// file: a schema_version table, the files in order, and one advisory lock.
//
//go:embed migrations/*.sql
var migrationFS embed.FS

// migrationLock is the pg_advisory_lock key every replyd takes while it
// migrates, so that boxes starting together apply each file exactly once.
// ("replyd" in ASCII.)
const migrationLock int64 = 0x7265706c7964

// migration is one embedded file.
type migration struct {
	version int
	name    string
	sql     string
}

// migrations returns the embedded files in version order, checking that the
// versions run 1, 2, 3, … without gaps.
func migrations() ([]migration, error) {
	entries, err := fs.ReadDir(migrationFS, "migrations")
	if err != nil {
		return nil, err
	}
	var out []migration
	for _, e := range entries {
		name := e.Name()
		num, _, ok := strings.Cut(name, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || !strings.HasSuffix(name, ".sql") {
			return nil, fmt.Errorf("migration file %s: want NNNN_name.sql", name)
		}
		b, err := migrationFS.ReadFile(path.Join("migrations", name))
		if err != nil {
			return nil, err
		}
		if v != len(out)+1 {
			return nil, fmt.Errorf("migration file %s: version %d, want %d", name, v, len(out)+1)
		}
		out = append(out, migration{version: v, name: strings.TrimSuffix(name, ".sql"), sql: string(b)})
	}
	return out, nil
}

// SchemaVersion is the newest schema version this replyd knows.
func SchemaVersion() int {
	ms, err := migrations()
	if err != nil {
		panic(err) // the embedded files are part of the build
	}
	return len(ms)
}

// migrate applies the embedded migrations the database lacks, holding the
// advisory lock on one connection throughout. It refuses a database whose
// schema is newer than this replyd's.
func (s *Store) migrate(ctx context.Context) error {
	ms, err := migrations()
	if err != nil {
		return err
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", migrationLock); err != nil {
		return fmt.Errorf("taking the migration lock: %w", err)
	}
	defer func() {
		// A failed unlock leaves the lock to the session: drop the
		// connection so that PostgreSQL releases it.
		if _, err := conn.Exec(context.Background(), "SELECT pg_advisory_unlock($1)", migrationLock); err != nil {
			_ = conn.Conn().Close(context.Background())
		}
	}()
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_version (
		version    integer PRIMARY KEY,
		name       text NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return fmt.Errorf("creating schema_version: %w", err)
	}
	var current int
	if err := conn.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM schema_version").Scan(&current); err != nil {
		return fmt.Errorf("reading schema_version: %w", err)
	}
	if current > len(ms) {
		return fmt.Errorf("the database's schema version %d is newer than this replyd understands (%d): upgrade replyd", current, len(ms))
	}
	for _, m := range ms[current:] {
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, m.sql); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "INSERT INTO schema_version (version, name) VALUES ($1, $2)", m.version, m.name)
			return err
		})
		if err != nil {
			return fmt.Errorf("applying migration %s: %w", m.name, err)
		}
	}
	return nil
}
