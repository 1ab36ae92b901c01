package postgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/replyd/replyd/internal/secret"
)

// installationSecretBytes is the size of a secret InstallationSecret makes.
const installationSecretBytes = 32

// InstallationSecret gets or creates a secret; see store.Store. Boxes that
// race to create it all end up with the one value that was inserted first:
// the INSERT does nothing on a conflict and the SELECT after it (a new
// statement, so a new snapshot) reads what was committed.
func (s *Store) InstallationSecret(name string) ([]byte, error) {
	if name == "" {
		return nil, invalid("empty secret name")
	}
	v, ok, err := s.Secret(name)
	if err != nil || ok {
		return v, err
	}
	fresh, err := secret.Random(installationSecretBytes)
	if err != nil {
		return nil, err
	}
	err = s.run("create secret", func(ctx context.Context) error {
		if _, err := s.pool.Exec(ctx, "INSERT INTO secrets (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING", name, fresh); err != nil {
			return err
		}
		return s.pool.QueryRow(ctx, "SELECT value FROM secrets WHERE name = $1", name).Scan(&v)
	})
	return v, err
}

// Secret reads a secret; see store.Store.
func (s *Store) Secret(name string) ([]byte, bool, error) {
	var v []byte
	found := false
	err := s.run("read secret", func(ctx context.Context) error {
		err := s.pool.QueryRow(ctx, "SELECT value FROM secrets WHERE name = $1", name).Scan(&v)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		found = err == nil
		return err
	})
	return v, found, err
}

// SetSecret replaces or (empty value) deletes a secret; see store.Store.
func (s *Store) SetSecret(name string, value []byte) error {
	if name == "" {
		return invalid("empty secret name")
	}
	return s.run("store secret", func(ctx context.Context) error {
		var err error
		if len(value) == 0 {
			_, err = s.pool.Exec(ctx, "DELETE FROM secrets WHERE name = $1", name)
		} else {
			_, err = s.pool.Exec(ctx, `INSERT INTO secrets (name, value) VALUES ($1, $2)
				ON CONFLICT (name) DO UPDATE SET value = excluded.value`, name, value)
		}
		return err
	})
}
