package main

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/replyd/replyd/internal/secret"
	"github.com/replyd/replyd/store"
	"github.com/replyd/replyd/store/bolt"
)

type memKeyStore struct {
	hash               string
	sessions, pairings int // live admin sessions and pairing codes
}

func (m *memKeyStore) PruneSessions(now time.Time) (int, error) {
	n := 0
	if !now.Before(endOfTime) {
		n, m.sessions = m.sessions, 0
	}
	return n, nil
}

func (m *memKeyStore) PrunePairings(now time.Time) (int, error) {
	n := 0
	if !now.Before(endOfTime) {
		n, m.pairings = m.pairings, 0
	}
	return n, nil
}

func (m *memKeyStore) AdminKeyHash() (string, error)  { return m.hash, nil }
func (m *memKeyStore) SetAdminKeyHash(h string) error { m.hash = h; return nil }
func (m *memKeyStore) SetAdminKeyHashIfAbsent(h string) (bool, error) {
	if m.hash != "" {
		return false, nil
	}
	m.hash = h
	return true, nil
}

// racedKeyStore is a store on which another box stores its admin key
// between this box's read (empty) and its write.
type racedKeyStore struct {
	memKeyStore
	other string // the other box's hash, stored at the first write
}

func (r *racedKeyStore) AdminKeyHash() (string, error) { return "", nil }
func (r *racedKeyStore) SetAdminKeyHash(h string) error {
	r.hash = r.other // lost: the other box overwrites it
	return nil
}
func (r *racedKeyStore) SetAdminKeyHashIfAbsent(h string) (bool, error) {
	r.hash = r.other
	return false, nil
}

// TestEnsureAdminKeyLosesTheRaceQuietly: when another box stored the first
// admin key after this one read none, this box prints no key (it would not
// work) and keeps the other box's.
func TestEnsureAdminKeyLosesTheRaceQuietly(t *testing.T) {
	db := &racedKeyStore{other: "the other box's hash"}
	var out, logs bytes.Buffer
	if err := ensureAdminKey(db, "", &out, slog.New(slog.NewTextHandler(&logs, nil))); err != nil {
		t.Fatal(err)
	}
	if out.Len() != 0 {
		t.Errorf("printed %q; want nothing: the key would not work", out.String())
	}
	if db.hash != db.other {
		t.Errorf("stored %q, want the other box's hash kept", db.hash)
	}
	if !strings.Contains(logs.String(), "another box") {
		t.Errorf("log %q does not say another box made the key", logs.String())
	}
}

// mustMatch fails unless the stored hash is an Argon2id hash of key.
func mustMatch(t *testing.T, stored, key string) {
	t.Helper()
	if !strings.HasPrefix(stored, "$argon2id$") || strings.Contains(stored, key) {
		t.Fatalf("stored %q is not an Argon2id hash", stored)
	}
	if ok, err := secret.CheckAdminKey(key, stored); err != nil || !ok {
		t.Fatalf("the stored hash does not match the key: %v", err)
	}
}

func TestEnsureAdminKeyGeneratesOnceAndPrints(t *testing.T) {
	db := &memKeyStore{}
	var out bytes.Buffer
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if err := ensureAdminKey(db, "", &out, log); err != nil {
		t.Fatal(err)
	}
	i := strings.Index(out.String(), "REPLYD ADMIN KEY: ")
	if i < 0 {
		t.Fatalf("no key printed: %s", out.String())
	}
	key := strings.Fields(out.String()[i+len("REPLYD ADMIN KEY: "):])[0]
	if !strings.HasPrefix(key, adminKeyPrefix) || len(key) < 40 {
		t.Fatalf("key %q", key)
	}
	mustMatch(t, db.hash, key)
	// A generated key passes the strength check a configured one must pass.
	if err := secret.CheckAdminKeyStrength(key); err != nil {
		t.Fatalf("a generated key is refused: %v", err)
	}
	// A second start keeps the key and prints nothing.
	out.Reset()
	before := db.hash
	if err := ensureAdminKey(db, "", &out, log); err != nil || out.Len() != 0 || db.hash != before {
		t.Fatalf("second start: err %v, printed %q", err, out.String())
	}
}

