package main

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"

	"github.com/replyd/replyd/store"
)

// adminKeyPrefix marks admin keys so that a key pasted in the wrong place is
// recognisable.
const adminKeyPrefix = "rdadm_"

// newAdminKey returns a fresh admin key: 32 random bytes from crypto/rand.
func newAdminKey() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generating the admin key: %w", err)
	}
	return adminKeyPrefix + base64.RawURLEncoding.EncodeToString(b), nil
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// adminKeyStore is the part of the store the admin key needs.
type adminKeyStore interface {
	AdminKeyHash() (string, error)
	SetAdminKeyHash(hash string) error
}

// ensureAdminKey makes sure the store holds an admin key hash. A key from the
// configuration (REPLYD_ADMIN_KEY) wins and is never printed. Without one, a
// key is generated on first start and printed once on stderr; later starts
// keep the stored hash.
func ensureAdminKey(db adminKeyStore, configured string, stderr io.Writer, log *slog.Logger) error {
	if configured != "" {
		if len(configured) < 16 {
			return fmt.Errorf("REPLYD_ADMIN_KEY is too short: use at least 16 characters")
		}
		h := sha256Hex(configured)
		cur, err := db.AdminKeyHash()
		if err != nil {
			return fmt.Errorf("reading the admin key: %w", err)
		}
		if cur != h {
			if err := db.SetAdminKeyHash(h); err != nil {
				return fmt.Errorf("storing the admin key hash: %w", err)
			}
			log.Info("admin key taken from the configuration")
		}
		return nil
	}
	cur, err := db.AdminKeyHash()
	if err != nil {
		return fmt.Errorf("reading the admin key: %w", err)
	}
	if cur != "" {
		return nil
	}
	return resetAdminKey(db, stderr)
}

// resetAdminKey generates a new admin key, stores its hash and prints the
// key once.
func resetAdminKey(db adminKeyStore, stderr io.Writer) error {
	key, err := newAdminKey()
	if err != nil {
		return err
	}
	if err := db.SetAdminKeyHash(sha256Hex(key)); err != nil {
		return fmt.Errorf("storing the admin key hash: %w", err)
	}
	printAdminKey(stderr, key)
	return nil
}

func printAdminKey(w io.Writer, key string) {
	line := "=========================================================================="
	fmt.Fprintf(w, "\n%s\n REPLYD ADMIN KEY: %s\n\n It is shown only this once: keep it in a password manager. replyd stores\n only its SHA-256. Send it as the X-ADMIN-KEY header or paste it into the\n admin page. Lost it? Stop replyd and run `replyd admin-key --reset`.\n%s\n\n", line, key, line)
}

var _ adminKeyStore = store.Store(nil)
