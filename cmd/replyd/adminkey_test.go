package main

import (
	"bytes"
	"io"
	"log/slog"
	"strings"
	"testing"
)

type memKeyStore struct{ hash string }

func (m *memKeyStore) AdminKeyHash() (string, error)  { return m.hash, nil }
func (m *memKeyStore) SetAdminKeyHash(h string) error { m.hash = h; return nil }

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
	if db.hash != sha256Hex(key) || strings.Contains(db.hash, key) {
		t.Fatal("the store must hold the SHA-256 of the key, not the key")
	}
	// A second start keeps the key and prints nothing.
	out.Reset()
	if err := ensureAdminKey(db, "", &out, log); err != nil || out.Len() != 0 || db.hash != sha256Hex(key) {
		t.Fatalf("second start: err %v, printed %q", err, out.String())
	}
}

func TestEnsureAdminKeyFromConfigIsNeverPrinted(t *testing.T) {
	db := &memKeyStore{hash: "old"}
	var out bytes.Buffer
	const k = "configured-admin-key-1234"
	if err := ensureAdminKey(db, k, &out, slog.New(slog.NewTextHandler(&out, nil))); err != nil {
		t.Fatal(err)
	}
	if db.hash != sha256Hex(k) || strings.Contains(out.String(), k) {
		t.Fatalf("hash %q, output %q", db.hash, out.String())
	}
	if err := ensureAdminKey(db, "short", io.Discard, slog.New(slog.NewTextHandler(io.Discard, nil))); err == nil {
		t.Fatal("a short configured key must be refused")
	}
}
