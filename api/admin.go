package api

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/replyd/replyd/store"
)

// adminLog appends one admin-stream log entry. resourceID names what the
// action touched (a key hash, a prompt version, "otp", "session"). A HEAD
// request is logged as nothing: net/http sends none of the body, so no
// export or download took place.
func (s *Server) adminLog(c echo.Context, level, resourceID, format string, args ...any) {
	if c.Request().Method == http.MethodHead {
		return
	}
	e := store.LogEntry{
		Timestamp:    s.now(),
		Level:        level,
		Message:      fmt.Sprintf(format, args...),
		ResourceType: store.ResourceAdmin,
		ResourceID:   resourceID,
		StreamName:   store.StreamAdmin,
		Node:         s.node,
	}
	if err := s.store.AppendLog(e); err != nil {
		s.reqLogger(c).Error("appending the admin log entry failed", "error", err.Error())
	}
}

// readJSON decodes the request's JSON body into dst. An empty body leaves
// dst unchanged when allowEmpty. Unknown fields are ignored. The body is
// bounded by MaxJSONBodyBytes.
func (s *Server) readJSON(c echo.Context, dst any, allowEmpty bool) error {
	data, err := io.ReadAll(io.LimitReader(c.Request().Body, s.limits.MaxJSONBodyBytes+1))
	if err != nil {
		return &Error{Code: CodeInvalidRequest, Message: "the request body could not be read", Err: err}
	}
	if int64(len(data)) > s.limits.MaxJSONBodyBytes {
		return errorf(CodePayloadTooLarge, "the request body exceeds the limit of %s", formatBytes(s.limits.MaxJSONBodyBytes))
	}
	if len(strings.TrimSpace(string(data))) == 0 {
		if allowEmpty {
			return nil
		}
		return badRequest("a JSON request body is required")
	}
	if err := json.Unmarshal(data, dst); err != nil {
		return jsonError("the request body", err)
	}
	return nil
}

// otpSendResponse is the body of a successful OTP send; it never holds the code.
type otpSendResponse struct {
	Sent      bool      `json:"sent"`
	Channel   string    `json:"channel"`
	ExpiresAt time.Time `json:"expires_at"`
}

// handleOTPSend makes a 6-digit code with crypto/rand, stores its hash with
// an OTPTTL lifetime (replacing any earlier code) and delivers it through
// the Notifier. Sends closer than OTPResendInterval give 429.
func (s *Server) handleOTPSend(c echo.Context) error {
	// One send at a time, so that two concurrent sends cannot both pass the
	// throttle.
	s.otpMu.Lock()
	defer s.otpMu.Unlock()
	now := s.now()
	last, err := s.store.LastOTPIssued()
	if err != nil {
		return err
	}
	if !last.IsZero() {
		if wait := last.Add(s.limits.OTPResendInterval).Sub(now); wait > 0 {
			return &Error{
				Code:       CodeRateLimited,
				Message:    fmt.Sprintf("a code was sent less than %s ago; retry in %d s", s.limits.OTPResendInterval, retryAfterSeconds(wait)),
				RetryAfter: wait,
			}
		}
	}
	if s.notifier == nil {
		return errorf(CodeOTPDeliveryFailed, "no OTP channel is configured; use %s or configure a channel", HeaderAdminKey)
	}
	n, err := rand.Int(rand.Reader, big.NewInt(1_000_000))
	if err != nil {
		return err
	}
	code := fmt.Sprintf("%06d", n.Int64())
	expires := now.Add(s.limits.OTPTTL)
	if err := s.store.SaveOTP(hashHex(code), now, expires); err != nil {
		return err
	}
	channel := s.notifier.Channel()
	text := fmt.Sprintf("Your replyd admin code is %s. It expires in %d minutes and works once.", code, int(s.limits.OTPTTL/time.Minute))
	if err := s.notifier.Send(c.Request().Context(), code, text, expires); err != nil {
		s.adminLog(c, store.LevelError, "otp", "otp send failed via %s", channel)
		return &Error{Code: CodeOTPDeliveryFailed, Message: fmt.Sprintf("the code could not be delivered through the %s channel; check its configuration", channel), Err: err}
	}
	s.adminLog(c, store.LevelInfo, "otp", "otp sent via %s", channel)
	return c.JSON(http.StatusOK, otpSendResponse{Sent: true, Channel: channel, ExpiresAt: expires.UTC()})
}

type otpVerifyRequest struct {
	Code string `json:"code"`
}

type otpVerifyResponse struct {
	SessionToken string    `json:"session_token"`
	ExpiresAt    time.Time `json:"expires_at"`
}

// handleOTPVerify checks the code. A wrong code is 401 and counts as an
// attempt; OTPMaxAttempts wrong attempts burn the code. Success creates a
// session of SessionTTL from 32 random bytes, stored only as its hash.
func (s *Server) handleOTPVerify(c echo.Context) error {
	var req otpVerifyRequest
	if err := s.readJSON(c, &req, false); err != nil {
		return err
	}
	code := strings.TrimSpace(req.Code)
	if code == "" {
		return badRequest("code is required")
	}
	if len(code) > 64 {
		return badRequest("code is too long; it has 6 digits")
	}
	now := s.now()
	res, err := s.store.VerifyOTP(hashHex(code), now, s.limits.OTPMaxAttempts)
	if err != nil {
		return err
	}
	var msg string
	switch res {
	case store.OTPOK:
	case store.OTPWrong:
		msg = "code is wrong"
	case store.OTPBurned:
		msg = fmt.Sprintf("code is wrong; after %d wrong codes it is no longer valid: request a new one", s.limits.OTPMaxAttempts)
	case store.OTPExpired:
		msg = "code has expired: request a new one"
	case store.OTPNone:
		msg = "code is not valid: no code is outstanding; request one with /v1/admin/otp/send"
	default:
		return fmt.Errorf("unknown OTP result %d", res)
	}
	if msg != "" {
		s.adminLog(c, store.LevelWarn, "otp", "login failed: %s", msg)
		return errorf(CodeUnauthorized, "%s", msg)
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return err
	}
	token := base64.RawURLEncoding.EncodeToString(b[:])
	expires := now.Add(s.limits.SessionTTL)
	if err := s.store.CreateSession(hashHex(token), expires); err != nil {
		return err
	}
	s.adminLog(c, store.LevelInfo, "session", "login ok: session valid for %s", s.limits.SessionTTL)
	return c.JSON(http.StatusOK, otpVerifyResponse{SessionToken: token, ExpiresAt: expires.UTC()})
}

// handleLogout serves DELETE /v1/admin/session: it ends the session named by
// X-ADMIN-SESSION. It is idempotent within the session's own authentication:
// once deleted, the token is refused with 401 like any invalid one.
func (s *Server) handleLogout(c echo.Context) error {
	token := c.Request().Header.Get(HeaderAdminSession)
	if token == "" {
		return badRequest("%s is required to log out (an admin key has no session)", HeaderAdminSession)
	}
	if err := s.store.DeleteSession(hashHex(token)); err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	s.adminLog(c, store.LevelInfo, "session", "logout")
	return c.JSON(http.StatusOK, map[string]bool{"logged_out": true})
}
