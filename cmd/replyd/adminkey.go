package main

import (
	"fmt"
	"io"
	"log/slog"
	"math"
	"time"

	"github.com/replyd/replyd/internal/secret"
	"github.com/replyd/replyd/store"
)

// adminKeyPrefix marks admin keys so that a key pasted in the wrong place is
// recognisable.
const adminKeyPrefix = "rdadm_"

// adminKeyStore is the part of the store the admin key needs.
type adminKeyStore interface {
	AdminKeyHash() (string, error)
	SetAdminKeyHash(hash string) error
	SetAdminKeyHashIfAbsent(hash string) (bool, error)
	PruneSessions(now time.Time) (int, error)
	PrunePairings(now time.Time) (int, error)
}

// endOfTime is after every expiry: pruning at it deletes every session and
// pairing.
var endOfTime = time.Unix(0, math.MaxInt64)

// endAdminGrants deletes every admin session and every pairing code: what
// the replaced admin key's holder (or a session made while it was trusted)
// may have handed out ends with it, on every box sharing the store (each
// request reads its session afresh).
func endAdminGrants(db adminKeyStore, log *slog.Logger) error {
	sessions, err := db.PruneSessions(endOfTime)
	if err != nil {
		return fmt.Errorf("ending the admin sessions: %w", err)
	}
	pairings, err := db.PrunePairings(endOfTime)
	if err != nil {
		return fmt.Errorf("ending the pairing codes: %w", err)
	}
	log.Info("admin key replaced: admin sessions and pairing codes ended", "sessions", sessions, "pairings", pairings)
	return nil
}

// ensureAdminKey makes sure the store holds an admin key hash (Argon2id,
// secret.HashAdminKey). A key from the configuration (REPLYD_ADMIN_KEY,
// whose strength Config.Validate checked) wins and is never printed; it is
// hashed again only when the stored hash does not match it; a configured key
// that replaces another ends every admin session and pairing code
// (endAdminGrants). Without one, a
// key is generated on first start and printed once on stderr; later starts
// keep the stored hash. The first key is stored only where none is, in one
// atomic step: of boxes that start together on one PostgreSQL database, one
// prints its key and the others keep (and print nothing but a log line).
func ensureAdminKey(db adminKeyStore, configured string, stderr io.Writer, log *slog.Logger) error {
	cur, err := db.AdminKeyHash()
	if err != nil {
		return fmt.Errorf("reading the admin key: %w", err)
	}
	if configured != "" {
		same, err := secret.CheckAdminKey(configured, cur)
		if cur != "" && !secret.IsLegacyAdminKeyHash(cur) && err == nil && same {
			return nil
		}
		h, err := secret.HashAdminKey(configured)
		if err != nil {
			return err
		}
		if err := db.SetAdminKeyHash(h); err != nil {
			return fmt.Errorf("storing the admin key hash: %w", err)
		}
		log.Info("admin key taken from the configuration")
		if cur != "" && !same {
			return endAdminGrants(db, log)
		}
		return nil
	}
	if cur != "" {
		return nil
	}
	key, h, err := newAdminKey()
	if err != nil {
		return err
	}
	stored, err := db.SetAdminKeyHashIfAbsent(h)
	if err != nil {
		return fmt.Errorf("storing the admin key hash: %w", err)
	}
	if !stored {
		log.Info("admin key made by another box sharing this store at the same moment; it printed the key")
		return nil
	}
	printAdminKey(stderr, key)
	return nil
}

// newAdminKey generates an admin key (256 random bits) and its Argon2id hash.
func newAdminKey() (key, hash string, err error) {
	key, err = secret.Token(adminKeyPrefix)
	if err != nil {
		return "", "", fmt.Errorf("generating the admin key: %w", err)
	}
	hash, err = secret.HashAdminKey(key)
	return key, hash, err
}

// resetAdminKey generates a new admin key (256 random bits), stores its
// Argon2id hash, ends every admin session and pairing code
// (endAdminGrants) and prints the key once.
func resetAdminKey(db adminKeyStore, stderr io.Writer, log *slog.Logger) error {
	key, h, err := newAdminKey()
	if err != nil {
		return err
	}
	if err := db.SetAdminKeyHash(h); err != nil {
		return fmt.Errorf("storing the admin key hash: %w", err)
	}
	if err := endAdminGrants(db, log); err != nil {
		return err
	}
	printAdminKey(stderr, key)
	return nil
}

func printAdminKey(w io.Writer, key string) {
	line := "=========================================================================="
	fmt.Fprintf(w, "\n%s\n REPLYD ADMIN KEY: %s\n\n It is shown only this once: keep it in a password manager. replyd stores\n only a slow hash of it. Send it as the X-ADMIN-KEY header or paste it into\n the admin page. Lost it? Stop replyd and run `replyd admin-key --reset`.\n%s\n\n", line, key, line)
}

var _ adminKeyStore = store.Store(nil)
