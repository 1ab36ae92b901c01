package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/replyd/replyd/store"
	"github.com/replyd/replyd/store/bolt"
	"github.com/replyd/replyd/store/postgres"
)

// dbPath is where the bbolt file lives.
func dbPath(cfg *Config) string { return filepath.Join(cfg.DataDir, "replyd.db") }

// storeWait is how long serve waits for a PostgreSQL that does not answer
// yet (a hospital's boxes and database booting together) before giving up.
const storeWait = 30 * time.Second

// openStore opens the configured store: PostgreSQL when REPLYD_STORE_URL is
// set, else the bbolt file in the data directory (created, mode 0700 dir),
// checked before it is mapped and refused when damaged, or missing or empty
// where its marker says replyd has run (bolt.OpenInstall); a new install says
// so in the log. Common failures become messages an admin can act on.
func openStore(ctx context.Context, cfg *Config, log *slog.Logger) (store.Store, error) {
	if cfg.StoreURL != "" {
		return openPostgres(ctx, cfg.StoreURL, storeWait, log)
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("data directory %s: %w", cfg.DataDir, err)
	}
	db, inst, err := bolt.OpenInstall(dbPath(cfg), bolt.Options{})
	if err != nil {
		if errors.Is(err, bolt.ErrDamaged) {
			return nil, err // names the file, what is wrong and what to do
		}
		if errors.Is(err, store.ErrLocked) {
			return nil, fmt.Errorf("%s is in use by another replyd process (stop it first, or use another --data-dir): %w", dbPath(cfg), err)
		}
		return nil, fmt.Errorf("cannot open the data file %s: %w", dbPath(cfg), err)
	}
	if log != nil {
		switch inst {
		case bolt.NewInstall:
			log.Info("new install: created an empty data file", "path", dbPath(cfg), "marker", bolt.MarkerPath(dbPath(cfg)))
		case bolt.Upgraded:
			log.Info("wrote the install marker beside the data file: from now on a missing or empty data file is refused", "marker", bolt.MarkerPath(dbPath(cfg)))
		}
	}
	return db, nil
}

// openPostgres opens the PostgreSQL store at url, retrying for up to wait
// while the database cannot be reached (log, if not nil, says so).
func openPostgres(ctx context.Context, url string, wait time.Duration, log *slog.Logger) (*postgres.Store, error) {
	deadline := time.Now().Add(wait)
	for {
		db, err := postgres.Open(ctx, url, postgres.Options{})
		if err == nil {
			return db, nil
		}
		if !errors.Is(err, store.ErrUnavailable) || time.Now().After(deadline) {
			return nil, fmt.Errorf("cannot open the PostgreSQL store (REPLYD_STORE_URL): %w", err)
		}
		if log != nil {
			log.Warn("waiting for PostgreSQL", "error", err.Error())
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}
