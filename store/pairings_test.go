package store

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	bolt "go.etcd.io/bbolt"
)

// pairingFor is a pending pairing created at t0 that expires 10 minutes later.
func pairingFor(codeHash, client string) Pairing {
	return Pairing{
		CodeHash:  codeHash,
		Key:       APIKey{ClientID: client, Status: StatusActive, Scopes: []string{"infer"}, RateLimitPerMinute: 30},
		CreatedAt: t0,
		ExpiresAt: t0.Add(10 * time.Minute),
	}
}

// pairingHashes lists the code hashes stored in the pairings bucket.
func pairingHashes(t *testing.T, db *DB) []string {
	t.Helper()
	var out []string
	Must(t, db.bolt.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketPairings).ForEach(func(k, _ []byte) error {
			out = append(out, string(k))
			return nil
		})
	}))
	return out
}

func TestRedeemPairingMintsTheKeyOnce(t *testing.T) {
	db, _ := MustOpen(t)
	Must(t, db.CreatePairing(pairingFor("code-a", "ward-3"), 10, t0))
	if keys, _ := db.ListKeys(0, true); len(keys) != 0 {
		t.Fatalf("a key exists before the code is redeemed: %+v", keys)
	}

	at := t0.Add(time.Minute)
	k, err := db.RedeemPairing("code-a", "key-1", at)
	Must(t, err)
	want := APIKey{Hash: "key-1", ClientID: "ward-3", Status: StatusActive, Scopes: []string{"infer"}, RateLimitPerMinute: 30, CreatedAt: at}
	if d := cmp.Diff(want, k); d != "" {
		t.Errorf("minted key (-want +got):\n%s", d)
	}
	got, err := db.GetKey("key-1")
	Must(t, err)
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("stored key (-want +got):\n%s", d)
	}
	if keys, _ := db.ListKeys(0, false); len(keys) != 1 || keys[0].Hash != "key-1" {
		t.Errorf("ListKeys after redeeming = %+v", keys)
	}

	if _, err := db.RedeemPairing("code-a", "key-2", at); !errors.Is(err, ErrUsed) {
		t.Errorf("second redemption: err = %v, want ErrUsed", err)
	}
	if _, err := db.GetKey("key-2"); !errors.Is(err, ErrNotFound) {
		t.Errorf("the second redemption minted a key: %v", err)
	}
	if _, err := db.RedeemPairing("no-such-code", "key-3", at); !errors.Is(err, ErrNotFound) {
		t.Errorf("unknown code: err = %v, want ErrNotFound", err)
	}
}

func TestRedeemPairingRevokedStatusAndTakenKeyHash(t *testing.T) {
	db, _ := MustOpen(t)
	p := pairingFor("code-r", "spare")
	p.Key.Status = StatusRevoked
	Must(t, db.CreatePairing(p, 0, t0))
	MustCreateKey(t, db, "taken", t0)
	if _, err := db.RedeemPairing("code-r", "taken", t0); !errors.Is(err, ErrExists) {
		t.Fatalf("taken key hash: err = %v, want ErrExists", err)
	}
	k, err := db.RedeemPairing("code-r", "fresh", t0)
	Must(t, err)
	if k.Status != StatusRevoked || !k.RevokedAt.Equal(t0) {
		t.Errorf("key from a revoked-status pairing: %+v", k)
	}
}

