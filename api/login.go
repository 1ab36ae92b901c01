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
	// otpGlobalFailures wrong codes, from any addresses on any box, start
	// a lock of the code login: the first lasts otpLockBase, each next one
	// twice as long up to otpLockMax. The level behind the doubling drops
	// by one for every otpLockDecay without a wrong code (otpRule; the
	// store keeps the state, so every box shares it).
	otpGlobalFailures = 3
	otpLockBase       = time.Minute
	otpLockMax        = 24 * time.Hour
	otpLockDecay      = 24 * time.Hour
	// otpSendBurst codes may be sent at once, from all addresses
	// together; the allowance refills by one every otpSendRefill.
	otpSendBurst  = 3
	otpSendRefill = 10 * time.Minute
)

// otpBound is the arithmetic client.md states: the most wrong codes the
// limits allow in a year, whatever the attacker does, and the chance that
// they find a sent code or an authenticator code.
//
// Every otpGlobalFailures wrong codes start a lock, during which nothing is
// checked. A lock at a level whose length is under otpLockMax raises the
// level by one, and only a quiet otpLockDecay lowers it by one, so each such
// level sees at most one lock more than the decays: at most levels + days
// locks in a year. A lock at otpLockMax lasts a day: at most days + 1. Each
// lock follows otpGlobalFailures wrong codes, and fewer than that follow the
// last one. Each wrong code is one guess at one code: a sent code is valid
// only from the address that asked for it (1 in 10^otpDigits); an
// authenticator accepts 2·totpSkew+1 codes at a time (of 10^totpDigits).
type otpBound struct {
	Levels, Locks, Guesses   int
	SentPercent, TOTPPercent float64
}

// otpRule is the lock as the store applies it.
var otpRule = store.OTPLockRule{Every: otpGlobalFailures, Base: otpLockBase, Max: otpLockMax, Decay: otpLockDecay}

func otpAttackBound() otpBound {
	const days = 366
	var b otpBound
	for otpRule.Length(b.Levels) < otpLockMax {
		b.Levels++
	}
	b.Locks = b.Levels + 2*days + 1
	b.Guesses = otpGlobalFailures * (b.Locks + 1)
	b.SentPercent = 100 * float64(b.Guesses) / math.Pow10(otpDigits)
	b.TOTPPercent = 100 * float64(b.Guesses) * float64(2*totpSkew+1) / math.Pow10(totpDigits)
	return b
}

// otpGuard holds this box's login limits in memory: the wrong codes per
// address and the send allowance. (The lock that wrong codes from all
// addresses start is the store's: see otpRule.) It is safe for concurrent
// use.
type otpGuard struct {
	mu sync.Mutex

	maxAddrFails int
	addrFails    map[string]*addrFails // addrBucket -> wrong codes in the window

	tokens   float64 // global send allowance
	tokensAt time.Time
}

type addrFails struct {
	start time.Time
	count int
}

func newOTPGuard(l Limits) *otpGuard {
	return &otpGuard{
		maxAddrFails: l.OTPMaxAttempts,
		addrFails:    map[string]*addrFails{},
		tokens:       otpSendBurst,
	}
}

// admitAddr returns the 429 for a verify from an address that used up its
// wrong codes, or nil.
func (g *otpGuard) admitAddr(addr string, now time.Time) *Error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if f := g.addrFails[addrBucket(addr)]; f != nil && now.Sub(f.start) < otpAddrFailWindow && f.count >= g.maxAddrFails {
		wait := f.start.Add(otpAddrFailWindow).Sub(now)
		return &Error{Code: CodeRateLimited, RetryAfter: wait, Message: fmt.Sprintf(
			"%d wrong codes from this address: retry in %d s", g.maxAddrFails, retryAfterSeconds(wait))}
	}
	return nil
}

// failAddr counts a wrong code from addr.
func (g *otpGuard) failAddr(addr string, now time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	k := addrBucket(addr)
	f := g.addrFails[k]
	if f == nil || now.Sub(f.start) >= otpAddrFailWindow || now.Before(f.start) {
		g.sweepAddrFails(now)
		f = &addrFails{start: now}
		g.addrFails[k] = f
	}
	f.count++
}

// sweepAddrFails forgets closed windows once the map grows; g.mu is held.
func (g *otpGuard) sweepAddrFails(now time.Time) {
	if len(g.addrFails) < maxTrackedAddrs {
		return
	}
	for k, f := range g.addrFails {
		if now.Sub(f.start) >= otpAddrFailWindow {
			delete(g.addrFails, k)
		}
	}
}

