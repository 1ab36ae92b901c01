package api

// Pairing a tablet: an administrator asks for a short one-time code (and a QR
// code of the /app/ link that carries it); the tablet trades the code for its
// API key. The key is minted only then.

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/replyd/replyd/internal/secret"
	"github.com/replyd/replyd/store"
)

// pairingAlphabet has 32 symbols that are hard to confuse when read aloud or
// typed: the digits 2-9 and the capital letters without I and O.
const pairingAlphabet = "23456789ABCDEFGHJKLMNPQRSTUVWXYZ"

// pairingCodeLen is the length of a pairing code: 32^8 = 2^40 codes.
const pairingCodeLen = 8

// pairingCodeSpace is the number of possible pairing codes.
var pairingCodeSpace = math.Pow(float64(len(pairingAlphabet)), pairingCodeLen)

// The pairing throttle's keys: one per client address (in the box's own
// memory, Server.pairAddrs) and one for all addresses together (in the
// server's rate limiter, where API keys are counted under their
// 64-hex-digit hashes, so it never meets one).
const (
	pairAddrKeyPrefix = "pair:addr:"
	pairGlobalKey     = "pair:all"
)

// newPairingCode returns a random code of pairingCodeLen symbols.
func newPairingCode() (string, error) {
	return secret.Symbols(pairingAlphabet, pairingCodeLen)
}

// normalizePairingCode upper-cases code and drops spaces and hyphens (people
// type "abcd-2345"). It reports whether the result is a well-formed code.
func normalizePairingCode(code string) (string, bool) {
	if len(code) > 64 {
		return "", false
	}
	code = strings.Map(func(r rune) rune {
		switch {
		case r == ' ' || r == '-' || r == '\t':
			return -1
		case r >= 'a' && r <= 'z':
			return r - 'a' + 'A'
		}
		return r
	}, code)
	if len(code) != pairingCodeLen {
		return code, false
	}
	for i := 0; i < len(code); i++ {
		if strings.IndexByte(pairingAlphabet, code[i]) < 0 {
			return code, false
		}
	}
	return code, true
}

// pairingResponse answers POST /v1/admin/pairings. The key settings are
// those the minted key will have.
type pairingResponse struct {
	PairingCode        string    `json:"pairing_code"`
	ExpiresAt          time.Time `json:"expires_at"`
	PairURL            string    `json:"pair_url"`
	QRSVG              string    `json:"qr_svg"`
	ClientID           string    `json:"client_id"`
	Status             string    `json:"status"`
	Scopes             []string  `json:"scopes"`
	RateLimitPerMinute int       `json:"rate_limit_per_minute"`
	// MemoryUser is the memory_user the paired key will be linked to.
	MemoryUser string `json:"memory_user,omitempty"`
}

// handleCreatePairing serves POST /v1/admin/pairings: the optional body of
// POST /v1/admin/keys; it records a pending pairing with those settings and
// answers its code, expiry, /app/ link and the link's QR code. No key exists
// until the code is redeemed with POST /v1/pair.
func (s *Server) handleCreatePairing(c echo.Context) error {
	k, memSubject, err := s.readKeySettings(c)
	if err != nil {
		return err
	}
	code, err := newPairingCode()
	if err != nil {
		return err
	}
	now := s.now().UTC()
	p := store.Pairing{CodeHash: secret.Hash(code), Key: k, CreatedAt: now, ExpiresAt: now.Add(s.limits.PairingTTL), MemorySubject: memSubject}
	err = s.store.CreatePairing(p, s.limits.MaxPendingPairings, now)
	if errors.Is(err, store.ErrLimit) {
		return errorf(CodeConflict, "%d pairing codes are waiting to be used; use one or let them expire (they work for %s) before making another",
			s.limits.MaxPendingPairings, formatWindow(s.limits.PairingTTL))
	}
	if err != nil {
		return err
	}
	link := s.appBaseURL(c.Request()) + "#pair=" + code
	svg, err := qrSVG(link, "QR code that opens the conversation page and pairs the tablet")
	if err != nil {
		return err
	}
	s.adminLog(c, store.LevelInfo, "pairing", "pairing code made for client %q, valid for %s", k.ClientID, formatWindow(s.limits.PairingTTL))
	return c.JSON(http.StatusOK, pairingResponse{
		PairingCode:        code,
		ExpiresAt:          p.ExpiresAt,
		PairURL:            link,
		QRSVG:              svg,
		ClientID:           k.ClientID,
		Status:             k.Status,
		Scopes:             k.Scopes,
		RateLimitPerMinute: k.RateLimitPerMinute,
		MemoryUser:         optLabel(memSubject),
	})
}

// optLabel is the user label of subject, "" for none.
func optLabel(subject string) string {
	if subject == "" {
		return ""
	}
	return userLabel(subject)
}

