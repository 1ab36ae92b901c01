package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/replyd/replyd/internal/pgtest"
	"github.com/replyd/replyd/store"
	"github.com/replyd/replyd/store/postgres"
	"github.com/replyd/replyd/store/storetest"
)

// TestContract runs the store.Store scenario suite on a real PostgreSQL:
// one server, a fresh database per scenario.
func TestContract(t *testing.T) {
	srv := pgtest.Start(t)
	storetest.Run(t, func(t testing.TB, now func() time.Time) store.Store {
		// Four connections a store: dozens of scenarios run at once.
		return mustOpen(t, srv.NewDatabase(t)+"&pool_max_conns=4", postgres.Options{Now: now})
	})
}

// mustOpen opens a store on url and closes it when t ends.
func mustOpen(t testing.TB, url string, opts postgres.Options) *postgres.Store {
	t.Helper()
	s, err := postgres.Open(context.Background(), url, opts)
	if err != nil {
		t.Fatalf("postgres.Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}
