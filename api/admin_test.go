package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pquerna/otp/totp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/replyd/replyd/internal/secret"
	"github.com/replyd/replyd/store"
)

const (
	msgNoAdminCred  = "an admin credential is required: send X-ADMIN-SESSION or X-ADMIN-KEY"
	msgBadAdminCred = "the admin credential is invalid or expired"
)

func TestAdminAuth(t *testing.T) {
	e := newEnv(t)
	apiKey := e.addKey("client-key", 60)
	adminRoutes := []struct{ method, path string }{
		{"GET", "/v1/admin/keys"}, {"POST", "/v1/admin/keys"}, {"DELETE", "/v1/admin/keys/" + secret.Hash("x")},
		{"GET", "/v1/admin/system-prompt"}, {"POST", "/v1/admin/system-prompt"}, {"GET", "/v1/admin/system-prompt/history"},
		{"GET", "/v1/admin/logs"}, {"GET", "/v1/admin/stats"}, {"GET", "/v1/admin/status"}, {"GET", "/v1/admin/backup"},
		{"POST", "/v1/admin/try"}, {"DELETE", "/v1/admin/session"}, {"GET", "/metrics"},
	}
	// An unknown admin path is 404 with or without a credential (a route
	// group's catch-all used to answer it, and wrong methods, after auth).
	for _, req := range []*http.Request{httptest.NewRequest("GET", "/v1/admin/no-such-route", nil), adminReq("GET", "/v1/admin/no-such-route", "")} {
		wantJSON(t, e.do(req), 404, errJSON("not_found", "no such route"))
	}
	for i, r := range adminRoutes {
		t.Run(r.method+" "+r.path, func(t *testing.T) {
			cases := []struct {
				name   string
				header map[string]string
				msg    string
			}{
				{"none", nil, msgNoAdminCred},
				{"wrong admin key", map[string]string{HeaderAdminKey: "guess"}, msgBadAdminCred},
				{"api key as admin key", map[string]string{HeaderAdminKey: apiKey}, msgBadAdminCred},
				{"api key header", map[string]string{HeaderAPIKey: apiKey}, msgNoAdminCred},
				{"api key as session", map[string]string{HeaderAdminSession: apiKey}, msgBadAdminCred},
				{"admin key hash as key", map[string]string{HeaderAdminKey: secret.Hash(testAdminKey)}, msgBadAdminCred},
			}
			for _, c := range cases {
				req := httptest.NewRequest(r.method, r.path, nil)
				// An address per route, so that the failures stay under
				// the per-address throttle.
				req.RemoteAddr = fmt.Sprintf("198.51.100.%d:4000", i)
				for k, v := range c.header {
					req.Header.Set(k, v)
				}
				rec := e.do(req)
				if rec.Code != 401 || strings.TrimSpace(rec.Body.String()) != errJSON("unauthorized", c.msg) {
					t.Errorf("%s: %d %s", c.name, rec.Code, rec.Body)
				}
			}
		})
	}
	// The right admin key passes.
	rec := e.do(adminReq("GET", "/v1/admin/keys", ""))
	if rec.Code != 200 {
		t.Errorf("admin key refused: %d %s", rec.Code, rec.Body)
	}
	// With no admin key configured, no X-ADMIN-KEY value is accepted.
	if err := e.st.SetAdminKeyHash(""); err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest("GET", "/v1/admin/keys", nil)
	req.Header.Set(HeaderAdminKey, "")
	req.Header.Set(HeaderAdminKey, testAdminKey)
	wantJSON(t, e.do(req), 401, errJSON("unauthorized", msgBadAdminCred))
}

// otpSend asks for a code from the harness's default address (192.0.2.1)
// or from the address given.
func otpSend(e *env, from ...string) *httptest.ResponseRecorder {
	req := httptest.NewRequest("POST", "/v1/admin/otp/send", nil)
	if len(from) > 0 {
		req.RemoteAddr = from[0] + ":5000"
	}
	return e.do(req)
}

// otpVerify tries code from the default address or the one given.
func otpVerify(e *env, code string, from ...string) *httptest.ResponseRecorder {
	req := httptest.NewRequest("POST", "/v1/admin/otp/verify", strings.NewReader(`{"code":"`+code+`"}`))
	req.Header.Set("Content-Type", "application/json")
	if len(from) > 0 {
		req.RemoteAddr = from[0] + ":5000"
	}
	return e.do(req)
}

func sessionReq(method, target, token string) *http.Request {
	req := httptest.NewRequest(method, target, nil)
	req.Header.Set(HeaderAdminSession, token)
	return req
}

// msgWrongCode is the one answer to a code that does not log in.
var msgWrongCode = errJSON("unauthorized", wrongCodeMessage)

// otherCode returns an 8-digit code that is not code.
func otherCode(code string, delta int) string {
	return fmt.Sprintf("%08d", (atoi(code)+delta)%100000000)
}