// appBaseURL is the absolute URL of /app/: under the configured public URL,
// else the scheme this server speaks and the request's Host.
func (s *Server) appBaseURL(r *http.Request) string {
	if s.publicURL != "" {
		return strings.TrimSuffix(s.publicURL, "/") + "/app/"
	}
	scheme := "http"
	if r.TLS != nil || s.tls {
		scheme = "https"
	}
	return (&url.URL{Scheme: scheme, Host: r.Host, Path: "/app/"}).String()
}

// handleUnpair serves DELETE /v1/pair: a tablet that unpairs gives its key
// up. The key (X-API-KEY) is revoked as DELETE /v1/admin/keys/{hash} would
// revoke it, so a copy of it left in the tablet's storage or a backup no
// longer works, and its work in progress ends (a live session closes with
// 4401: rights.go). 204; 401 for a key that is unknown or already revoked.
func (s *Server) handleUnpair(c echo.Context) error {
	key, _, err := s.apiKey(c)
	if err != nil {
		return err
	}
	if _, err := s.store.RevokeKey(key.Hash, s.now().UTC()); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return errorf(CodeUnauthorized, "%s is not a valid API key", HeaderAPIKey)
		}
		return err
	}
	s.adminLog(c, store.LevelInfo, key.Hash, "api key revoked by its tablet, which unpaired (client %s)", key.ClientID)
	s.rightsChanged(key.Hash)
	return c.NoContent(http.StatusNoContent)
}

type pairRequest struct {
	Code string `json:"code"`
}

// wrongPairingCodeMessage is the one answer to a pairing code that does not
// pair.
const wrongPairingCodeMessage = "the pairing code is not valid: it is wrong, has expired or was already used; check it, or make a new one on the admin page (Keys, Add tablet)"

// handlePair serves POST /v1/pair: {"code"} with no credential. Within the
// throttle, a pending, unexpired code mints the key the admin described and
// answers exactly what POST /v1/admin/keys answers; the code then stops
// working. Wrong, expired and used codes are the same 401 (one message, so
// that nobody learns a code was real), too many tries 429 with Retry-After.
func (s *Server) handlePair(c echo.Context) error {
	now := s.now()
	if err := s.pairThrottle(c, now); err != nil {
		return err
	}
	var req pairRequest
	if err := s.readJSON(c, &req, false); err != nil {
		return err
	}
	if strings.TrimSpace(req.Code) == "" {
		return badRequest("code is required")
	}
	code, ok := normalizePairingCode(req.Code)
	if !ok {
		return badRequest("code must be the %d letters and digits shown on the admin page, for example 7KQ3-MZ2A", pairingCodeLen)
	}
	key, hash, err := newAPIKey()
	if err != nil {
		return err
	}
	k, err := s.store.RedeemPairing(secret.Hash(code), hash, now.UTC())
	switch {
	case errors.Is(err, store.ErrNotFound), errors.Is(err, store.ErrExpired), errors.Is(err, store.ErrUsed):
		// Wrong, expired and used codes get one answer, and each counts as
		// a failed authentication of the address (in memory, logged once a
		// minute): the answer never tells a caller that a code was real.
		s.countFailure(ClientAddr(c), failPairingCode)
		return errorf(CodeUnauthorized, "%s", wrongPairingCodeMessage)
	case err != nil:
		return err
	}
	s.adminLog(c, store.LevelInfo, k.Hash, "tablet paired: api key created for client %q", k.ClientID)
	c.Response().Header().Set("Cache-Control", "no-store")
	return c.JSON(http.StatusOK, toKeyCreateResponse(key, k))
}

// pairThrottle admits one POST /v1/pair attempt per the limits. An address
// past its failed authentications (wrong pairing codes count among them) is
// refused first; then the address's attempts are counted in this box's
// memory, so that a flood from one address is refused without touching the
// store; only the attempts that pass are counted in the server's rate
// limiter against the bound of all addresses together: in memory on one
// box, or the one boxes sharing a PostgreSQL store share, so that the
// global bound, on which client.md's arithmetic rests, holds however many
// boxes answer. (The per-address bound is thus per box: see
// docs/clustering.md.)
func (s *Server) pairThrottle(c echo.Context, now time.Time) error {
	if e := s.throttledAddr(c); e != nil {
		return e
	}
	refuse := func(limit int, retry time.Duration, what string) error {
		s.metrics.rateLimited.Inc()
		quietAccessLog(c)
		return &Error{Code: CodeRateLimited, RetryAfter: retry,
			Message: fmt.Sprintf("too many pairing attempts %s (%d a minute); retry in %d s", what, limit, retryAfterSeconds(retry))}
	}
	addrLimit := s.limits.PairAttemptsPerAddress
	if ok, retry, _ := s.pairAddrs.Allow(pairAddrKeyPrefix+addrBucket(ClientAddr(c)), addrLimit, now); !ok {
		return refuse(addrLimit, retry, "from this address")
	}
	total := s.limits.PairAttemptsTotal
	ok, retry, err := s.store.Allow(pairGlobalKey, total, now)
	if err != nil {
		return err
	}
	if !ok {
		return refuse(total, retry, "on this server (from all addresses)")
	}
	return nil
}
