package store

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
)

// UserKeySize is the size of a user's AES-256-GCM key.
const UserKeySize = 32

// The encryption of remembered texts, shared by every Store
// implementation: a random AES-256 key per user (NewUserKey), and strings
// sealed with AES-GCM bound to the row they are stored in (SealStrings,
// OpenStrings).

// NewUserKey returns a fresh random AES-256 key for one user.
func NewUserKey() ([]byte, error) { return newUserKey() }

// SealStrings encrypts ss under key, bound to aad (name the row: a
// ciphertext copied to another row does not open).
func SealStrings(key, aad []byte, ss ...string) ([]byte, error) {
	return seal(key, aad, encodeStrings(ss...))
}

// OpenStrings reverses SealStrings; a wrong key or row is an error.
func OpenStrings(key, aad, sealed []byte) ([]string, error) {
	plain, err := unseal(key, aad, sealed)
	if err != nil {
		return nil, err
	}
	return decodeStrings(plain)
}

// newUserKey returns a fresh random AES-256 key.
func newUserKey() ([]byte, error) {
	k := make([]byte, UserKeySize)
	if _, err := rand.Read(k); err != nil {
		return nil, fmt.Errorf("store: user key: %w", err)
	}
	return k, nil
}

// seal encrypts plain with AES-GCM under key with a random 12-byte nonce,
// binding it to aad (the row it is stored in, so a ciphertext moved to
// another row or user does not open). The result is nonce ‖ ciphertext.
func seal(key, aad, plain []byte) ([]byte, error) {
	g, err := gcmOf(key)
	if err != nil {
		return nil, err
	}
	out := make([]byte, g.NonceSize(), g.NonceSize()+len(plain)+g.Overhead())
	if _, err := rand.Read(out); err != nil {
		return nil, fmt.Errorf("store: nonce: %w", err)
	}
	return g.Seal(out, out, plain, aad), nil
}

// unseal reverses seal; a wrong key, row or a damaged value is an error.
func unseal(key, aad, sealed []byte) ([]byte, error) {
	g, err := gcmOf(key)
	if err != nil {
		return nil, err
	}
	if len(sealed) < g.NonceSize()+g.Overhead() {
		return nil, errSealed
	}
	plain, err := g.Open(nil, sealed[:g.NonceSize()], sealed[g.NonceSize():], aad)
	if err != nil {
		return nil, errSealed
	}
	return plain, nil
}

var errSealed = errors.New("store: encrypted text does not open with its user's key")

func gcmOf(key []byte) (cipher.AEAD, error) {
	if len(key) != UserKeySize {
		return nil, fmt.Errorf("store: user key has %d bytes, want %d", len(key), UserKeySize)
	}
	b, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(b)
}

// encodeStrings and decodeStrings are the plaintext form of remembered
// texts: a uvarint count, then each string as a uvarint length and bytes.
func encodeStrings(ss ...string) []byte {
	n := binary.MaxVarintLen64
	for _, s := range ss {
		n += binary.MaxVarintLen64 + len(s)
	}
	b := binary.AppendUvarint(make([]byte, 0, n), uint64(len(ss)))
	for _, s := range ss {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	return b
}

func decodeStrings(b []byte) ([]string, error) {
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)) {
		return nil, errBadStrings
	}
	b = b[k:]
	out := make([]string, 0, n)
	for i := uint64(0); i < n; i++ {
		l, k := binary.Uvarint(b)
		if k <= 0 || l > uint64(len(b)-k) {
			return nil, errBadStrings
		}
		out = append(out, string(b[k:k+int(l)]))
		b = b[k+int(l):]
	}
	return out, nil
}

var errBadStrings = errors.New("store: malformed remembered texts")