func TestOTPFullFlow(t *testing.T) {
	e := newEnv(t)
	wantJSON(t, otpSend(e), 200, `{"sent":true,"channel":"console","expires_at":"2026-01-02T03:09:05Z"}`)
	code := e.notifier.lastCode()
	if !regexp.MustCompile(`^[0-9]{8}$`).MatchString(code) {
		t.Fatalf("code %q is not 8 digits", code)
	}
	if !strings.Contains(e.notifier.texts[0], code) {
		t.Errorf("message text does not carry the code")
	}
	if codes := e.st.snapshot(t).OTPCodes; len(codes) != 1 || codes[0].Scope != "192.0.2.1" || codes[0].Hash != secret.Hash(code) {
		t.Errorf("the store does not hold the code's hash under the client address: %+v", codes)
	}

	// One send per 30 s from an address.
	e.clock.Advance(10 * time.Second)
	rec := otpSend(e)
	wantJSON(t, rec, 429, errJSON("rate_limited", "this address asked for a code less than 30s ago; retry in 20 s"))
	if rec.Header().Get("Retry-After") != "20" {
		t.Errorf("Retry-After = %q", rec.Header().Get("Retry-After"))
	}

	wantJSON(t, otpVerify(e, otherCode(code, 1)), 401, msgWrongCode)

	rec = otpVerify(e, code)
	var v struct {
		SessionToken string `json:"session_token"`
		ExpiresAt    string `json:"expires_at"`
	}
	decode(t, rec, &v)
	wantJSON(t, rec, 200, `{"session_token":"`+v.SessionToken+`","expires_at":"2026-01-02T15:04:15Z"}`)
	if len(v.SessionToken) != 43 {
		t.Errorf("session token %q is not 32 bytes in base64url", v.SessionToken)
	}
	if ss := e.st.snapshot(t).Sessions; len(ss) != 1 || ss[0].TokenHash != secret.Hash(v.SessionToken) {
		t.Errorf("the store does not hold exactly the token's hash")
	}

	// The code is single use; the answer is the same as for a wrong one.
	wantJSON(t, otpVerify(e, code), 401, msgWrongCode)

	// The session works, then logout ends it.
	if rec := e.do(sessionReq("GET", "/v1/admin/keys", v.SessionToken)); rec.Code != 200 {
		t.Fatalf("session refused: %d %s", rec.Code, rec.Body)
	}
	wantJSON(t, e.do(sessionReq("DELETE", "/v1/admin/session", v.SessionToken)), 200, `{"logged_out":true}`)
	wantJSON(t, e.do(sessionReq("GET", "/v1/admin/keys", v.SessionToken)), 401, errJSON("unauthorized", msgBadAdminCred))

	// Logging out needs a session, not the admin key.
	wantJSON(t, e.do(adminReq("DELETE", "/v1/admin/session", "")), 400, errJSON("invalid_request", "X-ADMIN-SESSION is required to log out (an admin key has no session)"))

	// Login events are in the admin log, without the code; wrong codes
	// are not, one by one (they are counted, see TestFailedAuthIsAggregated).
	var msgs []string
	for _, l := range e.st.logsCopy() {
		if l.StreamName != store.StreamAdmin || l.ResourceType != store.ResourceAdmin {
			t.Errorf("admin entry %+v has the wrong stream or type", l)
		}
		if strings.Contains(l.Message, code) {
			t.Errorf("log leaks the code: %q", l.Message)
		}
		msgs = append(msgs, l.Level+" "+l.Message)
	}
	want := []string{
		"info otp sent via console",
		"info login ok (sent code): session valid for 12h0m0s",
		"info logout",
	}
	if strings.Join(msgs, "\n") != strings.Join(want, "\n") {
		t.Errorf("admin log:\n%s\nwant\n%s", strings.Join(msgs, "\n"), strings.Join(want, "\n"))
	}
}

func atoi(s string) int {
	n := 0
	for _, c := range s {
		n = n*10 + int(c-'0')
	}
	return n
}

// TestOTPAttackerCannotBurnOrReplaceTheCode: wrong guesses and sends from
// other addresses leave the administrator's sent code working, at once:
// three wrong codes from another address pause that address only.
func TestOTPAttackerCannotBurnOrReplaceTheCode(t *testing.T) {
	e := newEnv(t)
	const admin, attacker = "10.0.0.5", "10.0.0.66"
	wantJSON(t, otpSend(e, admin), 200, `{"sent":true,"channel":"console","expires_at":"2026-01-02T03:09:05Z"}`)
	code := e.notifier.lastCode()
	// The attacker asks for a code of its own: the admin's is not replaced.
	if rec := otpSend(e, attacker); rec.Code != 200 {
		t.Fatalf("attacker's send: %d %s", rec.Code, rec.Body)
	}
	// The attacker guesses, the admin's code among its guesses: from the
	// wrong address it does not work and is not spent.
	for i := 0; i < 2; i++ {
		wantJSON(t, otpVerify(e, otherCode(code, 1+i), attacker), 401, msgWrongCode)
	}
	wantJSON(t, otpVerify(e, code, attacker), 401, msgWrongCode)
	// Three wrong codes paused the attacker's address, not the admin's.
	wantJSON(t, otpVerify(e, code, attacker), 429, errJSON("rate_limited", "too many wrong codes from this address: login by code from it is paused for 60 s (other addresses, and the admin key, still work)"))
	if rec := otpVerify(e, code, admin); rec.Code != 200 {
		t.Fatalf("the admin's code after three wrong codes from another address: %d %s", rec.Code, rec.Body)
	}
}

