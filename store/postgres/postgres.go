// Package postgres is replyd's store on PostgreSQL (pgx v5, pgxpool): the
// same store.Store contract as the embedded bbolt store, shared by every
// replyd box that points REPLYD_STORE_URL at one database. Both stores run
// the scenario suite in store/storetest.
//
// How the contract holds across boxes:
//   - one transaction (most often one statement) per logical write;
//   - counters several boxes share (OTP attempts, the per-key rate limit)
//     are single atomic statements, never read-modify-write in Go;
//   - nothing is cached: GetKey reads the row on every call, so a
//     revocation committed on one box is refused by every box at once;
//   - the schema comes from versioned SQL files embedded in the binary,
//     applied at Open under pg_advisory_lock so boxes that start together do
//     not race (see migrate.go);
//   - every call is bounded by Options.Timeout, and a database that cannot
//     be reached gives errors wrapping store.ErrUnavailable; the pool
//     reconnects by itself when the database is back.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/replyd/replyd/store"
)

// DefaultTimeout bounds one store call when Options.Timeout is zero.
const DefaultTimeout = 5 * time.Second

// DefaultMaxConns is the pool size of one box unless the URL sets
// pool_max_conns.
const DefaultMaxConns = 10

// Options configure Open. The zero value is usable.
type Options struct {
	// Now is the clock for defaults (a zero CreatedAt or Timestamp). It
	// defaults to time.Now.
	Now func() time.Time
	// Timeout bounds each call, queueing for a connection included. Zero
	// means DefaultTimeout.
	Timeout time.Duration
}

// Store is replyd's state in one PostgreSQL database. It is safe for
// concurrent use by many goroutines and by many processes on many machines.
type Store struct {
	pool    *pgxpool.Pool
	now     func() time.Time
	timeout time.Duration
	desc    string
	touches store.TouchThrottle
	closed  atomic.Bool
}

// The PostgreSQL store keeps the contract.
var _ store.Store = (*Store)(nil)

// Open connects to the database at url (PostgreSQL's URL or key=value
// syntax: sslmode, sslrootcert, sslcert, sslkey and the pool_* settings of
// pgxpool are honoured) and brings its schema up to date. It fails when the
// database cannot be reached (wrapping store.ErrUnavailable) or holds a newer
// schema than this replyd knows.
func Open(ctx context.Context, url string, opts Options) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		// pgconn's parse errors leave the password out.
		return nil, fmt.Errorf("store: PostgreSQL URL: %w", err)
	}
	if !strings.Contains(url, "pool_max_conns") {
		cfg.MaxConns = DefaultMaxConns
	}
	if _, ok := cfg.ConnConfig.RuntimeParams["application_name"]; !ok {
		cfg.ConnConfig.RuntimeParams["application_name"] = "replyd"
	}
	if cfg.ConnConfig.ConnectTimeout == 0 || cfg.ConnConfig.ConnectTimeout > 5*time.Second {
		cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("store: PostgreSQL: %w", err)
	}
	s := &Store{pool: pool, now: opts.Now, timeout: opts.Timeout, desc: describe(cfg.ConnConfig)}
	if err := s.migrate(ctx); err != nil {
		pool.Close()
		return nil, s.wrap("open "+s.desc, err)
	}
	return s, nil
}

// describe is the database's URL without the password.
func describe(c *pgx.ConnConfig) string {
	host := c.Host
	if strings.HasPrefix(host, "/") {
		host = "[" + host + "]"
	}
	return fmt.Sprintf("postgres://%s@%s/%s", c.User, net.JoinHostPort(host, fmt.Sprint(c.Port)), c.Database)
}

// Describe returns the database's URL without the password.
func (s *Store) Describe() string { return s.desc }

// Close closes the pool, waiting for the calls in flight.
func (s *Store) Close() error {
	s.closed.Store(true)
	s.pool.Close()
	return nil
}

