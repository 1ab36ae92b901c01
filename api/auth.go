package api

// Who is calling: the credential headers, the API key vocabulary and the two
// admission checks (a tablet's key on /v1/infer, an administrator on /v1/admin).

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"

	"github.com/labstack/echo/v4"

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

// hashHex returns the lowercase hex SHA-256 of s: how keys, codes and
// session tokens are stored and how api_key_hash is formed.
func hashHex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// apiKey authenticates the X-API-KEY header: missing, unknown or revoked is
// 401. It returns the key's hash even when it fails, for the log.
func (s *Server) apiKey(c echo.Context) (store.APIKey, string, error) {
	raw := c.Request().Header.Get(HeaderAPIKey)
	if raw == "" {
		return store.APIKey{}, "", errorf(CodeUnauthorized, "the %s header is required", HeaderAPIKey)
	}
	if len(raw) > maxSecretHeader {
		return store.APIKey{}, "", errorf(CodeUnauthorized, "%s is not a valid API key", HeaderAPIKey)
	}
	hash := hashHex(raw)
	key, err := s.store.GetKey(hash)
	if errors.Is(err, store.ErrNotFound) {
		return key, hash, errorf(CodeUnauthorized, "%s is not a valid API key", HeaderAPIKey)
	}
	if err != nil {
		return key, hash, err
	}
	if key.Status != store.StatusActive {
		return key, hash, errorf(CodeUnauthorized, "%s has been revoked", HeaderAPIKey)
	}
	return key, hash, nil
}

// Rate-limit budgets: each key has one of rate_limit_per_minute requests
// for inferences and another, as large, for feedback, so that reporting an
// outcome never costs an inference.
const (
	budgetInfer    = ""
	budgetFeedback = "#feedback"
)

// budgetExceeded is the message of a 429 per budget.
var budgetExceeded = map[string]string{
	budgetInfer:    "rate limit of %d requests per minute exceeded for this API key; retry in %d s",
	budgetFeedback: "feedback rate limit of %d reports per minute exceeded for this API key; retry in %d s",
}

// admit checks the key's scope and its rate limit in budget (the box's own,
// or the one shared through PostgreSQL), and records its use (at most once a
// minute per key).
func (s *Server) admit(c echo.Context, key store.APIKey, budget string) error {
	if !slices.Contains(key.Scopes, ScopeInfer) {
		return errorf(CodeForbidden, "this API key lacks the scope %q", ScopeInfer)
	}
	now := s.now()
	ok, retry, err := s.limiter.Allow(key.Hash+budget, key.RateLimitPerMinute, now)
	if err != nil {
		return err
	}
	if !ok {
		s.metrics.rateLimited.Inc()
		return &Error{
			Code:       CodeRateLimited,
			Message:    fmt.Sprintf(budgetExceeded[budget], key.RateLimitPerMinute, retryAfterSeconds(retry)),
			RetryAfter: retry,
		}
	}
	// The store persists "last used" at most once a minute; this spares
	// even the call in between.
	if s.touches.Begin(key.Hash, now) {
		if err := s.store.TouchKey(key.Hash, now); err != nil {
			s.touches.Failed(key.Hash, now)
			s.reqLogger(c).Warn("recording the key's last use failed", "error", err.Error())
		}
	}
	return nil
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

// adminAuth admits a request carrying a valid X-ADMIN-KEY (its SHA-256
// compared in constant time with the stored admin key hash) or a valid,
// unexpired X-ADMIN-SESSION. Neither, or an invalid one, is 401. An API key
// is never an admin credential.
func (s *Server) adminAuth(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		h := c.Request().Header
		key, session := h.Get(HeaderAdminKey), h.Get(HeaderAdminSession)
		if key == "" && session == "" {
			return errorf(CodeUnauthorized, "an admin credential is required: send %s or %s", HeaderAdminSession, HeaderAdminKey)
		}
		if key != "" && len(key) <= maxSecretHeader {
			want, err := s.store.AdminKeyHash()
			if err != nil {
				return err
			}
			got := hashHex(key)
			if want != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1 {
				c.Set(adminViaKey, true)
				return next(c)
			}
		}
		if session != "" && len(session) <= maxSecretHeader {
			ok, err := s.store.SessionValid(hashHex(session), s.now())
			if err != nil {
				return err
			}
			if ok {
				return next(c)
			}
		}
		return errorf(CodeUnauthorized, "the admin credential is invalid or expired")
	}
}

const adminViaKey = "replyd.admin_via_key"