// TestOTPWrongCodesPerAddressAndSlash64: an address's wrong codes pause it
// (and its IPv6 /64) with a doubling back-off shared through the store,
// never another address; its own sent code is voided after three wrong
// codes; the in-memory limit of OTPMaxAttempts in 15 minutes stays.
func TestOTPWrongCodesPerAddressAndSlash64(t *testing.T) {
	e := newEnv(t)
	const a, b = "10.0.0.7", "10.0.0.8"
	otpSend(e, a)
	code := e.notifier.lastCode()
	for i := 1; i <= 3; i++ {
		wantJSON(t, otpVerify(e, otherCode(code, i), a), 401, msgWrongCode)
	}
	paused := func(secs int) string {
		return errJSON("rate_limited", fmt.Sprintf("too many wrong codes from this address: login by code from it is paused for %d s (other addresses, and the admin key, still work)", secs))
	}
	wantJSON(t, otpVerify(e, code, a), 429, paused(60))
	// Another address is checked as ever.
	otpSend(e, b)
	if rec := otpVerify(e, e.notifier.lastCode(), b); rec.Code != 200 {
		t.Fatalf("another address during a's pause: %d %s", rec.Code, rec.Body)
	}
	// Three wrong codes voided a's code: after the pause it no longer works.
	e.clock.Advance(time.Minute)
	wantJSON(t, otpVerify(e, code, a), 401, msgWrongCode)
	// Five wrong codes from a in 15 minutes: the in-memory limit.
	wantJSON(t, otpVerify(e, otherCode(code, 9), a), 401, msgWrongCode)
	wantJSON(t, otpVerify(e, code, a), 429, errJSON("rate_limited", "5 wrong codes from this address: retry in 840 s"))
	e.clock.Advance(14 * time.Minute)
	otpSend(e, a)
	if rec := otpVerify(e, e.notifier.lastCode(), a); rec.Code != 200 {
		t.Fatalf("a new code after the window: %d %s", rec.Code, rec.Body)
	}

	// IPv6: the addresses of one /64 share a back-off; another /64 not.
	const v6a, v6b, v6other = "2001:db8:1:2::10", "2001:db8:1:2::20", "2001:db8:1:3::10"
	for i := 0; i < 3; i++ {
		wantJSON(t, otpVerify(e, fmt.Sprintf("%08d", 40+i), []string{v6a, v6b}[i%2]), 401, msgWrongCode)
	}
	for _, addr := range []string{v6a, v6b} {
		if rec := otpVerify(e, "00000099", addr); rec.Code != 429 {
			t.Errorf("%s after three wrong codes from its /64: %d %s", addr, rec.Code, rec.Body)
		}
	}
	wantJSON(t, otpVerify(e, "00000099", v6other), 401, msgWrongCode)
}

// TestOTPBackoffDoubles: each pause of an address is twice as long as the
// one before, at most otpLockMax, and a quiet day steps it back.
func TestOTPBackoffDoubles(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.Limits.OTPMaxAttempts = 1000 })
	const a = "10.3.0.1"
	for round, lock := range []time.Duration{time.Minute, 2 * time.Minute, 4 * time.Minute, 8 * time.Minute} {
		for i := 0; i < otpGlobalFailures; i++ {
			wantJSON(t, otpVerify(e, fmt.Sprintf("%08d", i), a), 401, msgWrongCode)
		}
		rec := otpVerify(e, "00000000", a)
		if rec.Code != 429 || rec.Header().Get("Retry-After") != fmt.Sprint(int(lock/time.Second)) {
			t.Fatalf("round %d: %d Retry-After %s, want %s", round, rec.Code, rec.Header().Get("Retry-After"), lock)
		}
		if rec := e.do(adminReq("GET", "/v1/admin/keys", "")); rec.Code != 200 {
			t.Fatalf("round %d: the admin key during the pause: %d", round, rec.Code)
		}
		e.clock.Advance(lock)
	}
	e.clock.Advance(48 * time.Hour)
	for i := 0; i < otpGlobalFailures; i++ {
		wantJSON(t, otpVerify(e, fmt.Sprintf("%08d", i), a), 401, msgWrongCode)
	}
	if rec := otpVerify(e, "00000000", a); rec.Header().Get("Retry-After") != "240" {
		t.Errorf("after two quiet days: Retry-After %s, want 240", rec.Header().Get("Retry-After"))
	}
	if otpAddrRule.Length(40) != otpLockMax || otpAddrRule.Length(0) != otpLockBase {
		t.Errorf("lock lengths %s, %s", otpAddrRule.Length(0), otpAddrRule.Length(40))
	}
}

// TestOTPGlobalAuthenticatorLock: wrong authenticator codes from one
// address never pause the others; from several addresses they pause the
// authenticator login for everyone (each time twice as long, the
// administrator told), while a sent code from its own address and the
// admin key keep working.
func TestOTPGlobalAuthenticatorLock(t *testing.T) {
	e := newEnv(t)
	rec := e.do(adminReq("POST", "/v1/admin/totp/enroll", ""))
	var en totpEnrollResponse
	decode(t, rec, &en)
	now := e.clock.Now()
	good, err := totp.GenerateCodeCustom(en.Secret, now, totpOpts)
	if err != nil {
		t.Fatal(err)
	}
	wrongTOTP := fmt.Sprintf("%06d", (atoi(good)+500000)%1000000)
	// One address alone: its own pause, nobody else's.
	for i := 0; i < otpGlobalFailures; i++ {
		wantJSON(t, otpVerify(e, wrongTOTP, "10.4.0.1"), 401, msgWrongCode)
	}
	if rec := otpVerify(e, good, "10.4.0.2"); rec.Code != 200 {
		t.Fatalf("another address's authenticator code after one address's wrong codes: %d %s", rec.Code, rec.Body)
	}
	// From several addresses: the authenticator login pauses for everyone,
	// charged for every wrong code (4 so far: one pause at level 0; the
	// first 3 came from one address).
	e.clock.Advance(time.Hour)
	otpSend(e, "10.4.0.9")
	sent := e.notifier.lastCode()
	wantJSON(t, otpVerify(e, wrongTOTP, "10.4.1.1"), 401, msgWrongCode)
	now = e.clock.Now()
	good, _ = totp.GenerateCodeCustom(en.Secret, now, totpOpts)
	rec = otpVerify(e, good, "10.4.0.3")
	wantJSON(t, rec, 429, errJSON("rate_limited", "too many wrong authenticator codes from several addresses: authenticator login is paused for 60 s (sent codes and the admin key still work)"))
	// A sent code from its own address still works, and the admin key.
	if rec := otpVerify(e, sent, "10.4.0.9"); rec.Code != 200 {
		t.Fatalf("a sent code during the authenticator pause: %d %s", rec.Code, rec.Body)
	}
	if rec := e.do(adminReq("GET", "/v1/admin/keys", "")); rec.Code != 200 {
		t.Fatalf("the admin key during the pause: %d", rec.Code)
	}
	// The administrator was told, without a code.
	waitFor(t, func() bool {
		for _, txt := range e.notifier.textsCopy() {
			if strings.Contains(txt, "login with the authenticator app is paused until") {
				return true
			}
		}
		return false
	})
	// Next round, from two addresses: twice as long. (Of the 4 wrong codes
	// the first pause was charged for, one was left over.)
	e.clock.Advance(time.Minute)
	for i := 0; i < otpGlobalFailures-1; i++ {
		wantJSON(t, otpVerify(e, wrongTOTP, fmt.Sprint("10.4.2.", i)), 401, msgWrongCode)
	}
	if rec := otpVerify(e, good, "10.4.0.3"); rec.Header().Get("Retry-After") != "120" {
		t.Errorf("second authenticator pause: %d Retry-After %s, want 120", rec.Code, rec.Header().Get("Retry-After"))
	}
}

