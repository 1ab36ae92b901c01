package api

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/replyd/replyd/internal/secret"
	"github.com/replyd/replyd/store"
	"github.com/replyd/replyd/store/bolt"
)

// TestBoltScenarios runs the main flows against the real store: key
// lifecycle, inference, revocation, logs, stats, prompt versions, OTP login
// and logout, and backup.
func TestBoltScenarios(t *testing.T) {
	e := newEnv(t)
	db := e.st

	rec, k := e.createKey(`{"client_id":"ward-1","rate_limit_per_minute":2}`)
	wantJSON(t, rec, 200, `{"api_key":"`+k.APIKey+`","api_key_hash":"`+k.APIKeyHash+`","client_id":"ward-1","status":"active",
	  "scopes":["infer"],"rate_limit_per_minute":2,"created_at":"2026-01-02T03:04:05Z"}`)

	wantJSON(t, e.do(inferReq(t, k.APIKey, payloadPart(`{"user_id":"u1","messages":[{"role":"speaker","content":"Tea?"}]}`))), 200, okTextOnly)
	wantJSON(t, e.do(inferReq(t, k.APIKey, payloadPart(`{"messages":[]}`))), 400, errJSON("invalid_request", "messages must not be empty"))
	wantJSON(t, e.do(inferReq(t, k.APIKey, payloadPart(simplePayload))), 429, errJSON("rate_limited", "rate limit of 2 requests per minute exceeded for this API key; retry in 60 s"))

	e.clock.Advance(time.Minute)
	wantJSON(t, e.do(adminReq("GET", "/v1/admin/stats?window=1h", "")), 200, `{"since":"2026-01-02T02:05:05Z","window_seconds":3600,"total_requests":3,"active_users":2,
	  "errors":{"invalid_request":1,"rate_limited":1},"latency_ms":{"p50":0,"p95":0},`+noOutcomes+`,
	  "by_key":[{"api_key_hash":"`+k.APIKeyHash+`","client_id":"ward-1","requests":3,"errors":2,`+noOutcomes+`}],
	  "by_prompt_version":[{"version":"1","inferences":1,"outcomes":0,"accepted":0,"acceptance_rate":null}],"by_model":[],"ksr":[]}`)
	rec = e.do(adminReq("GET", "/v1/admin/logs?stream=infer", ""))
	wantJSON(t, rec, 200, `{"items":[
	  {"timestamp":"2026-01-02T03:04:05Z","level":"warn","message":"infer failed: rate_limited","resource_type":"api_key","resource_id":"`+k.APIKeyHash+`","client_id":"ward-1","stream_name":"infer","status":429,"node":"box-test"},
	  {"timestamp":"2026-01-02T03:04:05Z","level":"warn","message":"infer failed: invalid_request","resource_type":"api_key","resource_id":"`+k.APIKeyHash+`","client_id":"ward-1","stream_name":"infer","status":400,"node":"box-test"},
	  {"timestamp":"2026-01-02T03:04:05Z","level":"info","message":"infer ok: 3 candidates in 0 ms","resource_type":"api_key","resource_id":"`+k.APIKeyHash+`","client_id":"ward-1","stream_name":"infer","status":200,"node":"box-test"}],
	  "count":3,"since":"2026-01-01T03:05:05Z","window_seconds":86400}`)
	if strings.Contains(rec.Body.String(), "Tea") {
		t.Error("dialog text in the logs")
	}

	wantJSON(t, e.do(adminReq("POST", "/v1/admin/system-prompt", `{"prompt":"Be brief."}`)), 200, `{"prompt":"Be brief.","version":"2","created_at":"2026-01-02T03:05:05Z"}`)
	wantJSON(t, e.do(adminReq("POST", "/v1/admin/system-prompt", `{"prompt":"Again.","version":"1"}`)), 409, errJSON("conflict", `version "1" already exists; omit version to take the next one`))

	revoked := `{"APIKeyHash":"` + k.APIKeyHash + `","ClientID":"ward-1","Status":"revoked","Scopes":["infer"],"RateLimitPerMinute":2,"CreatedAt":"2026-01-02T03:04:05Z","RevokedAt":"2026-01-02T03:05:05Z","LastUsedAt":"2026-01-02T03:04:05Z"}`
	wantJSON(t, e.do(adminReq("DELETE", "/v1/admin/keys/"+k.APIKeyHash, "")), 200, revoked)
	e.clock.Advance(time.Second)
	wantJSON(t, e.do(adminReq("DELETE", "/v1/admin/keys/"+k.APIKeyHash, "")), 200, revoked)
	wantJSON(t, e.do(inferReq(t, k.APIKey, payloadPart(simplePayload))), 401, errJSON("unauthorized", "X-API-KEY has been revoked"))
	wantJSON(t, e.do(adminReq("GET", "/v1/admin/keys", "")), 200, `{"items":[],"count":0}`)
	wantJSON(t, e.do(adminReq("GET", "/v1/admin/keys?include_revoked=true", "")), 200, `{"items":[`+strings.TrimSuffix(revoked, "}")+`,"LiveListening":true}],"count":1}`)
	wantJSON(t, e.do(adminReq("DELETE", "/v1/admin/keys/"+secret.Hash("nope"), "")), 404, errJSON("not_found", "no API key has this api_key_hash"))

	// OTP login and logout; wrong codes write nothing.
	wantJSON(t, otpSend(e), 200, `{"sent":true,"channel":"console","expires_at":"2026-01-02T03:10:06Z"}`)
	code := e.notifier.lastCode()
	size, _ := db.Size()
	for i := 1; i <= 2; i++ {
		wantJSON(t, otpVerify(e, otherCode(code, i)), 401, msgWrongCode)
	}
	if after, _ := db.Size(); after != size {
		t.Errorf("two wrong codes grew the data from %d to %d bytes", size, after)
	}
	rec = otpVerify(e, code)
	var s struct {
		SessionToken string `json:"session_token"`
	}
	decode(t, rec, &s)
	wantJSON(t, rec, 200, `{"session_token":"`+s.SessionToken+`","expires_at":"2026-01-02T15:05:06Z"}`)
	wantJSON(t, otpVerify(e, code), 401, msgWrongCode)
	if rec := e.do(sessionReq("GET", "/v1/admin/status", s.SessionToken)); rec.Code != 200 {
		t.Fatalf("session refused: %d %s", rec.Code, rec.Body)
	}
	wantJSON(t, e.do(sessionReq("DELETE", "/v1/admin/session", s.SessionToken)), 200, `{"logged_out":true}`)
	wantJSON(t, e.do(sessionReq("GET", "/v1/admin/status", s.SessionToken)), 401, errJSON("unauthorized", msgBadAdminCred))

	// TOTP enrolment is an installation secret in the data file.
	if rec := e.do(adminReq("POST", "/v1/admin/totp/enroll", "")); rec.Code != 200 {
		t.Fatalf("totp enroll: %d %s", rec.Code, rec.Body)
	}
	if _, ok, err := db.Secret(store.SecretTOTP); err != nil || !ok {
		t.Fatalf("the TOTP secret is not in the store: %v", err)
	}

	rec = e.do(adminReq("GET", "/v1/admin/backup", ""))
	if rec.Code != 200 || rec.Body.Len() == 0 || rec.Header().Get("Content-Type") != "application/octet-stream" {
		t.Errorf("backup: %d, %d bytes", rec.Code, rec.Body.Len())
	}
	back := filepath.Join(t.TempDir(), "back.db")
	if err := writeFile(back, rec.Body.Bytes()); err != nil {
		t.Fatal(err)
	}
	db2, err := bolt.Open(back, bolt.Options{})
	if err != nil {
		t.Fatalf("the backup does not open: %v", err)
	}
	defer db2.Close()
	if got, err := db2.GetKey(k.APIKeyHash); err != nil || got.Status != store.StatusRevoked {
		t.Errorf("backup key: %+v %v", got, err)
	}
}

