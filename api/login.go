package api

// Administrator login without the admin key: one-time codes sent through the
// configured channel, TOTP codes from an authenticator app, and logout. The limits
// here are what client.md's bound on an attacker's chance rests on.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/pquerna/otp"
	"github.com/pquerna/otp/totp"

	"github.com/replyd/replyd/internal/secret"
	"github.com/replyd/replyd/internal/tokenbucket"
	"github.com/replyd/replyd/internal/window"
	"github.com/replyd/replyd/store"
)

// ChannelTOTP is the OTP channel name of authenticator-app login
// (REPLYD_OTP_CHANNEL=totp): nothing is sent; verify takes the app's code.
const ChannelTOTP = "totp"

// The fixed parts of the login limits (the configurable ones are in Limits).
const (
	// otpDigits is the length of a sent code: 10^8 codes, so that the
	// guesses the limits below allow in a year have under 0.1% chance.
	otpDigits = 8
	// totpDigits, totpPeriod and totpSkew are RFC 6238's usual settings
	// (SHA-1), what every authenticator app shows.
	totpDigits = 6
	totpPeriod = 30 * time.Second
	totpSkew   = 1
	// otpAddrFailWindow is the window of the per-address limit on wrong
	// codes (Limits.OTPMaxAttempts).
	otpAddrFailWindow = 15 * time.Minute
	// otpGlobalFailures wrong codes start a pause: of their address (and
	// its IPv6 /64) for any code, and, when they came from at least
	// otpGlobalSources addresses, of authenticator codes from everyone.
	// The first lasts otpLockBase, each next one twice as long up to
	// otpLockMax; the level behind the doubling drops by one for every
	// otpLockDecay without a wrong code (otpAddrRule, otpGlobalRule; the
	// store keeps the state, so every box shares it).
	otpGlobalFailures = 3
	otpGlobalSources  = 2
	otpLockBase       = time.Minute
	otpLockMax        = 24 * time.Hour
	otpLockDecay      = 24 * time.Hour
	// otpCodeFailures wrong codes from the address a sent code is bound
	// to void that code (a new one must be asked for): a sent code can be
	// guessed at most this many times.
	otpCodeFailures = 3
	// otpSendBurst codes may be sent at once to one address (IPv6: /64),
	// its allowance refilling by one every otpSendRefill; all addresses
	// together otpSendGlobalBurst at once, refilling by one every
	// otpSendGlobalRefill: twice as fast as one address may ask, so that
	// one address cannot use up what the others may ask for.
	otpSendBurst        = 3
	otpSendRefill       = 10 * time.Minute
	otpSendGlobalBurst  = 6
	otpSendGlobalRefill = 5 * time.Minute
)

// Guard scopes in the store: "" is the global guard of authenticator codes,
// otpAddrScope one address's (or /64's) back-off, otpCodeScope the wrong
// guesses at the sent code of one exact address.
const (
	otpGlobalScope = ""
	otpAddrPrefix  = "addr:"
	otpCodePrefix  = "code:"
)

func otpAddrScope(addr string) string { return otpAddrPrefix + addrBucket(addr) }
func otpCodeScope(addr string) string { return otpCodePrefix + addr }

// otpBound is the arithmetic client.md states: the most wrong codes the
// limits allow in a year, whatever the attacker does, and the chance that
// they find a sent code or an authenticator code.
//
// One address (IPv6: one /64) alone: every otpGlobalFailures of its wrong
// codes start a pause of that address, during which nothing from it is
// checked. A pause at a level whose length is under otpLockMax raises the
// level by one, and only a quiet otpLockDecay lowers it by one, so each
// such level sees at most one pause more than the decays: at most levels +
// days pauses in a year; a pause at otpLockMax lasts a day: at most days +
// 1. Each pause follows otpGlobalFailures wrong codes, and fewer than that
// follow the last one: AddrGuesses.
//
// Authenticator codes from many addresses: the global guard counts every
// wrong authenticator code and, once they came from otpGlobalSources
// addresses, pauses them all, charged one pause length (at the next level)
// for every otpGlobalFailures of them: the same count of pauses, so at most
// otpGlobalFailures × Locks charged wrong codes, plus those of the one
// address whose wrong codes since the last pause were never charged
// (bounded by that address's own AddrGuesses). An authenticator accepts
// 2·totpSkew+1 codes at a time (of 10^totpDigits).
//
// Sent codes: a code is valid only from the address that asked for it and
// is voided after otpCodeFailures wrong codes from that address, so each
// code sent can be guessed otpCodeFailures times; the codes one appliance
// can send in a year are bounded by the global send allowance (1 in
// 10^otpDigits each guess).
type otpBound struct {
	Levels, Locks            int
	AddrGuesses, TOTPGuesses int
	SentCodes, SentGuesses   int
	SentPercent, TOTPPercent float64
}