func TestOTPExpiry(t *testing.T) {
	e := newEnv(t)
	otpSend(e)
	code := e.notifier.lastCode()
	e.clock.Advance(5 * time.Minute)
	wantJSON(t, otpVerify(e, code), 401, msgWrongCode)

	// A new code works, and its session expires after 12 h.
	wantJSON(t, otpSend(e), 200, `{"sent":true,"channel":"console","expires_at":"2026-01-02T03:14:05Z"}`)
	rec := otpVerify(e, e.notifier.lastCode())
	var v struct {
		SessionToken string `json:"session_token"`
	}
	decode(t, rec, &v)
	e.clock.Advance(12*time.Hour - time.Second)
	if rec := e.do(sessionReq("GET", "/v1/admin/status", v.SessionToken)); rec.Code != 200 {
		t.Fatalf("session refused before expiry: %d", rec.Code)
	}
	e.clock.Advance(time.Second)
	wantJSON(t, e.do(sessionReq("GET", "/v1/admin/status", v.SessionToken)), 401, errJSON("unauthorized", msgBadAdminCred))
}

func TestOTPSendGlobalThrottle(t *testing.T) {
	e := newEnv(t)
	for i := 0; i < otpSendGlobalBurst; i++ {
		if rec := otpSend(e, fmt.Sprintf("10.2.0.%d", i)); rec.Code != 200 {
			t.Fatalf("send %d: %d %s", i, rec.Code, rec.Body)
		}
	}
	wantJSON(t, otpSend(e, "10.2.0.99"), 429, errJSON("rate_limited", "too many codes were asked for from all addresses; retry in 300 s"))
	e.clock.Advance(otpSendGlobalRefill)
	if rec := otpSend(e, "10.2.0.99"); rec.Code != 200 {
		t.Fatalf("after the refill: %d %s", rec.Code, rec.Body)
	}
	if n := len(e.notifier.codesCopy()); n != otpSendGlobalBurst+1 {
		t.Errorf("%d codes delivered, want %d", n, otpSendGlobalBurst+1)
	}
}

// TestOTPSendOneAddressCannotDrainOthers: one address asking as often as
// it may never uses up what the other addresses may ask for.
func TestOTPSendOneAddressCannotDrainOthers(t *testing.T) {
	e := newEnv(t)
	const greedy = "10.5.0.1"
	for i := 0; i < 24*6; i++ { // a day of asking every 10 minutes and 30 s between
		for range otpSendBurst + 1 {
			otpSend(e, greedy)
			e.clock.Advance(31 * time.Second)
		}
		if rec := otpSend(e, fmt.Sprint("10.5.1.", i%200)); rec.Code != 200 {
			t.Fatalf("round %d: another address was refused: %d %s", i, rec.Code, rec.Body)
		}
		e.clock.Advance(10*time.Minute - time.Duration(otpSendBurst+1)*31*time.Second)
	}
	rec := otpSend(e, greedy)
	if rec.Code == 429 && !strings.Contains(rec.Body.String(), "from this address") {
		t.Errorf("the greedy address's refusal: %s", rec.Body)
	}
}

func TestOTPErrors(t *testing.T) {
	e := newEnv(t)
	e.notifier.err = errors.New("telegram: 401 bad token https://api.telegram.org/botSECRET")
	wantJSON(t, otpSend(e), 502, errJSON("otp_delivery_failed", "the code could not be delivered through the console channel; check its configuration"))
	// A failed delivery is counted apart and does not hold the next try
	// back; the undelivered code is gone.
	if codes := e.st.snapshot(t).OTPCodes; len(codes) != 0 {
		t.Errorf("an undelivered code stayed stored")
	}
	wantJSON(t, otpSend(e), 502, errJSON("otp_delivery_failed", "the code could not be delivered through the console channel; check its configuration"))
	if got := testutil.ToFloat64(e.srv.metrics.otpDeliveryFailures); got != 2 {
		t.Errorf("replyd_otp_delivery_failures_total = %v, want 2", got)
	}
	e.notifier.err = nil
	if rec := otpSend(e); rec.Code != 200 {
		t.Errorf("the send after two failed deliveries: %d %s", rec.Code, rec.Body)
	}

	e2 := newEnv(t, func(o *Options) { o.Notifier = nil })
	wantJSON(t, otpSend(e2), 502, errJSON("otp_delivery_failed", "no OTP channel is configured; use X-ADMIN-KEY or configure a channel"))

	for _, c := range []struct{ body, msg string }{
		{``, "a JSON request body is required"},
		{`{}`, "code is required"},
		{`{"code":"  "}`, "code is required"},
		{`{"code":123456}`, "code has the wrong type: expected a string"},
		{`{"code":`, "the request body is not valid JSON (unexpected end)"},
		{`{"code":"1234567"}`, "code must be the 8 digits of a sent code or the 6 digits of an authenticator app"},
		{`{"code":"12a45678"}`, "code must be the 8 digits of a sent code or the 6 digits of an authenticator app"},
	} {
		req := httptest.NewRequest("POST", "/v1/admin/otp/verify", strings.NewReader(c.body))
		wantJSON(t, e.do(req), 400, errJSON("invalid_request", c.msg))
	}
}

