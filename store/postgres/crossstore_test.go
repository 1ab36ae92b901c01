package postgres_test

import (
	"path/filepath"
	"testing"

	"github.com/replyd/replyd/internal/pgtest"
	"github.com/replyd/replyd/store"
	"github.com/replyd/replyd/store/bolt"
	"github.com/replyd/replyd/store/postgres"
	"github.com/replyd/replyd/store/storetest"
)

// TestSnapshotAcrossStores moves a bbolt store's data into PostgreSQL and
// back into a fresh bbolt file: each copy answers as the original does.
func TestSnapshotAcrossStores(t *testing.T) {
	clk := storetest.NewClock(storetest.T0)
	bdb := openBolt(t, filepath.Join(t.TempDir(), "a.db"), clk)
	storetest.Fill(t, bdb)

	srv := pgtest.Start(t)
	pg := mustOpen(t, srv.NewDatabase(t), postgres.Options{Now: clk.Now})
	storetest.Must(t, bdb.Snapshot(func(snap store.Snapshot) error { return pg.Import(snap, false) }))
	storetest.SameData(t, bdb, pg)

	back := openBolt(t, filepath.Join(t.TempDir(), "b.db"), clk)
	storetest.Must(t, pg.Snapshot(func(snap store.Snapshot) error { return back.Import(snap, false) }))
	storetest.SameData(t, bdb, back)
}

func openBolt(t *testing.T, path string, clk *storetest.Clock) *bolt.DB {
	t.Helper()
	db, err := bolt.Open(path, bolt.Options{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}
