package bolt

import (
	"errors"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/replyd/replyd/store"
	"github.com/replyd/replyd/store/storetest"
)

// TestFileWithoutAddedBucketsOpens: a data file written before the pairings
// bucket existed (an old install, an old backup) opens read-only, checks
// clean and reads no pairings; opening it read-write adds the bucket.
func TestFileWithoutAddedBucketsOpens(t *testing.T) {
	path := filepath.Join(t.TempDir(), "old.db")
	db := MustOpenAt(t, path, Options{})
	Must(t, db.bolt.Update(func(tx *bolt.Tx) error { return tx.DeleteBucket(bucketPairings) }))
	Must(t, db.Close())

	ro := MustOpenAt(t, path, Options{ReadOnly: true})
	Must(t, ro.Check())
	if _, err := ro.RedeemPairing("c", "k", t0); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("redeem on a file without pairings: err = %v, want ErrNotFound", err)
	}
	if n, err := ro.PrunePairings(t0); err != nil || n != 0 {
		t.Errorf("prune on a file without pairings: %d, %v", n, err)
	}
	Must(t, ro.Close())

	rw := MustOpenAt(t, path, Options{})
	Must(t, rw.CreatePairing(storetest.PairingFor("c", "a"), 1, t0))
}

// TestWrongPairingCodesWriteNothing: guessing codes must cost no disk.
func TestWrongPairingCodesWriteNothing(t *testing.T) {
	db, _ := MustOpen(t)
	Must(t, db.CreatePairing(storetest.PairingFor("real", "a"), 10, t0))
	writes := func() int64 { st := db.bolt.Stats(); return st.TxStats.GetWrite() }
	before := writes()
	for i := 0; i < 100; i++ {
		if _, err := db.RedeemPairing("guess", "k", t0); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("err = %v", err)
		}
	}
	if n, err := db.PrunePairings(t0); err != nil || n != 0 {
		t.Fatalf("prune: %d %v", n, err)
	}
	if got := writes(); got != before {
		t.Errorf("100 wrong codes and an empty prune wrote %d times", got-before)
	}
	_, err := db.RedeemPairing("real", "k", t0)
	Must(t, err)
	if writes() == before {
		t.Error("the write counter does not count: the check above proves nothing")
	}
}