// TestTOTPEnrollQRCodeScans: the enrolment's QR code reads as its
// otpauth:// URL.
func TestTOTPEnrollQRCodeScans(t *testing.T) {
	e := newEnv(t)
	rec := e.do(adminReq("POST", "/v1/admin/totp/enroll", ""))
	var en totpEnrollResponse
	decode(t, rec, &en)
	if got := scanQR(t, en.QRSVG); got != en.OTPAuthURL {
		t.Errorf("the QR code reads %q, want %q", got, en.OTPAuthURL)
	}
}

func TestTOTP(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.TOTPOnly = true; o.Notifier = nil })
	wantJSON(t, otpSend(e), 200, `{"sent":false,"channel":"totp"}`)
	// Not enrolled yet: no 6-digit code works.
	wantJSON(t, otpVerify(e, "123456"), 401, msgWrongCode)

	wantJSON(t, e.do(httptest.NewRequest("POST", "/v1/admin/totp/enroll", nil)), 401, errJSON("unauthorized", msgNoAdminCred))
	rec := e.do(adminReq("POST", "/v1/admin/totp/enroll", ""))
	var en struct {
		Secret     string `json:"secret"`
		OTPAuthURL string `json:"otpauth_url"`
		QRSVG      string `json:"qr_svg"`
	}
	decode(t, rec, &en)
	if rec.Code != 200 || len(en.Secret) != 32 || !strings.HasPrefix(en.OTPAuthURL, "otpauth://totp/replyd:admin?") ||
		!strings.Contains(en.OTPAuthURL, "secret="+en.Secret) || rec.Header().Get("Cache-Control") != "no-store" ||
		!strings.HasPrefix(en.QRSVG, `<svg xmlns="http://www.w3.org/2000/svg"`) || strings.Contains(en.QRSVG, "style=") {
		t.Fatalf("enroll: %d %s", rec.Code, rec.Body)
	}
	if v, ok, _ := e.st.Secret(store.SecretTOTP); !ok || string(v) != en.Secret {
		t.Fatal("the secret is not the installation's TOTP secret")
	}
	codeAt := func(at time.Time) string {
		c, err := totp.GenerateCodeCustom(en.Secret, at, totpOpts)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	// The current code logs in once; then neither it nor the previous
	// step's code works (their steps are not later than the one used).
	now := e.clock.Now()
	if rec := otpVerify(e, codeAt(now)); rec.Code != 200 {
		t.Fatalf("current code: %d %s", rec.Code, rec.Body)
	}
	wantJSON(t, otpVerify(e, codeAt(now)), 401, msgWrongCode)
	wantJSON(t, otpVerify(e, codeAt(now.Add(-totpPeriod))), 401, msgWrongCode)
	// Three wrong codes: wait out the one-minute lock. Two steps later,
	// the previous step's code (still unused) works: ±1 step.
	e.clock.Advance(time.Minute + time.Second)
	now = e.clock.Now()
	if rec := otpVerify(e, codeAt(now.Add(-totpPeriod))); rec.Code != 200 {
		t.Fatalf("previous step's code: %d %s", rec.Code, rec.Body)
	}
	wantJSON(t, otpVerify(e, codeAt(now.Add(2*totpPeriod))), 401, msgWrongCode)
	if rec := otpVerify(e, codeAt(now)); rec.Code != 200 {
		t.Fatalf("current code after the previous step's: %d %s", rec.Code, rec.Body)
	}
	// Status shows the channel and the enrolment.
	if body := e.do(adminReq("GET", "/v1/admin/status", "")).Body.String(); !strings.Contains(body, `"otp_channel":"totp","totp_enrolled":true`) {
		t.Errorf("status: %s", body)
	}
}