// otpAddrRule is an address's back-off; otpGlobalRule the global one of
// authenticator codes, which only wrong codes from several addresses trip.
var (
	otpAddrRule   = store.OTPLockRule{Every: otpGlobalFailures, Base: otpLockBase, Max: otpLockMax, Decay: otpLockDecay}
	otpGlobalRule = store.OTPLockRule{Every: otpGlobalFailures, Base: otpLockBase, Max: otpLockMax, Decay: otpLockDecay, Sources: otpGlobalSources}
	// otpCodeRule only counts: its "pause" voids the address's code.
	otpCodeRule = store.OTPLockRule{Every: otpCodeFailures, Base: time.Nanosecond, Max: time.Nanosecond, Decay: otpLockDecay}
)

func otpAttackBound() otpBound {
	const days = 366
	var b otpBound
	for otpAddrRule.Length(b.Levels) < otpLockMax {
		b.Levels++
	}
	b.Locks = b.Levels + 2*days + 1
	b.AddrGuesses = otpGlobalFailures * (b.Locks + 1)
	b.TOTPGuesses = otpGlobalFailures*b.Locks + b.AddrGuesses
	b.SentCodes = otpSendGlobalBurst + int(days*24*time.Hour/otpSendGlobalRefill)
	b.SentGuesses = otpCodeFailures * b.SentCodes
	b.SentPercent = 100 * float64(b.SentGuesses) / math.Pow10(otpDigits)
	b.TOTPPercent = 100 * float64(b.TOTPGuesses) * float64(2*totpSkew+1) / math.Pow10(totpDigits)
	return b
}

// otpGuard holds this box's login limits in memory: the wrong codes per
// address and the send allowances, token buckets (internal/tokenbucket) per
// address and for all addresses together. (The pause that wrong codes from
// all addresses start is the store's, shared by every box: see
// otpGlobalRule and store.OTPLockRule.) It is safe for concurrent use.
type otpGuard struct {
	mu sync.Mutex

	maxAddrFails int
	addrFails    window.Counter[struct{}] // addrBucket -> wrong codes, windows of otpAddrFailWindow

	global tokenbucket.Bucket
	addrs  map[string]tokenbucket.Bucket // addrBucket -> its send allowance
}

// The send allowances' rates: one code every otpSendRefill per address,
// one every otpSendGlobalRefill for all addresses together.
var (
	otpSendRate       = tokenbucket.Every(otpSendRefill)
	otpSendGlobalRate = tokenbucket.Every(otpSendGlobalRefill)
)

func newOTPGuard(l Limits) *otpGuard {
	return &otpGuard{
		maxAddrFails: l.OTPMaxAttempts,
		addrFails:    window.Counter[struct{}]{Length: otpAddrFailWindow},
		addrs:        map[string]tokenbucket.Bucket{},
	}
}

// admitAddr returns the 429 for a verify from an address that used up its
// wrong codes, or nil.
func (g *otpGuard) admitAddr(addr string, now time.Time) *Error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if w := g.addrFails.Current(addrBucket(addr), now); w != nil && w.N >= g.maxAddrFails {
		wait := g.addrFails.Left(w, now)
		return &Error{Code: CodeRateLimited, RetryAfter: wait, Message: fmt.Sprintf(
			"%d wrong codes from this address: retry in %d s", g.maxAddrFails, retryAfterSeconds(wait))}
	}
	return nil
}

// failAddr counts a wrong code from addr.
func (g *otpGuard) failAddr(addr string, now time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.addrFails.Prune(now)
	g.addrFails.Add(addrBucket(addr), now)
}