func TestEnsureAdminKeyFromConfigIsNeverPrinted(t *testing.T) {
	db := &memKeyStore{hash: secret.Hash("the old key")} // a legacy SHA-256 hash
	var out bytes.Buffer
	const k = "configured-admin-key-7f3a9c1e"
	log := slog.New(slog.NewTextHandler(&out, nil))
	if err := ensureAdminKey(db, k, &out, log); err != nil {
		t.Fatal(err)
	}
	mustMatch(t, db.hash, k)
	if strings.Contains(out.String(), k) {
		t.Fatalf("output %q holds the key", out.String())
	}
	// The same key at the next start: the hash stays (no new salt).
	before := db.hash
	if err := ensureAdminKey(db, k, io.Discard, log); err != nil || db.hash != before {
		t.Fatalf("restart with the same key changed the hash (%v)", err)
	}
	// Neither the upgrade of the legacy hash nor the restart ended the
	// admin sessions and pairing codes.
	db.sessions, db.pairings = 2, 1
	if err := ensureAdminKey(db, k, io.Discard, log); err != nil || db.sessions != 2 || db.pairings != 1 {
		t.Fatalf("a restart with the same key ended sessions or pairings (%v)", err)
	}
	// Another configured key replaces it, and ends them.
	if err := ensureAdminKey(db, k+"-new", io.Discard, log); err != nil {
		t.Fatal(err)
	}
	mustMatch(t, db.hash, k+"-new")
	if db.sessions != 0 || db.pairings != 0 {
		t.Errorf("after the key was replaced: %d sessions and %d pairing codes left", db.sessions, db.pairings)
	}
}

// TestResetAdminKeyEndsSessionsAndPairings: admin-key --reset ends every
// admin session and pending pairing code: a session or a code handed out
// while the old key was trusted stops working with it.
func TestResetAdminKeyEndsSessionsAndPairings(t *testing.T) {
	db := &memKeyStore{hash: secret.Hash("the old key"), sessions: 3, pairings: 2}
	var out bytes.Buffer
	if err := resetAdminKey(db, &out, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		t.Fatal(err)
	}
	if db.sessions != 0 || db.pairings != 0 {
		t.Errorf("after the reset: %d sessions and %d pairing codes left", db.sessions, db.pairings)
	}
	if !strings.Contains(out.String(), "REPLYD ADMIN KEY: "+adminKeyPrefix) {
		t.Errorf("the new key was not printed: %q", out.String())
	}
}

// TestResetAdminKeyOnTheRealStore: on the bbolt store, a session and a
// pairing code that expire an hour from now stop working after the reset.
func TestResetAdminKeyOnTheRealStore(t *testing.T) {
	db, err := bolt.Open(filepath.Join(t.TempDir(), "replyd.db"), bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	now := time.Now()
	session, code := secret.Hash("a session token"), secret.Hash("ABCD2345")
	if err := db.CreateSession(session, now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	p := store.Pairing{CodeHash: code, Key: store.APIKey{ClientID: "tablet", Scopes: []string{"infer"}}, ExpiresAt: now.Add(time.Hour)}
	if err := db.CreatePairing(p, 0, now); err != nil {
		t.Fatal(err)
	}
	if err := resetAdminKey(db, io.Discard, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		t.Fatal(err)
	}
	if ok, err := db.SessionValid(session, now); err != nil || ok {
		t.Errorf("the session is still valid after the reset (%v)", err)
	}
	if _, err := db.RedeemPairing(code, secret.Hash("rpd_new"), now); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the pairing code after the reset: %v, want ErrNotFound", err)
	}
}
