package secret

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strings"
	"unicode"

	"golang.org/x/crypto/argon2"
)

// Argon2id parameters of HashAdminKey: OWASP's first recommendation (19 MiB,
// two passes, one lane); about 40-60 ms on one core of a small x86 box.
const (
	argonMemoryKiB = 19 * 1024
	argonTime      = 2
	argonThreads   = 1
	argonSaltBytes = 16
	argonKeyBytes  = 32
)

// HashAdminKey returns the stored form of a human-chosen admin key: an
// Argon2id hash with a random salt, in the PHC string format
// "$argon2id$v=19$m=19456,t=2,p=1$<salt>$<hash>".
func HashAdminKey(key string) (string, error) {
	salt, err := Random(argonSaltBytes)
	if err != nil {
		return "", err
	}
	sum := argon2.IDKey([]byte(key), salt, argonTime, argonMemoryKiB, argonThreads, argonKeyBytes)
	b64 := base64.RawStdEncoding
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s", argon2.Version, argonMemoryKiB, argonTime, argonThreads,
		b64.EncodeToString(salt), b64.EncodeToString(sum)), nil
}

// ErrBadAdminKeyHash is returned by CheckAdminKey for a stored value it
// cannot read.
var ErrBadAdminKeyHash = errors.New("secret: the stored admin key hash is neither Argon2id nor SHA-256")

// IsLegacyAdminKeyHash reports whether stored is the bare hex SHA-256 that
// replyd stored before admin keys were hashed with Argon2id. Such a hash is
// still accepted and replaced by HashAdminKey's form on its first use.
func IsLegacyAdminKeyHash(stored string) bool {
	if len(stored) != 64 {
		return false
	}
	_, err := hex.DecodeString(stored)
	return err == nil
}

// CheckAdminKey reports whether key matches stored (HashAdminKey's form, or
// the legacy hex SHA-256), comparing in constant time. It runs Argon2id:
// callers throttle before calling it and remember a success.
func CheckAdminKey(key, stored string) (bool, error) {
	if IsLegacyAdminKeyHash(stored) {
		sum := sha256.Sum256([]byte(key))
		return Equal(hex.EncodeToString(sum[:]), stored), nil
	}
	parts := strings.Split(stored, "$")
	// "", "argon2id", "v=19", "m=..,t=..,p=..", salt, hash
	if len(parts) != 6 || parts[0] != "" || parts[1] != "argon2id" {
		return false, ErrBadAdminKeyHash
	}
	var version int
	var mem, iters uint32
	var threads uint8
	if _, err := fmt.Sscanf(parts[2], "v=%d", &version); err != nil || version != argon2.Version {
		return false, ErrBadAdminKeyHash
	}
	if _, err := fmt.Sscanf(parts[3], "m=%d,t=%d,p=%d", &mem, &iters, &threads); err != nil ||
		mem < 8 || mem > 1<<20 || iters < 1 || iters > 16 || threads < 1 {
		return false, ErrBadAdminKeyHash
	}
	b64 := base64.RawStdEncoding
	salt, err := b64.DecodeString(parts[4])
	if err != nil || len(salt) < 8 {
		return false, ErrBadAdminKeyHash
	}
	want, err := b64.DecodeString(parts[5])
	if err != nil || len(want) < 16 || len(want) > 64 {
		return false, ErrBadAdminKeyHash
	}
	got := argon2.IDKey([]byte(key), salt, iters, mem, threads, uint32(len(want)))
	return Equal(string(got), string(want)), nil
}

// Requirements of a human-chosen admin key (REPLYD_ADMIN_KEY).
const (
	MinAdminKeyChars = 20
	MinAdminKeyBits  = 80
)

// CheckAdminKeyStrength returns an error, written for the operator, when key
// has fewer than MinAdminKeyChars characters or an estimated strength under
// MinAdminKeyBits bits (EstimateBits). It never quotes the key.
func CheckAdminKeyStrength(key string) error {
	n := len([]rune(key))
	if n < MinAdminKeyChars {
		return fmt.Errorf("the admin key has %d characters; use at least %d (better: leave REPLYD_ADMIN_KEY empty and let replyd generate one)", n, MinAdminKeyChars)
	}
	if bits := EstimateBits(key); bits < MinAdminKeyBits {
		return fmt.Errorf("the admin key is too easy to guess (about %.0f bits; at least %d are needed): avoid repeated characters, runs such as abcd or 1234 and repeated words, or leave REPLYD_ADMIN_KEY empty and let replyd generate one", bits, MinAdminKeyBits)
	}
	return nil
}

// EstimateBits estimates the strength of a human-chosen secret in bits,
// pessimistically: each character is worth log2 of the size of the
// character classes the secret uses (lower case 26, upper case 26, digits
// 10, ASCII punctuation and space 33, anything else 100), except characters
// an attacker would predict, which are worth nothing: a repeat of the
// previous character, the next step of a run (abc, 1357, zyx), and the
// continuation of a pair seen earlier ("abab", "passpass").
func EstimateBits(s string) float64 {
	r := []rune(s)
	var lower, upper, digit, punct, other bool
	for _, c := range r {
		switch {
		case c >= 'a' && c <= 'z':
			lower = true
		case c >= 'A' && c <= 'Z':
			upper = true
		case c >= '0' && c <= '9':
			digit = true
		case c < 128 && (unicode.IsPunct(c) || unicode.IsSymbol(c) || c == ' '):
			punct = true
		default:
			other = true
		}
	}
	size := 0
	for _, cls := range []struct {
		used bool
		n    int
	}{{lower, 26}, {upper, 26}, {digit, 10}, {punct, 33}, {other, 100}} {
		if cls.used {
			size += cls.n
		}
	}
	if size == 0 {
		return 0
	}
	per := math.Log2(float64(size))
	free := 0
	for i := range r {
		if !predictable(r, i) {
			free++
		}
	}
	return float64(free) * per
}

// predictable reports whether r[i] follows from what comes before it.
func predictable(r []rune, i int) bool {
	if i >= 1 && r[i] == r[i-1] {
		return true
	}
	if i >= 2 && r[i]-r[i-1] == r[i-1]-r[i-2] && abs(r[i]-r[i-1]) <= 3 {
		return true
	}
	// The pair (r[i-1], r[i]) already occurred at the same spacing.
	for lag := 2; lag <= i-1; lag++ {
		if r[i] == r[i-lag] && r[i-1] == r[i-1-lag] {
			return true
		}
	}
	return false
}

func abs(v rune) rune {
	if v < 0 {
		return -v
	}
	return v
}
