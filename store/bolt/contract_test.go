package bolt_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/replyd/replyd/store"
	"github.com/replyd/replyd/store/bolt"
	"github.com/replyd/replyd/store/storetest"
)

// TestContract runs the store.Store scenario suite on bbolt files.
func TestContract(t *testing.T) {
	storetest.Run(t, func(t testing.TB, now func() time.Time) store.Store {
		t.Helper()
		path := filepath.Join(t.TempDir(), "replyd.db")
		db, err := bolt.Open(path, bolt.Options{Now: now})
		if err != nil {
			t.Fatalf("Open(%s): %v", path, err)
		}
		t.Cleanup(func() { _ = db.Close() })
		return db
	})
}

// TestLimiterContract runs the store.RateLimiter scenarios on the bbolt
// store's limiter.
func TestLimiterContract(t *testing.T) {
	storetest.RunLimiter(t, func(t testing.TB) store.RateLimiter {
		path := filepath.Join(t.TempDir(), "replyd.db")
		db, err := bolt.Open(path, bolt.Options{})
		if err != nil {
			t.Fatalf("Open(%s): %v", path, err)
		}
		t.Cleanup(func() { _ = db.Close() })
		return db
	})
}
