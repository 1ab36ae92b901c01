// Package secret is the one place where replyd mints and hashes its secrets:
// API keys, admin keys, session tokens, one-time and pairing codes are
// random from crypto/rand (Token, Digits, Symbols), stored only as their
// SHA-256 (Hash) and compared in constant time (Equal); user ids become keyed pseudonyms
// (Pseudonym); the human-chosen admin key is stored with a slow KDF
// (HashAdminKey, CheckAdminKey). It is pure Go and imports nothing of
// replyd's.
package secret

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"math/big"
)

// Hash returns the lowercase hex SHA-256 of s: how API keys, session tokens
// and one-time codes are stored, and how api_key_hash is formed.
func Hash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// Equal compares two strings in constant time (for equal lengths).
func Equal(a, b string) bool {
	return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}

// Random returns n bytes from crypto/rand.
func Random(n int) ([]byte, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return nil, fmt.Errorf("secret: reading random bytes: %w", err)
	}
	return b, nil
}

// TokenBytes is the entropy of every token Token mints: 256 bits.
const TokenBytes = 32

// Token returns prefix followed by TokenBytes random bytes in unpadded
// base64url: API keys ("rpd_"), admin keys ("rdadm_") and session tokens
// ("").
func Token(prefix string) (string, error) {
	b, err := Random(TokenBytes)
	if err != nil {
		return "", err
	}
	return prefix + base64.RawURLEncoding.EncodeToString(b), nil
}

// Digits returns a uniformly random string of n decimal digits (leading
// zeros kept): a one-time login code. n must be between 1 and 18.
func Digits(n int) (string, error) {
	if n < 1 || n > 18 {
		return "", fmt.Errorf("secret: %d digits is outside 1-18", n)
	}
	max := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(n)), nil)
	v, err := rand.Int(rand.Reader, max)
	if err != nil {
		return "", fmt.Errorf("secret: reading random bytes: %w", err)
	}
	return fmt.Sprintf("%0*d", n, v.Int64()), nil
}

// Symbols returns n symbols drawn uniformly from alphabet (single-byte
// characters, 2 to 256 of them): a code a person reads and types, such as
// a tablet pairing code.
func Symbols(alphabet string, n int) (string, error) {
	if len(alphabet) < 2 || len(alphabet) > 256 || n < 1 {
		return "", fmt.Errorf("secret: %d symbols from an alphabet of %d", n, len(alphabet))
	}
	out := make([]byte, n)
	size := big.NewInt(int64(len(alphabet)))
	for i := range out {
		v, err := rand.Int(rand.Reader, size)
		if err != nil {
			return "", fmt.Errorf("secret: reading random bytes: %w", err)
		}
		out[i] = alphabet[v.Int64()]
	}
	return string(out), nil
}

// Pseudonym is how a payload's user_id is stored: the lowercase hex
// HMAC-SHA-256, keyed with the installation's pseudonym secret, of the hex
// SHA-256 of userID. Without the key, guessing ids (patient numbers are
// guessable) does not reverse it; with the same key every box of an
// installation, and every restored backup, maps an id to the same value.
func Pseudonym(key []byte, userID string) string {
	return PseudonymOfHash(key, Hash(userID))
}

// PseudonymOfHash is Pseudonym for a user id already hashed with Hash: the
// form earlier versions stored, which the store migrates with it.
func PseudonymOfHash(key []byte, userIDHash string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(userIDHash))
	return hex.EncodeToString(m.Sum(nil))
}