// Ping checks that the database answers a query now.
func (s *Store) Ping(ctx context.Context) error {
	if s.closed.Load() {
		return fmt.Errorf("store %s: %w: closed", s.desc, store.ErrUnavailable)
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	var one int
	err := s.pool.QueryRow(ctx, "SELECT 1").Scan(&one)
	return s.wrap("ping", err)
}

// Size returns pg_database_size of the database.
func (s *Store) Size() (int64, error) {
	var n int64
	err := s.run("size", func(ctx context.Context) error {
		return s.pool.QueryRow(ctx, "SELECT pg_database_size(current_database())").Scan(&n)
	})
	return n, err
}

// Backup does not copy anything: PostgreSQL's backup is pg_dump (or the
// hospital's own base backups). The error says how.
func (s *Store) Backup(w io.Writer) (int64, error) {
	return 0, fmt.Errorf("store: backup: %w: replyd keeps its data in PostgreSQL (%s); back it up there, e.g. pg_dump --format=custom --file=replyd.dump %s, or with the hospital's PostgreSQL backups",
		store.ErrNotSupported, s.desc, s.desc)
}

// run calls fn with a context bounded by the store's timeout and classifies
// its error. When the failure happened before anything reached the server
// (pgconn.SafeToRetry: a dead pooled connection) it tries once more.
func (s *Store) run(op string, fn func(ctx context.Context) error) error {
	if s.closed.Load() {
		return fmt.Errorf("store %s: %s: %w: closed", s.desc, op, store.ErrUnavailable)
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	err := fn(ctx)
	if err != nil && pgconn.SafeToRetry(err) && ctx.Err() == nil {
		err = fn(ctx)
	}
	return s.wrap(op, err)
}

// tx runs fn in one transaction (committed when fn returns nil) under run.
func (s *Store) tx(op string, fn func(ctx context.Context, tx pgx.Tx) error) error {
	return s.run(op, func(ctx context.Context) error {
		return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error { return fn(ctx, tx) })
	})
}

// wrap leaves the store's sentinel errors as they are, marks the errors of
// an unreachable database with store.ErrUnavailable and prefixes the rest.
func (s *Store) wrap(op string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, store.ErrNotFound), errors.Is(err, store.ErrExists), errors.Is(err, store.ErrInvalid), errors.Is(err, store.ErrUnavailable),
		errors.Is(err, store.ErrExpired), errors.Is(err, store.ErrUsed), errors.Is(err, store.ErrLimit):
		return err
	case diskFull(err):
		return fmt.Errorf("store %s: %s: %w: %w", s.desc, op, store.ErrNoSpace, err)
	case unavailable(err):
		return fmt.Errorf("store %s: %s: %w: %w", s.desc, op, store.ErrUnavailable, err)
	}
	return fmt.Errorf("store %s: %s: %w", s.desc, op, err)
}

// diskFull reports whether err is PostgreSQL's disk_full: the database's
// disk has no room for the write.
func diskFull(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "53100"
}

// unavailable reports whether err means that the database could not be
// reached or went away (as opposed to refusing a statement).
func unavailable(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case strings.HasPrefix(pgErr.Code, "08"), // connection exception
			pgErr.Code == "57P01", // admin_shutdown
			pgErr.Code == "57P02", // crash_shutdown
			pgErr.Code == "57P03", // cannot_connect_now (starting up, shutting down)
			pgErr.Code == "53300": // too_many_connections
			return true
		}
		return false
	}
	var ce *pgconn.ConnectError
	var ne net.Error
	return errors.As(err, &ce) || errors.As(err, &ne) || pgconn.Timeout(err) || pgconn.SafeToRetry(err) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, net.ErrClosed) || strings.Contains(err.Error(), "conn closed")
}

// isUniqueViolation reports whether err is PostgreSQL's unique_violation.
func isUniqueViolation(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23505"
}

// Times are stored as Unix nanoseconds. Go can represent instants outside
// int64 nanoseconds (years before 1678 or after 2262): those clamp.
var (
	minNanoTime = time.Unix(0, math.MinInt64)
	maxNanoTime = time.Unix(0, math.MaxInt64)
)

// ns maps t to Unix nanoseconds, clamped; the zero Time maps to the
// smallest value so that it sorts first and bounds nothing.
func ns(t time.Time) int64 {
	switch {
	case t.IsZero(), t.Before(minNanoTime):
		return math.MinInt64
	case t.After(maxNanoTime):
		return math.MaxInt64
	}
	return t.UnixNano()
}

// nullNS maps the zero Time ("never") to NULL and any other to ns.
func nullNS(t time.Time) *int64 {
	if t.IsZero() {
		return nil
	}
	v := ns(t)
	return &v
}

// fromNS is the inverse of ns, in UTC.
func fromNS(v int64) time.Time { return time.Unix(0, v).UTC() }

// fromNullNS is the inverse of nullNS.
func fromNullNS(v *int64) time.Time {
	if v == nil {
		return time.Time{}
	}
	return fromNS(*v)
}

// invalid returns an error wrapping store.ErrInvalid.
func invalid(format string, args ...any) error {
	return fmt.Errorf("store: %w: %s", store.ErrInvalid, fmt.Sprintf(format, args...))
}
