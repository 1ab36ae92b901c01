package api

// Who is calling: the credential headers, the API key vocabulary and the two
// credential checks (a tablet's key on /v1/infer, an administrator on
// /v1/admin). Whether a caller's request then gets in is admit.go's.

import (
	"errors"
	"sync"

	"github.com/labstack/echo/v4"

	"github.com/replyd/replyd/internal/secret"
	"github.com/replyd/replyd/store"
)

// Header names of the credentials.
const (
	HeaderAPIKey       = "X-API-KEY"
	HeaderAdminKey     = "X-ADMIN-KEY"
	HeaderAdminSession = "X-ADMIN-SESSION"
)

// ScopeInfer is the scope an API key needs to call /v1/infer. It is the only
// scope replyd defines.
const ScopeInfer = "infer"

// knownScopes are the scopes a key may be created with.
var knownScopes = []string{ScopeInfer}

// maxSecretHeader bounds a credential header; longer values are invalid
// without being hashed.
const maxSecretHeader = 512

// apiKey authenticates the X-API-KEY header: missing, unknown or revoked is
// 401, or 429 once the client address has failed too often this minute.
// Either way the failure is only counted in memory (see authFailed and
// isAuthFailure); a valid key is served whatever its address's failures.
// It returns the key's hash even when it fails.
func (s *Server) apiKey(c echo.Context) (store.APIKey, string, error) {
	raw := c.Request().Header.Get(HeaderAPIKey)
	fail := func(hash, format string, args ...any) (store.APIKey, string, error) {
		if e := s.authFailed(c, failAPIKey); e != nil {
			return store.APIKey{}, hash, e
		}
		return store.APIKey{}, hash, errorf(CodeUnauthorized, format, args...)
	}
	if raw == "" {
		return fail("", "the %s header is required", HeaderAPIKey)
	}
	if len(raw) > maxSecretHeader {
		return fail("", "%s is not a valid API key", HeaderAPIKey)
	}
	hash := secret.Hash(raw)
	key, err := s.store.GetKey(hash)
	if errors.Is(err, store.ErrNotFound) {
		return fail(hash, "%s is not a valid API key", HeaderAPIKey)
	}
	if err != nil {
		return key, hash, err
	}
	if key.Status != store.StatusActive {
		return fail(hash, "%s has been revoked", HeaderAPIKey)
	}
	return key, hash, nil
}

// isAuthFailure reports whether err is apiKey's refusal of a credential (as
// opposed to a store failure).
func isAuthFailure(err error) bool {
	var ae *Error
	return errors.As(err, &ae) && (ae.Code == CodeUnauthorized || ae.Code == CodeRateLimited)
}

// isKeyHash reports whether h looks like an api_key_hash.
func isKeyHash(h string) bool {
	if len(h) != 64 {
		return false
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// adminAuth admits a request carrying a valid X-ADMIN-KEY or a valid,
// unexpired X-ADMIN-SESSION. Neither is 401; an invalid one is 401, counted
// as a failed authentication of the client address, and 429 (before the
// admin key's KDF runs) once the address has failed too often this minute.
// An API key is never an admin credential.
func (s *Server) adminAuth(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		h := c.Request().Header
		key, session := h.Get(HeaderAdminKey), h.Get(HeaderAdminSession)
		if key == "" && session == "" {
			return errorf(CodeUnauthorized, "an admin credential is required: send %s or %s", HeaderAdminSession, HeaderAdminKey)
		}
		if key != "" && len(key) <= maxSecretHeader {
			ok, err := s.checkAdminKey(c, key)
			if err != nil {
				return err
			}
			if ok {
				c.Set(adminViaKey, true)
				return next(c)
			}
		}
		if session != "" && len(session) <= maxSecretHeader {
			ok, err := s.store.SessionValid(secret.Hash(session), s.now())
			if err != nil {
				return err
			}
			if ok {
				return next(c)
			}
		}
		if e := s.authFailed(c, failAdmin); e != nil {
			return e
		}
		return errorf(CodeUnauthorized, "the admin credential is invalid or expired")
	}
}

const adminViaKey = "replyd.admin_via_key"

// verifiedAdminKey remembers the SHA-256 of the admin key last verified
// against a stored hash, so that scrapes and the admin page pay the KDF
// once. A different stored hash (a reset, another box's change) forgets it.
type verifiedAdminKey struct {
	mu     sync.Mutex
	stored string // the stored hash it was verified against
	digest string // secret.Hash of the key
}

func (v *verifiedAdminKey) known(stored, digest string) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.stored != "" && v.stored == stored && secret.Equal(v.digest, digest)
}

func (v *verifiedAdminKey) remember(stored, digest string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.stored, v.digest = stored, digest
}

// checkAdminKey reports whether key is the admin key. A key verified before
// is recognised by its SHA-256 alone. Otherwise the address's failures are
// checked first (429 without running the KDF), then the KDF runs, one at a
// time. A match against a legacy SHA-256 hash upgrades the stored hash to
// Argon2id.
func (s *Server) checkAdminKey(c echo.Context, key string) (bool, error) {
	stored, err := s.store.AdminKeyHash()
	if err != nil || stored == "" {
		return false, err
	}
	digest := secret.Hash(key)
	if s.adminKey.known(stored, digest) {
		return true, nil
	}
	if e := s.throttledAddr(c); e != nil {
		return false, e
	}
	select {
	case s.kdfSlot <- struct{}{}:
		defer func() { <-s.kdfSlot }()
	case <-c.Request().Context().Done():
		return false, &Error{Code: CodeCanceled, Message: "the client closed the request", Err: c.Request().Context().Err()}
	}
	// While this request waited, another may have verified the key, or
	// this address may have run out of failures.
	if s.adminKey.known(stored, digest) {
		return true, nil
	}
	if e := s.throttledAddr(c); e != nil {
		return false, e
	}
	ok, err := secret.CheckAdminKey(key, stored)
	if err != nil || !ok {
		return false, err
	}
	if secret.IsLegacyAdminKeyHash(stored) {
		if upgraded, err := secret.HashAdminKey(key); err != nil {
			s.reqLogger(c).Warn("hashing the admin key with Argon2id failed", "error", err.Error())
		} else if err := s.store.SetAdminKeyHash(upgraded); err != nil {
			s.reqLogger(c).Warn("storing the admin key's Argon2id hash failed", "error", err.Error())
		} else {
			stored = upgraded
			s.reqLogger(c).Info("the admin key's stored hash was upgraded from SHA-256 to Argon2id")
		}
	}
	s.adminKey.remember(stored, digest)
	return true, nil
}