func writeFile(path string, data []byte) error { return os.WriteFile(path, data, 0o600) }

// TestBoltFeedbackAndMemory runs feedback, the stats it feeds, the memory
// and a user's deletion against the real store.
func TestBoltFeedbackAndMemory(t *testing.T) {
	e := newEnv(t)
	db := e.st
	rec := e.do(adminReq("POST", "/v1/admin/keys", `{"client_id":"ward-2"}`))
	var k struct {
		APIKey string `json:"api_key"`
	}
	decode(t, rec, &k)
	id := e.infer(k.APIKey, `{"remember":true,"user_id":"sam","messages":[{"role":"speaker","content":"MARKER-TEA?"}]}`)
	wantJSON(t, e.do(feedbackReq(k.APIKey, `{"inference_id":"`+id+`","chosen_rank":1}`)), 200, fbOK(id, "spoken", 6, false, true))
	e.clock.Advance(11 * time.Minute)
	wantJSON(t, e.do(feedbackReq(k.APIKey, `{"inference_id":"`+id+`","none_fit":true}`)), 409,
		errJSON("conflict", "an outcome was reported for this inference more than 10 minutes ago; it can no longer be changed"))

	var st struct {
		AcceptanceRate *float64 `json:"acceptance_rate"`
	}
	decode(t, e.do(adminReq("GET", "/v1/admin/stats", "")), &st)
	if st.AcceptanceRate == nil || *st.AcceptanceRate != 1 {
		t.Errorf("acceptance_rate = %v", st.AcceptanceRate)
	}
	pairs, _, err := db.MemoryPairs(e.memSubject(k.APIKey, "sam"))
	if err != nil || len(pairs) != 1 || pairs[0].Partner != "MARKER-TEA?" || pairs[0].Reply != "reply 1" {
		t.Fatalf("pairs: %+v %v", pairs, err)
	}
	rec = e.do(adminReq("DELETE", "/v1/admin/users/sam", ""))
	var d userDeletionJSON
	decode(t, rec, &d)
	if rec.Code != 200 || d.Pairs != 1 || d.Outcomes != 1 || !d.KeyDestroyed || d.ScrubbedPages == 0 {
		t.Errorf("deletion: %d %s", rec.Code, rec.Body)
	}
	b, err := os.ReadFile(db.Path())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "MARKER") {
		t.Error("the marker is in the data file")
	}
	wantJSON(t, e.do(feedbackReq(k.APIKey, `{"inference_id":"`+id+`","chosen_rank":1}`)), 404,
		errJSON("not_found", "no inference with this inference_id is open for feedback from this API key (unknown, older than 24 h, or made with another key)"))
}