func TestKeysLifecycle(t *testing.T) {
	e := newEnv(t)

	rec := e.do(adminReq("POST", "/v1/admin/keys", ""))
	var created struct {
		APIKey     string `json:"api_key"`
		APIKeyHash string `json:"api_key_hash"`
	}
	decode(t, rec, &created)
	if !strings.HasPrefix(created.APIKey, APIKeyPrefix) || len(created.APIKey) != len(APIKeyPrefix)+43 {
		t.Errorf("api_key %q has the wrong form", created.APIKey)
	}
	if created.APIKeyHash != secret.Hash(created.APIKey) {
		t.Errorf("api_key_hash is not the hex SHA-256 of api_key")
	}
	wantJSON(t, rec, 200, `{"api_key":"`+created.APIKey+`","api_key_hash":"`+created.APIKeyHash+`","client_id":"","status":"active",
	  "scopes":["infer"],"rate_limit_per_minute":60,"created_at":"2026-01-02T03:04:05Z",
	  "warnings":["client_id is empty: the key list, the logs and the statistics cannot tell this tablet from others; name it (e.g. tablet-ward-3) in a new key"]}`)
	// Only the hash is stored.
	k, err := e.st.GetKey(created.APIKeyHash)
	if err != nil || k.Hash != created.APIKeyHash {
		t.Fatalf("stored key: %+v %v", k, err)
	}
	// The new key works for inference.
	if rec := e.do(inferReq(t, created.APIKey, payloadPart(simplePayload))); rec.Code != 200 {
		t.Errorf("new key refused: %d %s", rec.Code, rec.Body)
	}

	e.clock.Advance(time.Minute)
	rec = e.do(adminReq("POST", "/v1/admin/keys", `{"client_id":"ward-3","scopes":["infer","infer"],"rate_limit_per_minute":10,"status":"active","unknown":1}`))
	var second struct {
		APIKey     string `json:"api_key"`
		APIKeyHash string `json:"api_key_hash"`
	}
	decode(t, rec, &second)
	wantJSON(t, rec, 200, `{"api_key":"`+second.APIKey+`","api_key_hash":"`+second.APIKeyHash+`","client_id":"ward-3","status":"active",
	  "scopes":["infer"],"rate_limit_per_minute":10,"created_at":"2026-01-02T03:05:05Z"}`)

	e.clock.Advance(time.Minute)
	rec = e.do(adminReq("POST", "/v1/admin/keys", `{"client_id":"no-scope","scopes":[],"rate_limit_per_minute":0}`))
	var third struct {
		APIKey     string `json:"api_key"`
		APIKeyHash string `json:"api_key_hash"`
	}
	decode(t, rec, &third)
	wantJSON(t, e.do(inferReq(t, third.APIKey, payloadPart(simplePayload))), 403, errJSON("forbidden", `this API key lacks the scope "infer"`))

	for _, c := range []struct{ body, msg string }{
		{`{"status":"paused"}`, `status must be "active" or "revoked"`},
		{`{"rate_limit_per_minute":-1}`, "rate_limit_per_minute must be between 0 (unlimited) and 100000"},
		{`{"rate_limit_per_minute":100001}`, "rate_limit_per_minute must be between 0 (unlimited) and 100000"},
		{`{"scopes":["infer","admin"]}`, "scopes[1] is not a known scope; known scopes: infer"},
		{`{"scopes":"infer"}`, "scopes has the wrong type: expected an array"},
		{`{"client_id":"` + strings.Repeat("c", 201) + `"}`, "client_id has 201 characters; the limit is 200"},
		{`[`, "the request body is not valid JSON (unexpected end)"},
	} {
		wantJSON(t, e.do(adminReq("POST", "/v1/admin/keys", c.body)), 400, errJSON("invalid_request", c.msg))
	}

	rec1 := `{"APIKeyHash":"` + created.APIKeyHash + `","ClientID":"","Status":"active","Scopes":["infer"],"RateLimitPerMinute":60,"CreatedAt":"2026-01-02T03:04:05Z","RevokedAt":null,"LastUsedAt":"2026-01-02T03:04:05Z","LiveListening":true}`
	rec2 := `{"APIKeyHash":"` + second.APIKeyHash + `","ClientID":"ward-3","Status":"active","Scopes":["infer"],"RateLimitPerMinute":10,"CreatedAt":"2026-01-02T03:05:05Z","RevokedAt":null,"LastUsedAt":null,"LiveListening":true}`
	rec3 := `{"APIKeyHash":"` + third.APIKeyHash + `","ClientID":"no-scope","Status":"active","Scopes":[],"RateLimitPerMinute":0,"CreatedAt":"2026-01-02T03:06:05Z","RevokedAt":null,"LastUsedAt":null,"LiveListening":true}`
	wantJSON(t, e.do(adminReq("GET", "/v1/admin/keys", "")), 200, `{"items":[`+rec3+`,`+rec2+`,`+rec1+`],"count":3}`)
	// A page that more keys follow says where the next one starts.
	page := e.do(adminReq("GET", "/v1/admin/keys?limit=1", ""))
	var pg struct {
		NextCursor string `json:"next_cursor"`
	}
	if err := json.Unmarshal(page.Body.Bytes(), &pg); err != nil || len(pg.NextCursor) != 32 {
		t.Fatalf("page of 1: %s (%v)", page.Body, err)
	}
	wantJSON(t, page, 200, `{"items":[`+rec3+`],"count":1,"next_cursor":"`+pg.NextCursor+`"}`)
	wantJSON(t, e.do(adminReq("GET", "/v1/admin/keys?limit=5&cursor="+pg.NextCursor, "")), 200, `{"items":[`+rec2+`,`+rec1+`],"count":2}`)

	// Revoke: 200 with the record, idempotent, hidden from the default list.
	e.clock.Advance(time.Minute)
	revoked2 := strings.Replace(strings.Replace(rec2, `"Status":"active"`, `"Status":"revoked"`, 1), `"RevokedAt":null`, `"RevokedAt":"2026-01-02T03:07:05Z"`, 1)
	// The revocation answers the record without the key list's live switch.
	revokedRec2 := strings.Replace(revoked2, `,"LiveListening":true`, ``, 1)
	wantJSON(t, e.do(adminReq("DELETE", "/v1/admin/keys/"+second.APIKeyHash, "")), 200, revokedRec2)
	e.clock.Advance(time.Minute)
	wantJSON(t, e.do(adminReq("DELETE", "/v1/admin/keys/"+second.APIKeyHash, "")), 200, revokedRec2)
	wantJSON(t, e.do(adminReq("GET", "/v1/admin/keys", "")), 200, `{"items":[`+rec3+`,`+rec1+`],"count":2}`)
	wantJSON(t, e.do(adminReq("GET", "/v1/admin/keys?include_revoked=true", "")), 200, `{"items":[`+rec3+`,`+revoked2+`,`+rec1+`],"count":3}`)
	wantJSON(t, e.do(inferReq(t, second.APIKey, payloadPart(simplePayload))), 401, errJSON("unauthorized", "X-API-KEY has been revoked"))

	wantJSON(t, e.do(adminReq("DELETE", "/v1/admin/keys/"+secret.Hash("unknown"), "")), 404, errJSON("not_found", "no API key has this api_key_hash"))
	wantJSON(t, e.do(adminReq("DELETE", "/v1/admin/keys/not-a-hash", "")), 404, errJSON("not_found", "no API key has this api_key_hash (it is 64 hex characters)"))

	for _, q := range []string{"limit=0", "limit=1001", "limit=x", "limit=-1"} {
		wantJSON(t, e.do(adminReq("GET", "/v1/admin/keys?"+q, "")), 400, errJSON("invalid_request", "limit must be an integer between 1 and 1000"))
	}
	wantJSON(t, e.do(adminReq("GET", "/v1/admin/keys?include_revoked=maybe", "")), 400, errJSON("invalid_request", "include_revoked must be true or false"))
	for _, q := range []string{"cursor=x", "cursor=" + strings.Repeat("g", 32)} {
		wantJSON(t, e.do(adminReq("GET", "/v1/admin/keys?"+q, "")), 400, errJSON("invalid_request", "cursor must be a next_cursor from an earlier answer of /v1/admin/keys"))
	}

	// Created and revoked keys are in the admin log; the secret never is.
	var msgs []string
	for _, l := range e.st.logsCopy() {
		if l.StreamName != store.StreamAdmin {
			continue
		}
		if strings.Contains(l.Message, created.APIKey) || strings.Contains(l.Message, second.APIKey) {
			t.Errorf("log leaks a key: %q", l.Message)
		}
		msgs = append(msgs, l.ResourceID[:8]+" "+l.Message)
	}
	want := []string{
		created.APIKeyHash[:8] + " api key created: status active, scopes [infer], 60 requests/min",
		second.APIKeyHash[:8] + " api key created: status active, scopes [infer], 10 requests/min",
		third.APIKeyHash[:8] + " api key created: status active, scopes [], 0 requests/min",
		second.APIKeyHash[:8] + " api key revoked",
	}
	if strings.Join(msgs, "\n") != strings.Join(want, "\n") {
		t.Errorf("admin log:\n%s\nwant\n%s", strings.Join(msgs, "\n"), strings.Join(want, "\n"))
	}
}

