package postgres_test

import (
	"path/filepath"
	"testing"

	"github.com/replyd/replyd/internal/pgtest"
	"github.com/replyd/replyd/store"
	"github.com/replyd/replyd/store/postgres"
	"github.com/replyd/replyd/store/storetest"
)

// TestSnapshotAcrossStores moves a bbolt store's data into PostgreSQL and
// back into a fresh bbolt file: each copy answers as the original does.
func TestSnapshotAcrossStores(t *testing.T) {
	clk := storetest.NewClock(storetest.T0)
	bolt := openBolt(t, filepath.Join(t.TempDir(), "a.db"), clk)
	storetest.Fill(t, bolt)

	srv := pgtest.Start(t)
	pg := mustOpen(t, srv.NewDatabase(t), postgres.Options{Now: clk.Now})
	storetest.Must(t, bolt.Snapshot(func(snap store.Snapshot) error { return pg.Import(snap, false) }))
	storetest.SameData(t, bolt, pg)

	back := openBolt(t, filepath.Join(t.TempDir(), "b.db"), clk)
	storetest.Must(t, pg.Snapshot(func(snap store.Snapshot) error { return back.Import(snap, false) }))
	storetest.SameData(t, bolt, back)
}

func openBolt(t *testing.T, path string, clk *storetest.Clock) *store.DB {
	t.Helper()
	db, err := store.Open(path, store.Options{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}
