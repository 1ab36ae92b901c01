package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/replyd/replyd/store"
)

// PairingFor is a pending pairing created at T0 that expires 10 minutes later.
func PairingFor(codeHash, client string) store.Pairing {
	return store.Pairing{
		CodeHash:  codeHash,
		Key:       store.APIKey{ClientID: client, Status: store.StatusActive, Scopes: []string{"infer"}, RateLimitPerMinute: 30},
		CreatedAt: T0,
		ExpiresAt: T0.Add(10 * time.Minute),
	}
}

func pairingsRedeemOnce(t *testing.T, e Env) {
	s := e.S
	Must(t, s.CreatePairing(PairingFor("code-a", "ward-3"), 10, T0))
	if keys, _ := s.ListKeys(0, true); len(keys) != 0 {
		t.Fatalf("a key exists before the code is redeemed: %+v", keys)
	}
	at := T0.Add(time.Minute)
	k, err := s.RedeemPairing("code-a", "key-1", at)
	Must(t, err)
	want := store.APIKey{Hash: "key-1", ClientID: "ward-3", Status: store.StatusActive, Scopes: []string{"infer"}, RateLimitPerMinute: 30, CreatedAt: at}
	if d := cmp.Diff(want, k); d != "" {
		t.Errorf("minted key (-want +got):\n%s", d)
	}
	got, err := s.GetKey("key-1")
	Must(t, err)
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("stored key (-want +got):\n%s", d)
	}
	if keys, _ := s.ListKeys(0, false); len(keys) != 1 || keys[0].Hash != "key-1" {
		t.Errorf("ListKeys after redeeming = %+v", keys)
	}
	wantRedeemRefused(t, s, "second redemption", "code-a", "key-2", at, store.ErrUsed)
	wantRedeemRefused(t, s, "unknown code", "no-such-code", "key-3", at, store.ErrNotFound)
}

// wantRedeemRefused fails t unless redeeming code as key at at fails with
// want and leaves no key of that hash.
func wantRedeemRefused(t *testing.T, s store.Store, what, code, key string, at time.Time, want error) {
	t.Helper()
	_, err := s.RedeemPairing(code, key, at)
	wantErr(t, what, err, want)
	_, err = s.GetKey(key)
	wantErr(t, "the key of a refused redemption ("+what+")", err, store.ErrNotFound)
}

func pairingsRevokedAndTakenHash(t *testing.T, e Env) {
	s := e.S
	p := PairingFor("code-r", "spare")
	p.Key.Status = store.StatusRevoked
	Must(t, s.CreatePairing(p, 0, T0))
	MustCreateKey(t, s, "taken", T0)
	_, err := s.RedeemPairing("code-r", "taken", T0)
	wantErr(t, "taken key hash", err, store.ErrExists)
	k, err := s.RedeemPairing("code-r", "fresh", T0)
	Must(t, err)
	if k.Status != store.StatusRevoked || !k.RevokedAt.Equal(T0) {
		t.Errorf("key from a revoked-status pairing: %+v", k)
	}
}

func pairingsExpire(t *testing.T, e Env) {
	s := e.S
	Must(t, s.CreatePairing(PairingFor("old-unused", "a"), 10, T0))
	Must(t, s.CreatePairing(PairingFor("old-used", "b"), 10, T0))
	_, err := s.RedeemPairing("old-used", "key-b", T0.Add(time.Minute))
	Must(t, err)

	expiry := T0.Add(10 * time.Minute)
	wantRedeemRefused(t, s, "code at its expiry", "old-unused", "key-a", expiry, store.ErrExpired)
	// The expired pairing is gone: now it is unknown.
	wantRedeemRefused(t, s, "expired code tried again", "old-unused", "key-a", expiry, store.ErrNotFound)

	n, err := s.PrunePairings(expiry.Add(-time.Nanosecond))
	Must(t, err)
	if n != 0 {
		t.Errorf("pruned %d before the expiry", n)
	}
	n, err = s.PrunePairings(expiry)
	Must(t, err)
	if n != 1 {
		t.Errorf("pruned %d at the expiry, want the used one", n)
	}
	wantRedeemRefused(t, s, "used code after pruning", "old-used", "key-c", expiry, store.ErrNotFound)
	if _, err := s.GetKey("key-b"); err != nil {
		t.Errorf("pruning the pairing removed its key: %v", err)
	}

	// Creating a pairing deletes the expired ones in the same transaction.
	Must(t, s.CreatePairing(PairingFor("stale", "c"), 10, T0))
	later := T0.Add(20 * time.Minute)
	fresh := PairingFor("fresh", "d")
	fresh.CreatedAt, fresh.ExpiresAt = later, later.Add(10*time.Minute)
	Must(t, s.CreatePairing(fresh, 10, later))
	if n, err := s.PrunePairings(later); err != nil || n != 0 {
		t.Errorf("after creating a pairing, pruning found %d expired (%v), want 0", n, err)
	}
}

func pairingsBoundAndInvalid(t *testing.T, e Env) {
	s := e.S
	Must(t, s.CreatePairing(PairingFor("p1", "a"), 2, T0))
	wantErr(t, "duplicate code hash", s.CreatePairing(PairingFor("p1", "a"), 2, T0), store.ErrExists)
	Must(t, s.CreatePairing(PairingFor("p2", "b"), 2, T0))
	wantErr(t, "third pending pairing with a bound of 2", s.CreatePairing(PairingFor("p3", "c"), 2, T0), store.ErrLimit)
	// A used pairing is no longer pending.
	_, err := s.RedeemPairing("p1", "k1", T0)
	Must(t, err)
	Must(t, s.CreatePairing(PairingFor("p3", "c"), 2, T0))

	wantErr(t, "a pairing already expired", s.CreatePairing(store.Pairing{CodeHash: "x", ExpiresAt: T0}, 0, T0), store.ErrInvalid)
	wantErr(t, "an empty code hash", s.CreatePairing(store.Pairing{ExpiresAt: T0.Add(time.Minute)}, 0, T0), store.ErrInvalid)
	wantRedeemRefused(t, s, "redeeming an empty hash", "", "k", T0, store.ErrInvalid)
}

// pairingsConcurrentRedeem: of eight redemptions of one code at once (on
// PostgreSQL, possibly from several boxes), exactly one mints a key.
func pairingsConcurrentRedeem(t *testing.T, e Env) {
	s := e.S
	Must(t, s.CreatePairing(PairingFor("race", "r"), 10, T0))
	errs := concurrently(8, func(i int) error {
		_, err := s.RedeemPairing("race", fmt.Sprintf("key-%d", i), T0.Add(time.Second))
		return err
	})
	ok := oneSucceeded(t, errs, store.ErrUsed, "concurrent redemption")
	if ok != 1 {
		t.Errorf("%d of 8 concurrent redemptions succeeded, want exactly 1", ok)
	}
	if keys, _ := s.ListKeys(0, true); len(keys) != 1 {
		t.Errorf("%d keys minted, want 1", len(keys))
	}
}