// takeSendToken admits a send to addr against its address's allowance
// (otpSendBurst at once, refilled one per otpSendRefill) and that of all
// addresses together (otpSendGlobalBurst, one per otpSendGlobalRefill).
// (The per-address interval is the store's: SaveOTP, shared by every box.)
func (g *otpGuard) takeSendToken(addr string, now time.Time) *Error {
	g.mu.Lock()
	defer g.mu.Unlock()
	k := addrBucket(addr)
	if _, known := g.addrs[k]; !known && len(g.addrs) >= maxTrackedAddrs {
		full := tokenbucket.Full(otpSendBurst, otpSendRate)
		for k, old := range g.addrs {
			if now.Sub(old.At) >= full {
				delete(g.addrs, k)
			}
		}
	}
	a, ok, wait := g.addrs[k].Take(now, otpSendBurst, otpSendRate) // a new address's allowance starts full
	if !ok {
		g.addrs[k] = a
		return &Error{Code: CodeRateLimited, RetryAfter: wait, Message: fmt.Sprintf(
			"too many codes were asked for from this address; retry in %d s", retryAfterSeconds(wait))}
	}
	global, ok, wait := g.global.Take(now, otpSendGlobalBurst, otpSendGlobalRate)
	g.global = global
	if !ok {
		// The address's allowance is left as it was: its token is not spent.
		return &Error{Code: CodeRateLimited, RetryAfter: wait, Message: fmt.Sprintf(
			"too many codes were asked for from all addresses; retry in %d s", retryAfterSeconds(wait))}
	}
	g.addrs[k] = a
	return nil
}

// giveSendToken returns the tokens takeSendToken took for a send that did
// not happen (the address's interval refused it).
func (g *otpGuard) giveSendToken(addr string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.global = g.global.Give(otpSendGlobalBurst)
	if a, ok := g.addrs[addrBucket(addr)]; ok {
		g.addrs[addrBucket(addr)] = a.Give(otpSendBurst)
	}
}

