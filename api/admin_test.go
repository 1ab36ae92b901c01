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
		{"GET", "/v1/admin/keys"}, {"POST", "/v1/admin/keys"}, {"DELETE", "/v1/admin/keys/" + hashHex("x")},
		{"GET", "/v1/admin/system-prompt"}, {"POST", "/v1/admin/system-prompt"}, {"GET", "/v1/admin/system-prompt/history"},
		{"GET", "/v1/admin/logs"}, {"GET", "/v1/admin/stats"}, {"GET", "/v1/admin/status"}, {"GET", "/v1/admin/backup"},
		{"POST", "/v1/admin/try"}, {"DELETE", "/v1/admin/session"}, {"GET", "/metrics"},
	}
	// An unknown admin path is 404 with or without a credential (a route
	// group's catch-all used to answer it, and wrong methods, after auth).
	for _, req := range []*http.Request{httptest.NewRequest("GET", "/v1/admin/no-such-route", nil), adminReq("GET", "/v1/admin/no-such-route", "")} {
		wantJSON(t, e.do(req), 404, errJSON("not_found", "no such route"))
	}
	for _, r := range adminRoutes {
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
				{"admin key hash as key", map[string]string{HeaderAdminKey: hashHex(testAdminKey)}, msgBadAdminCred},
			}
			for _, c := range cases {
				req := httptest.NewRequest(r.method, r.path, nil)
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

func otpSend(e *env) *httptest.ResponseRecorder {
	return e.do(httptest.NewRequest("POST", "/v1/admin/otp/send", nil))
}

func otpVerify(e *env, code string) *httptest.ResponseRecorder {
	req := httptest.NewRequest("POST", "/v1/admin/otp/verify", strings.NewReader(`{"code":"`+code+`"}`))
	req.Header.Set("Content-Type", "application/json")
	return e.do(req)
}

func sessionReq(method, target, token string) *http.Request {
	req := httptest.NewRequest(method, target, nil)
	req.Header.Set(HeaderAdminSession, token)
	return req
}

func TestOTPFullFlow(t *testing.T) {
	e := newEnv(t)
	wantJSON(t, otpSend(e), 200, `{"sent":true,"channel":"console","expires_at":"2026-01-02T03:09:05Z"}`)
	code := e.notifier.lastCode()
	if !regexp.MustCompile(`^[0-9]{6}$`).MatchString(code) {
		t.Fatalf("code %q is not 6 digits", code)
	}
	if !strings.Contains(e.notifier.texts[0], code) {
		t.Errorf("message text does not carry the code")
	}
	if e.st.otp.hash != hashHex(code) {
		t.Errorf("the store does not hold the code's hash")
	}

	// One send per 30 s.
	e.clock.Advance(10 * time.Second)
	rec := otpSend(e)
	wantJSON(t, rec, 429, errJSON("rate_limited", "a code was sent less than 30s ago; retry in 20 s"))
	if rec.Header().Get("Retry-After") != "20" {
		t.Errorf("Retry-After = %q", rec.Header().Get("Retry-After"))
	}

	wrong := fmt.Sprintf("%06d", (atoi(code)+1)%1000000)
	wantJSON(t, otpVerify(e, wrong), 401, errJSON("unauthorized", "code is wrong"))

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
	if _, ok := e.st.sessions[hashHex(v.SessionToken)]; !ok || len(e.st.sessions) != 1 {
		t.Errorf("the store does not hold exactly the token's hash")
	}

	// The code is single use.
	wantJSON(t, otpVerify(e, code), 401, errJSON("unauthorized", "code is not valid: no code is outstanding; request one with /v1/admin/otp/send"))

	// The session works, then logout ends it.
	if rec := e.do(sessionReq("GET", "/v1/admin/keys", v.SessionToken)); rec.Code != 200 {
		t.Fatalf("session refused: %d %s", rec.Code, rec.Body)
	}
	wantJSON(t, e.do(sessionReq("DELETE", "/v1/admin/session", v.SessionToken)), 200, `{"logged_out":true}`)
	wantJSON(t, e.do(sessionReq("GET", "/v1/admin/keys", v.SessionToken)), 401, errJSON("unauthorized", msgBadAdminCred))

	// Logging out needs a session, not the admin key.
	wantJSON(t, e.do(adminReq("DELETE", "/v1/admin/session", "")), 400, errJSON("invalid_request", "X-ADMIN-SESSION is required to log out (an admin key has no session)"))

	// Login events are in the admin log, without the code.
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
		"warn login failed: code is wrong",
		"info login ok: session valid for 12h0m0s",
		"warn login failed: code is not valid: no code is outstanding; request one with /v1/admin/otp/send",
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

func TestOTPLockoutAfterFiveWrongTries(t *testing.T) {
	e := newEnv(t)
	otpSend(e)
	code := e.notifier.lastCode()
	wrong := fmt.Sprintf("%06d", (atoi(code)+7)%1000000)
	for i := 0; i < 4; i++ {
		wantJSON(t, otpVerify(e, wrong), 401, errJSON("unauthorized", "code is wrong"))
	}
	wantJSON(t, otpVerify(e, wrong), 401, errJSON("unauthorized", "code is wrong; after 5 wrong codes it is no longer valid: request a new one"))
	// Burned: even the right code fails now.
	wantJSON(t, otpVerify(e, code), 401, errJSON("unauthorized", "code is not valid: no code is outstanding; request one with /v1/admin/otp/send"))
}

func TestOTPExpiry(t *testing.T) {
	e := newEnv(t)
	otpSend(e)
	code := e.notifier.lastCode()
	e.clock.Advance(5 * time.Minute)
	wantJSON(t, otpVerify(e, code), 401, errJSON("unauthorized", "code has expired: request a new one"))

	// A new code after the throttle works, and its session expires after 12 h.
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

func TestOTPErrors(t *testing.T) {
	e := newEnv(t)
	e.notifier.err = errors.New("telegram: 401 bad token https://api.telegram.org/botSECRET")
	wantJSON(t, otpSend(e), 502, errJSON("otp_delivery_failed", "the code could not be delivered through the console channel; check its configuration"))

	e2 := newEnv(t, func(o *Options) { o.Notifier = nil })
	wantJSON(t, otpSend(e2), 502, errJSON("otp_delivery_failed", "no OTP channel is configured; use X-ADMIN-KEY or configure a channel"))

	for _, c := range []struct{ body, msg string }{
		{``, "a JSON request body is required"},
		{`{}`, "code is required"},
		{`{"code":"  "}`, "code is required"},
		{`{"code":123456}`, "code has the wrong type: expected a string"},
		{`{"code":`, "the request body is not valid JSON (unexpected end)"},
	} {
		req := httptest.NewRequest("POST", "/v1/admin/otp/verify", strings.NewReader(c.body))
		wantJSON(t, e.do(req), 400, errJSON("invalid_request", c.msg))
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
	if created.APIKeyHash != hashHex(created.APIKey) {
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

	rec1 := `{"APIKeyHash":"` + created.APIKeyHash + `","ClientID":"","Status":"active","Scopes":["infer"],"RateLimitPerMinute":60,"CreatedAt":"2026-01-02T03:04:05Z","RevokedAt":null,"LastUsedAt":"2026-01-02T03:04:05Z"}`
	rec2 := `{"APIKeyHash":"` + second.APIKeyHash + `","ClientID":"ward-3","Status":"active","Scopes":["infer"],"RateLimitPerMinute":10,"CreatedAt":"2026-01-02T03:05:05Z","RevokedAt":null,"LastUsedAt":null}`
	rec3 := `{"APIKeyHash":"` + third.APIKeyHash + `","ClientID":"no-scope","Status":"active","Scopes":[],"RateLimitPerMinute":0,"CreatedAt":"2026-01-02T03:06:05Z","RevokedAt":null,"LastUsedAt":null}`
	wantJSON(t, e.do(adminReq("GET", "/v1/admin/keys", "")), 200, `{"items":[`+rec3+`,`+rec2+`,`+rec1+`],"count":3}`)
	wantJSON(t, e.do(adminReq("GET", "/v1/admin/keys?limit=1", "")), 200, `{"items":[`+rec3+`],"count":1}`)

	// Revoke: 200 with the record, idempotent, hidden from the default list.
	e.clock.Advance(time.Minute)
	revoked2 := strings.Replace(strings.Replace(rec2, `"Status":"active"`, `"Status":"revoked"`, 1), `"RevokedAt":null`, `"RevokedAt":"2026-01-02T03:07:05Z"`, 1)
	wantJSON(t, e.do(adminReq("DELETE", "/v1/admin/keys/"+second.APIKeyHash, "")), 200, revoked2)
	e.clock.Advance(time.Minute)
	wantJSON(t, e.do(adminReq("DELETE", "/v1/admin/keys/"+second.APIKeyHash, "")), 200, revoked2)
	wantJSON(t, e.do(adminReq("GET", "/v1/admin/keys", "")), 200, `{"items":[`+rec3+`,`+rec1+`],"count":2}`)
	wantJSON(t, e.do(adminReq("GET", "/v1/admin/keys?include_revoked=true", "")), 200, `{"items":[`+rec3+`,`+revoked2+`,`+rec1+`],"count":3}`)
	wantJSON(t, e.do(inferReq(t, second.APIKey, payloadPart(simplePayload))), 401, errJSON("unauthorized", "X-API-KEY has been revoked"))

	wantJSON(t, e.do(adminReq("DELETE", "/v1/admin/keys/"+hashHex("unknown"), "")), 404, errJSON("not_found", "no API key has this api_key_hash"))
	wantJSON(t, e.do(adminReq("DELETE", "/v1/admin/keys/not-a-hash", "")), 404, errJSON("not_found", "no API key has this api_key_hash (it is 64 hex characters)"))

	for _, q := range []string{"limit=0", "limit=1001", "limit=x", "limit=-1"} {
		wantJSON(t, e.do(adminReq("GET", "/v1/admin/keys?"+q, "")), 400, errJSON("invalid_request", "limit must be an integer between 1 and 1000"))
	}
	wantJSON(t, e.do(adminReq("GET", "/v1/admin/keys?include_revoked=maybe", "")), 400, errJSON("invalid_request", "include_revoked must be true or false"))

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
	var buf strings.Builder
	var mu sync.Mutex
	logger := slog.New(slog.NewJSONHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return buf.Write(p)
	}), &slog.HandlerOptions{Level: slog.LevelInfo}))
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

	mu.Lock()
	out := buf.String()
	mu.Unlock()
	for _, secret := range []string{"pain", "Private", "patient-77", "transcript of", k.APIKey, code, s.SessionToken, testAdminKey} {
		if strings.Contains(out, secret) {
			t.Errorf("info log contains %q", secret)
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

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

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