// takeSendToken admits a send against the allowance of all addresses
// together: otpSendBurst at once, refilled one per otpSendRefill. (The
// per-address interval is the store's: SaveOTP, shared by every box.)
func (g *otpGuard) takeSendToken(now time.Time) *Error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.tokensAt.IsZero() && now.After(g.tokensAt) {
		g.tokens = min(otpSendBurst, g.tokens+float64(now.Sub(g.tokensAt))/float64(otpSendRefill))
	}
	g.tokensAt = now
	if g.tokens < 1 {
		wait := time.Duration((1 - g.tokens) * float64(otpSendRefill))
		return &Error{Code: CodeRateLimited, RetryAfter: wait, Message: fmt.Sprintf(
			"too many codes were asked for from all addresses; retry in %d s", retryAfterSeconds(wait))}
	}
	g.tokens--
	return nil
}

// giveSendToken returns a token takeSendToken took for a send that did not
// happen (the address's interval refused it).
func (g *otpGuard) giveSendToken() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.tokens = min(otpSendBurst, g.tokens+1)
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
// every box) and globally (429). A failed delivery is
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
	if e := s.otp.takeSendToken(now); e != nil {
		return e
	}
	code, err := secret.Digits(otpDigits)
	if err != nil {
		s.otp.giveSendToken()
		return err
	}
	expires := now.Add(s.limits.OTPTTL)
	retry, err := s.store.SaveOTP(addr, secret.Hash(code), now, expires, s.limits.OTPResendInterval)
	if err != nil || retry > 0 {
		s.otp.giveSendToken()
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
// (6 digits). A wrong code is 401; it counts against the address
// (OTPMaxAttempts per 15 minutes, in memory) and towards the lock every box
// shares (one small store write: at most otpGlobalFailures before each
// lock, while nothing is checked during one), which notifies the admin
// channel when it starts. Neither limit ever spends or replaces a code. Success creates a session of SessionTTL from 32
// random bytes, stored only as its hash.
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
	addr, now := ClientAddr(c), s.now()
	if e := s.otp.admitAddr(addr, now); e != nil {
		quietAccessLog(c)
		return e
	}
	until, err := s.store.OTPLock(now)
	if err != nil {
		return err
	}
	if !until.IsZero() {
		quietAccessLog(c)
		wait := until.Sub(now)
		return &Error{Code: CodeRateLimited, RetryAfter: wait, Message: fmt.Sprintf(
			"too many wrong codes from all addresses: login by code is paused for %d s (the admin key still works)", retryAfterSeconds(wait))}
	}
	var ok bool
	if len(code) == otpDigits {
		ok, err = s.store.UseOTP(addr, secret.Hash(code), now)
	} else {
		ok, err = s.checkTOTP(code, now)
	}
	if err != nil {
		return err
	}
	if !ok {
		s.countFailure(addr, failLoginCode)
		s.otp.failAddr(addr, now)
		until, err := s.store.OTPFailed(now, otpRule)
		if err != nil {
			return err
		}
		if !until.IsZero() {
			s.otpLocked(c, until)
		}
		return errorf(CodeUnauthorized, "%s", wrongCodeMessage)
	}
	token, err := secret.Token("")
	if err != nil {
		return err
	}
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

// otpLocked logs the start of a lock of the code login and tells the
// administrator through the channel (in the background: the answer to the
// wrong guess does not wait for it).
func (s *Server) otpLocked(c echo.Context, until time.Time) {
	msg := fmt.Sprintf("replyd: %d wrong admin login codes in a row; login by code is paused until %s. The admin key still works.",
		otpGlobalFailures, until.UTC().Format("2006-01-02 15:04 UTC"))
	s.metrics.otpLocks.Inc()
	s.adminLog(c, store.LevelWarn, "otp", "login by code paused until %s after %d wrong codes", until.UTC().Format(time.RFC3339), otpGlobalFailures)
	s.reqLogger(c).Warn("login by code paused after wrong codes", "until", until.UTC().Format(time.RFC3339))
	if s.notifier == nil {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := s.notifier.Send(ctx, "", msg, until); err != nil {
			s.metrics.otpDeliveryFailures.Inc()
			s.log.Warn("telling the administrator about the paused login failed", "error", err.Error())
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

// handleTOTPEnroll serves POST /v1/admin/totp/enroll: a new 160-bit TOTP
// secret, stored as an installation secret (replacing any earlier one, whose
// authenticator entry then stops working) and shown once, with the
// otpauth:// URL an authenticator app scans and that URL's QR code (an
// inline SVG, as pairing's).
func (s *Server) handleTOTPEnroll(c echo.Context) error {
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
	s.adminLog(c, store.LevelInfo, "totp", "authenticator app enrolled (any earlier enrolment no longer works)")
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