func TestKeyCreatedRevoked(t *testing.T) {
	e := newEnv(t)
	rec := e.do(adminReq("POST", "/v1/admin/keys", `{"status":"revoked"}`))
	var k struct {
		APIKey string `json:"api_key"`
	}
	decode(t, rec, &k)
	if rec.Code != 200 {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	wantJSON(t, e.do(inferReq(t, k.APIKey, payloadPart(simplePayload))), 401, errJSON("unauthorized", "X-API-KEY has been revoked"))
}

func TestSystemPrompt(t *testing.T) {
	e := newEnv(t)
	def, _ := json.Marshal(DefaultSystemPrompt)
	wantJSON(t, e.do(adminReq("GET", "/v1/admin/system-prompt", "")), 200, `{"prompt":`+string(def)+`,"version":"1","created_at":null}`)

	// The first save keeps the built-in prompt as version 1 and takes 2.
	wantJSON(t, e.do(adminReq("POST", "/v1/admin/system-prompt", `{"prompt":"Be brief."}`)), 200, `{"prompt":"Be brief.","version":"2","created_at":"2026-01-02T03:04:05Z"}`)
	wantJSON(t, e.do(adminReq("GET", "/v1/admin/system-prompt/history", "")), 200, `{"items":[
	  {"prompt":"Be brief.","version":"2","created_at":"2026-01-02T03:04:05Z"},
	  {"prompt":`+string(def)+`,"version":"1","created_at":"2026-01-02T03:04:05Z"}],"count":2}`)
	e.clock.Advance(time.Second)
	wantJSON(t, e.do(adminReq("POST", "/v1/admin/system-prompt", `{"prompt":"Be kind.","version":"v2"}`)), 200, `{"prompt":"Be kind.","version":"v2","created_at":"2026-01-02T03:04:06Z"}`)
	e.clock.Advance(time.Second)
	wantJSON(t, e.do(adminReq("POST", "/v1/admin/system-prompt", `{"prompt":"Be warm.","version":5}`)), 200, `{"prompt":"Be warm.","version":"5","created_at":"2026-01-02T03:04:07Z"}`)
	e.clock.Advance(time.Second)
	wantJSON(t, e.do(adminReq("POST", "/v1/admin/system-prompt", `{"prompt":"Be short."}`)), 200, `{"prompt":"Be short.","version":"6","created_at":"2026-01-02T03:04:08Z"}`)
	wantJSON(t, e.do(adminReq("GET", "/v1/admin/system-prompt", "")), 200, `{"prompt":"Be short.","version":"6","created_at":"2026-01-02T03:04:08Z"}`)

	for _, c := range []struct {
		body, code, msg string
		status          int
	}{
		{`{"prompt":"x","version":"v2"}`, "conflict", `version "v2" already exists; omit version to take the next one`, 409},
		{`{"prompt":""}`, "invalid_request", "prompt is required and must not be empty", 400},
		{`{"prompt":" \n "}`, "invalid_request", "prompt is required and must not be empty", 400},
		{`{"version":"9"}`, "invalid_request", "prompt is required and must not be empty", 400},
		{`{"prompt":"x","version":""}`, "invalid_request", "version must not be empty; omit it to take the next integer", 400},
		{`{"prompt":"x","version":1.5}`, "invalid_request", "version must be a string or an integer", 400},
		{`{"prompt":"x","version":"` + strings.Repeat("v", 65) + `"}`, "invalid_request", "version is longer than 64 characters", 400},
		{`{"prompt":7}`, "invalid_request", "prompt has the wrong type: expected a string", 400},
		{``, "invalid_request", "a JSON request body is required", 400},
	} {
		wantJSON(t, e.do(adminReq("POST", "/v1/admin/system-prompt", c.body)), c.status, errJSON(c.code, c.msg))
	}

	wantJSON(t, e.do(adminReq("GET", "/v1/admin/system-prompt/history?limit=3", "")), 200, `{"items":[
	  {"prompt":"Be short.","version":"6","created_at":"2026-01-02T03:04:08Z"},
	  {"prompt":"Be warm.","version":"5","created_at":"2026-01-02T03:04:07Z"},
	  {"prompt":"Be kind.","version":"v2","created_at":"2026-01-02T03:04:06Z"}],"count":3}`)
	wantJSON(t, e.do(adminReq("GET", "/v1/admin/system-prompt/history?limit=5000", "")), 400, errJSON("invalid_request", "limit must be an integer between 1 and 1000"))

	// Inference uses the current prompt.
	e.addKey("valid", 60)
	e.do(inferReq(t, "valid", payloadPart(simplePayload)))
	if got := e.inf.last().SystemPrompt; got != "Be short." {
		t.Errorf("system prompt = %q", got)
	}
	var changes int
	for _, l := range e.st.logsCopy() {
		if strings.HasPrefix(l.Message, "system prompt changed to version ") {
			changes++
		}
	}
	if changes != 4 {
		t.Errorf("%d prompt changes logged, want 4", changes)
	}
}

func TestDefaultSystemPromptContent(t *testing.T) {
	for _, want := range []string{"first person", "own voice", "short", "Never give advice"} {
		if !strings.Contains(DefaultSystemPrompt, want) {
			t.Errorf("DefaultSystemPrompt lacks %q", want)
		}
	}
}

// TestNoSecretsOrDialogInInfoLogs runs an inference with dialog and audio,
// a key creation and an OTP login with the slog output captured at info
// level, and checks that no dialog text, transcript, key, code or token
// reaches it, and that every line carries a request id.
func TestNoSecretsOrDialogInInfoLogs(t *testing.T) {
	var captured logCapture
	logger := slog.New(slog.NewJSONHandler(&captured, &slog.HandlerOptions{Level: slog.LevelInfo}))
	e := newEnv(t, func(o *Options) { o.Logger = logger })

	rec := e.do(adminReq("POST", "/v1/admin/keys", `{"client_id":"c"}`))
	var k struct {
		APIKey string `json:"api_key"`
	}
	decode(t, rec, &k)
	e.do(inferReq(t, k.APIKey, payloadPart(`{"user_id":"patient-77","messages":[{"role":"speaker","content":"How is your pain today?"}]}`), audioPart([]byte("RIFFaudio"))))
	e.do(inferReq(t, k.APIKey, payloadPart(`{"messages":[{"role":"nurse","content":"Private words"}]}`)))
	otpSend(e)
	code := e.notifier.lastCode()
	rec = otpVerify(e, code)
	var s struct {
		SessionToken string `json:"session_token"`
	}
	decode(t, rec, &s)

	out := captured.String()
	for _, leak := range []string{"pain", "Private", "patient-77", "transcript of", k.APIKey, code, s.SessionToken, testAdminKey} {
		if strings.Contains(out, leak) {
			t.Errorf("info log contains %q", leak)
		}
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < 5 {
		t.Fatalf("only %d log lines", len(lines))
	}
	for _, l := range lines {
		if !strings.Contains(l, `"request_id":"`) {
			t.Errorf("log line without request_id: %s", l)
		}
	}
}

// logCapture collects what a logger writes, from any goroutine.
type logCapture struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (l *logCapture) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logCapture) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func TestOTPSendThrottleUnderConcurrency(t *testing.T) {
	e := newEnv(t)
	var wg sync.WaitGroup
	codes := make([]int, 10)
	for i := range codes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i] = otpSend(e).Code
		}()
	}
	wg.Wait()
	n := map[int]int{}
	for _, c := range codes {
		n[c]++
	}
	if n[200] != 1 || n[429] != 9 {
		t.Errorf("statuses %v, want one 200 and nine 429", n)
	}
}