// otpSendResponse is the body of POST /v1/admin/otp/send; it never holds the
// code. With the totp channel nothing is sent: sent is false and expires_at
// absent.
type otpSendResponse struct {
	Sent      bool       `json:"sent"`
	Channel   string     `json:"channel"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

// handleOTPSend makes an 8-digit code with crypto/rand, stores its hash for
// the client address that asked (replacing only that address's earlier
// code) with an OTPTTL lifetime, and delivers it through the Notifier.
// Sends are throttled per address (OTPResendInterval, in the store, so on
// every box; an allowance per address and one of all addresses, 429). A failed delivery is
// 502, counted in replyd_otp_delivery_failures_total, and does not hold the
// address's next try back.
func (s *Server) handleOTPSend(c echo.Context) error {
	if s.totpOnly {
		return c.JSON(http.StatusOK, otpSendResponse{Sent: false, Channel: ChannelTOTP})
	}
	if s.notifier == nil {
		return errorf(CodeOTPDeliveryFailed, "no OTP channel is configured; use %s or configure a channel", HeaderAdminKey)
	}
	// One send at a time: at most one delivery is ever in flight.
	s.otpMu.Lock()
	defer s.otpMu.Unlock()
	addr, now := ClientAddr(c), s.now()
	if e := s.otp.takeSendToken(addr, now); e != nil {
		return e
	}
	code, err := secret.Digits(otpDigits)
	if err != nil {
		s.otp.giveSendToken(addr)
		return err
	}
	expires := now.Add(s.limits.OTPTTL)
	retry, err := s.store.SaveOTP(addr, secret.Hash(code), now, expires, s.limits.OTPResendInterval)
	if err != nil || retry > 0 {
		s.otp.giveSendToken(addr)
		if err != nil {
			return err
		}
		return &Error{Code: CodeRateLimited, RetryAfter: retry, Message: fmt.Sprintf(
			"this address asked for a code less than %s ago; retry in %d s", s.limits.OTPResendInterval, retryAfterSeconds(retry))}
	}
	channel := s.notifier.Channel()
	text := fmt.Sprintf("Your replyd admin code is %s. It expires in %s and works once, from the device that asked for it.", code, formatMinutes(s.limits.OTPTTL))
	if err := s.notifier.Send(c.Request().Context(), code, text, expires); err != nil {
		// Deleting the code also lifts the address's interval: the next
		// try is not held back. The global allowance stays spent, so a
		// broken channel cannot be hammered.
		s.metrics.otpDeliveryFailures.Inc()
		if derr := s.store.DeleteOTP(addr); derr != nil {
			s.reqLogger(c).Warn("deleting the undelivered code failed", "error", derr.Error())
		}
		s.adminLog(c, store.LevelError, "otp", "otp send failed via %s", channel)
		return &Error{Code: CodeOTPDeliveryFailed, Message: fmt.Sprintf("the code could not be delivered through the %s channel; check its configuration", channel), Err: err}
	}
	s.adminLog(c, store.LevelInfo, "otp", "otp sent via %s", channel)
	exp := expires.UTC()
	return c.JSON(http.StatusOK, otpSendResponse{Sent: true, Channel: channel, ExpiresAt: &exp})
}

// formatMinutes renders d as "N minutes" (or seconds below a minute).
func formatMinutes(d time.Duration) string {
	if d < time.Minute {
		return fmt.Sprintf("%d seconds", int(d/time.Second))
	}
	if d == time.Minute {
		return "1 minute"
	}
	return fmt.Sprintf("%d minutes", int(d/time.Minute))
}

type otpVerifyRequest struct {
	Code string `json:"code"`
}

type otpVerifyResponse struct {
	SessionToken string    `json:"session_token"`
	ExpiresAt    time.Time `json:"expires_at"`
}

// wrongCodeMessage is the one answer to every code that does not log in:
// it never says whether a code is outstanding, expired or used.
const wrongCodeMessage = "the code is wrong, has expired, was already used, or was not asked for from this device"

// handleOTPVerify checks a sent code (8 digits, valid only from the address
// that asked for it) or, once TOTP is enrolled, an authenticator app's code
// (6 digits), under the limits of checkLoginCode. Success creates a session
// of SessionTTL from 32 random bytes, stored only as its hash.
func (s *Server) handleOTPVerify(c echo.Context) error {
	var req otpVerifyRequest
	if err := s.readJSON(c, &req, false); err != nil {
		return err
	}
	code := strings.TrimSpace(req.Code)
	if code == "" {
		return badRequest("code is required")
	}
	if !isDigits(code) || (len(code) != otpDigits && len(code) != totpDigits) {
		return badRequest("code must be the %d digits of a sent code or the %d digits of an authenticator app", otpDigits, totpDigits)
	}
	if err := s.checkLoginCode(c, code); err != nil {
		return err
	}
	token, err := secret.Token("")
	if err != nil {
		return err
	}
	now := s.now()
	expires := now.Add(s.limits.SessionTTL)
	if err := s.store.CreateSession(secret.Hash(token), expires); err != nil {
		return err
	}
	via := "sent code"
	if len(code) == totpDigits {
		via = "authenticator code"
	}
	s.adminLog(c, store.LevelInfo, "session", "login ok (%s): session valid for %s", via, s.limits.SessionTTL)
	return c.JSON(http.StatusOK, otpVerifyResponse{SessionToken: token, ExpiresAt: expires.UTC()})
}

// checkLoginCode checks code (otpDigits: the sent code of the request's
// address, spent when it matches; totpDigits: the authenticator's) and
// returns nil when it logs in, else the error to answer. A wrong code is
// 401 with one message whatever the reason; it counts against its address
// (OTPMaxAttempts per 15 minutes, in memory; and the address's back-off in
// the store, otpAddrRule, shared by every box), a wrong sent code also
// against the code of its address (voided after otpCodeFailures), and a
// wrong authenticator code towards the global back-off, which only wrong
// codes from several addresses trip and which then pauses authenticator
// codes alone: so no address can pause another's sent code, and none
// alone the authenticator login. The admin key is never limited here.
func (s *Server) checkLoginCode(c echo.Context, code string) error {
	addr, now := ClientAddr(c), s.now()
	if e := s.otp.admitAddr(addr, now); e != nil {
		quietAccessLog(c)
		return e
	}
	if err := s.otpPaused(c, otpAddrScope(addr), now,
		"too many wrong codes from this address: login by code from it is paused for %d s (other addresses, and the admin key, still work)"); err != nil {
		return err
	}
	isTOTP := len(code) == totpDigits
	if isTOTP {
		if err := s.otpPaused(c, otpGlobalScope, now,
			"too many wrong authenticator codes from several addresses: authenticator login is paused for %d s (sent codes and the admin key still work)"); err != nil {
			return err
		}
	}
	var ok bool
	var err error
	if isTOTP {
		ok, err = s.checkTOTP(code, now)
	} else {
		ok, err = s.store.UseOTP(addr, secret.Hash(code), now)
	}
	if err != nil || ok {
		return err
	}
	s.countFailure(addr, failLoginCode)
	s.otp.failAddr(addr, now)
	bucket := addrBucket(addr)
	paused, err := s.store.OTPFailed(otpAddrScope(addr), bucket, now, otpAddrRule)
	if err != nil {
		return err
	}
	if !paused.IsZero() {
		s.metrics.otpLocks.Inc()
		s.adminLog(c, store.LevelWarn, "otp", "login by code from %s paused until %s after %d wrong codes", bucket, paused.UTC().Format(time.RFC3339), otpGlobalFailures)
	}
	if isTOTP {
		until, err := s.store.OTPFailed(otpGlobalScope, bucket, now, otpGlobalRule)
		if err != nil {
			return err
		}
		if !until.IsZero() {
			s.otpLocked(c, until)
		}
	} else {
		voided, err := s.store.OTPFailed(otpCodeScope(addr), addr, now, otpCodeRule)
		if err != nil {
			return err
		}
		if !voided.IsZero() {
			if err := s.store.DeleteOTP(addr); err != nil {
				return err
			}
		}
	}
	return errorf(CodeUnauthorized, "%s", wrongCodeMessage)
}

// otpPaused returns the store's error, or a rate-limited error whose
// message is format with the seconds to wait, while scope's code logins are
// paused at now; nil when they are not.
func (s *Server) otpPaused(c echo.Context, scope string, now time.Time, format string) error {
	until, err := s.store.OTPLock(scope, now)
	if err != nil || until.IsZero() {
		return err
	}
	quietAccessLog(c)
	wait := until.Sub(now)
	return &Error{Code: CodeRateLimited, RetryAfter: wait, Message: fmt.Sprintf(format, retryAfterSeconds(wait))}
}

// otpLocked logs the start of a pause of the authenticator login and tells
// the administrator through the channel (in the background: the answer to
// the wrong guess does not wait for it).
func (s *Server) otpLocked(c echo.Context, until time.Time) {
	msg := fmt.Sprintf("replyd: wrong authenticator codes from several addresses; login with the authenticator app is paused until %s. Sent codes and the admin key still work.",
		until.UTC().Format("2006-01-02 15:04 UTC"))
	s.metrics.otpLocks.Inc()
	s.adminLog(c, store.LevelWarn, "otp", "authenticator login paused until %s after wrong codes from several addresses", until.UTC().Format(time.RFC3339))
	s.reqLogger(c).Warn("authenticator login paused after wrong codes", "until", until.UTC().Format(time.RFC3339))
	s.tellAdmin(msg, until)
}

// tellAdmin sends msg (no code) through the OTP channel in the background,
// when one is configured.
func (s *Server) tellAdmin(msg string, until time.Time) {
	if s.notifier == nil {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := s.notifier.Send(ctx, "", msg, until); err != nil {
			s.metrics.otpDeliveryFailures.Inc()
			s.log.Warn("telling the administrator through the OTP channel failed", "error", err.Error())
		}
	}()
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return len(s) > 0
}

// totpOpts are the RFC 6238 settings replyd uses.
var totpOpts = totp.ValidateOpts{Period: uint(totpPeriod / time.Second), Skew: 0, Digits: otp.DigitsSix, Algorithm: otp.AlgorithmSHA1}

// checkTOTP reports whether code is the authenticator code of the time step
// of now or one step either side, and spends that step (store.UseTOTPStep)
// so that it works once. It is false when TOTP is not enrolled.
func (s *Server) checkTOTP(code string, now time.Time) (bool, error) {
	key, ok, err := s.store.Secret(store.SecretTOTP)
	if err != nil || !ok {
		return false, err
	}
	step := now.Unix() / int64(totpPeriod/time.Second)
	for d := -totpSkew; d <= totpSkew; d++ {
		at := time.Unix((step+int64(d))*int64(totpPeriod/time.Second), 0)
		want, err := totp.GenerateCodeCustom(string(key), at, totpOpts)
		if err != nil {
			return false, fmt.Errorf("computing the TOTP code: %w", err)
		}
		if secret.Equal(want, code) {
			return s.store.UseTOTPStep(step + int64(d))
		}
	}
	return false, nil
}

// totpEnrollResponse is the answer of POST /v1/admin/totp/enroll: the only
// time the secret is shown.
type totpEnrollResponse struct {
	Secret     string `json:"secret"`
	OTPAuthURL string `json:"otpauth_url"`
	QRSVG      string `json:"qr_svg"`
}

// totpEnrollRequest is the optional body of POST /v1/admin/totp/enroll.
type totpEnrollRequest struct {
	// Code is a code sent through the OTP channel to this address: what
	// an admin session must add to enroll or replace the authenticator.
	Code string `json:"code"`
}

// handleTOTPEnroll serves POST /v1/admin/totp/enroll: a new 160-bit TOTP
// secret, stored as an installation secret (replacing any earlier one, whose
// authenticator entry then stops working) and shown once, with the
// otpauth:// URL an authenticator app scans and that URL's QR code (an
// inline SVG, as pairing's). A session alone is not enough (a stolen
// session must not become a lasting login, nor replace the admin's real
// authenticator): the request needs X-ADMIN-KEY, or a code sent through
// the OTP channel to this address (POST /v1/admin/otp/send) in its code
// field, checked and spent as a login code is. The OTP channel is told of
// every enrolment.
func (s *Server) handleTOTPEnroll(c echo.Context) error {
	var req totpEnrollRequest
	if err := s.readJSON(c, &req, true); err != nil {
		return err
	}
	code := strings.TrimSpace(req.Code)
	via := "admin key"
	if !viaAdminKey(c) {
		switch {
		case code == "" && (s.totpOnly || s.notifier == nil):
			return errorf(CodeForbidden, "enrolling or replacing the authenticator app needs the admin key (%s): no OTP channel is configured to send a code", HeaderAdminKey)
		case code == "":
			return errorf(CodeForbidden, "enrolling or replacing the authenticator app needs the admin key, or a code sent through the OTP channel: call POST /v1/admin/otp/send and repeat this request with {\"code\": the %d digits}", otpDigits)
		case !isDigits(code) || len(code) != otpDigits:
			return badRequest("code must be the %d digits of a code sent through the OTP channel", otpDigits)
		}
		if err := s.checkLoginCode(c, code); err != nil {
			var ae *Error
			if errors.As(err, &ae) && ae.Code == CodeUnauthorized {
				// 401 would read as an expired session to the admin page.
				return errorf(CodeForbidden, "%s", wrongCodeMessage)
			}
			return err
		}
		via = "session and a sent code"
	}
	_, replaced, err := s.store.Secret(store.SecretTOTP)
	if err != nil {
		return err
	}
	key, err := totp.Generate(totp.GenerateOpts{
		Issuer:      "replyd",
		AccountName: "admin",
		Period:      uint(totpPeriod / time.Second),
		SecretSize:  20,
		Digits:      otp.DigitsSix,
		Algorithm:   otp.AlgorithmSHA1,
	})
	if err != nil {
		return fmt.Errorf("generating the TOTP secret: %w", err)
	}
	svg, err := qrSVG(key.URL(), "QR code of the authenticator app's secret")
	if err != nil {
		return err
	}
	if err := s.store.SetSecret(store.SecretTOTP, []byte(key.Secret())); err != nil {
		return err
	}
	what := "enrolled"
	if replaced {
		what = "replaced (the earlier one no longer works)"
	}
	s.adminLog(c, store.LevelWarn, "totp", "authenticator app %s, authorised by the %s", what, via)
	s.tellAdmin(fmt.Sprintf("replyd: an authenticator app was %s for the admin login (authorised by the %s). If this was not you, enroll again with the admin key and change the admin key.", what, via), s.now())
	c.Response().Header().Set("Cache-Control", "no-store")
	return c.JSON(http.StatusOK, totpEnrollResponse{Secret: key.Secret(), OTPAuthURL: key.URL(), QRSVG: svg})
}

// handleLogout serves DELETE /v1/admin/session: it ends the session named by
// X-ADMIN-SESSION. It is idempotent within the session's own authentication:
// once deleted, the token is refused with 401 like any invalid one.
func (s *Server) handleLogout(c echo.Context) error {
	token := c.Request().Header.Get(HeaderAdminSession)
	if token == "" {
		return badRequest("%s is required to log out (an admin key has no session)", HeaderAdminSession)
	}
	if err := s.store.DeleteSession(secret.Hash(token)); err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	s.adminLog(c, store.LevelInfo, "session", "logout")
	return c.JSON(http.StatusOK, map[string]bool{"logged_out": true})
}