func TestExpiredPairingsLeaveNothingBehind(t *testing.T) {
	db, _ := MustOpen(t)
	Must(t, db.CreatePairing(pairingFor("old-unused", "a"), 10, t0))
	Must(t, db.CreatePairing(pairingFor("old-used", "b"), 10, t0))
	_, err := db.RedeemPairing("old-used", "key-b", t0.Add(time.Minute))
	Must(t, err)

	// Redeeming at the expiry instant fails and deletes the pairing.
	expiry := t0.Add(10 * time.Minute)
	if _, err := db.RedeemPairing("old-unused", "key-a", expiry); !errors.Is(err, ErrExpired) {
		t.Fatalf("expired code: err = %v, want ErrExpired", err)
	}
	if _, err := db.GetKey("key-a"); !errors.Is(err, ErrNotFound) {
		t.Errorf("an expired code minted a key: %v", err)
	}
	if d := cmp.Diff([]string{"old-used"}, pairingHashes(t, db)); d != "" {
		t.Errorf("pairings after the expired try (-want +got):\n%s", d)
	}

	// Pruning removes the used one too once it has expired.
	n, err := db.PrunePairings(expiry.Add(-time.Nanosecond))
	Must(t, err)
	if n != 0 {
		t.Errorf("pruned %d before the expiry", n)
	}
	n, err = db.PrunePairings(expiry)
	Must(t, err)
	if n != 1 || len(pairingHashes(t, db)) != 0 {
		t.Errorf("pruned %d, left %v; want 1 and nothing", n, pairingHashes(t, db))
	}
	if _, err := db.GetKey("key-b"); err != nil {
		t.Errorf("pruning the pairing removed its key: %v", err)
	}

	// Creating a pairing prunes the expired ones in the same transaction.
	Must(t, db.CreatePairing(pairingFor("stale", "c"), 10, t0))
	later := t0.Add(20 * time.Minute)
	fresh := pairingFor("fresh", "d")
	fresh.CreatedAt, fresh.ExpiresAt = later, later.Add(10*time.Minute)
	Must(t, db.CreatePairing(fresh, 10, later))
	if d := cmp.Diff([]string{"fresh"}, pairingHashes(t, db)); d != "" {
		t.Errorf("pairings after creating one (-want +got):\n%s", d)
	}
}

func TestCreatePairingBoundsAndDuplicates(t *testing.T) {
	db, _ := MustOpen(t)
	Must(t, db.CreatePairing(pairingFor("p1", "a"), 2, t0))
	if err := db.CreatePairing(pairingFor("p1", "a"), 2, t0); !errors.Is(err, ErrExists) {
		t.Errorf("duplicate code hash: err = %v, want ErrExists", err)
	}
	Must(t, db.CreatePairing(pairingFor("p2", "b"), 2, t0))
	if err := db.CreatePairing(pairingFor("p3", "c"), 2, t0); !errors.Is(err, ErrLimit) {
		t.Errorf("third pending pairing with a bound of 2: err = %v, want ErrLimit", err)
	}
	// A used pairing is no longer pending.
	_, err := db.RedeemPairing("p1", "k1", t0)
	Must(t, err)
	Must(t, db.CreatePairing(pairingFor("p3", "c"), 2, t0))

	if err := db.CreatePairing(Pairing{CodeHash: "x", ExpiresAt: t0}, 0, t0); err == nil || !strings.Contains(err.Error(), "expires") {
		t.Errorf("a pairing already expired: err = %v", err)
	}
	if err := db.CreatePairing(Pairing{ExpiresAt: t0.Add(time.Minute)}, 0, t0); err == nil {
		t.Error("an empty code hash was accepted")
	}
}

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
	if _, err := ro.RedeemPairing("c", "k", t0); !errors.Is(err, ErrNotFound) {
		t.Errorf("redeem on a file without pairings: err = %v, want ErrNotFound", err)
	}
	if n, err := ro.PrunePairings(t0); err != nil || n != 0 {
		t.Errorf("prune on a file without pairings: %d, %v", n, err)
	}
	Must(t, ro.Close())

	rw := MustOpenAt(t, path, Options{})
	Must(t, rw.CreatePairing(pairingFor("c", "a"), 1, t0))
}

// TestWrongPairingCodesWriteNothing: guessing codes must cost no disk.
func TestWrongPairingCodesWriteNothing(t *testing.T) {
	db, _ := MustOpen(t)
	Must(t, db.CreatePairing(pairingFor("real", "a"), 10, t0))
	writes := func() int64 { st := db.bolt.Stats(); return st.TxStats.GetWrite() }
	before := writes()
	for i := 0; i < 100; i++ {
		if _, err := db.RedeemPairing("guess", "k", t0); !errors.Is(err, ErrNotFound) {
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