// TestKeyCreateWarnings: an empty client_id, or one an active key already
// has (ignoring case and spaces), is created with a warning; a revoked
// key's name may be reused quietly.
func TestKeyCreateWarnings(t *testing.T) {
	e := newEnv(t)
	warnings := func(body string) []string {
		t.Helper()
		rec := e.do(adminReq("POST", "/v1/admin/keys", body))
		var r struct {
			Warnings []string `json:"warnings"`
		}
		decode(t, rec, &r)
		return r.Warnings
	}
	if w := warnings(`{"client_id":"ward-1"}`); len(w) != 0 {
		t.Errorf("first ward-1: %q", w)
	}
	if w := warnings(`{"client_id":" Ward-1 "}`); len(w) != 1 || !strings.Contains(w[0], `client_id "Ward-1" is already the name of another active key (created 2026-01-02T03:04:05Z)`) {
		t.Errorf("second ward-1: %q", w)
	}
	if w := warnings(`{"client_id":"  "}`); len(w) != 1 || !strings.HasPrefix(w[0], "client_id is empty") {
		t.Errorf("blank client_id: %q", w)
	}
	if w := warnings(`{"client_id":"old","status":"revoked"}`); len(w) != 0 {
		t.Errorf("old: %q", w)
	}
	if w := warnings(`{"client_id":"old"}`); len(w) != 0 {
		t.Errorf("the name of a revoked key: %q", w)
	}
}

// TestOTPAttackBound: the arithmetic client.md states, and that it is
// stated there.
func TestOTPAttackBound(t *testing.T) {
	b := otpAttackBound()
	if b.Levels != 11 || b.Locks != 744 || b.AddrGuesses != 2235 || b.TOTPGuesses != 4467 || b.SentCodes != 105414 || b.SentGuesses != 316242 {
		t.Errorf("bound %+v", b)
	}
	if b.SentPercent >= 0.5 || b.TOTPPercent >= 1.5 {
		t.Errorf("chances %.3f%% (sent), %.3f%% (authenticator) a year", b.SentPercent, b.TOTPPercent)
	}
	md := string(newEnv(t).srv.clientMD)
	for _, want := range []string{"2235", "4467", "316242", "105414"} {
		if !strings.Contains(md, want) {
			t.Errorf("client.md does not state %s", want)
		}
	}
}
