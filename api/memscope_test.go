package api

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/replyd/replyd/internal/secret"
)

// TestMemoryScopedToKeys: a user's memory belongs to the keys allowed to
// use it. Key B naming key A's user_id reaches a memory of its own (none at
// first, no error that reveals A's), its feedback never adds to A's memory;
// once an admin links B to A's user (Users view, or a pairing), B reads and
// writes A's memory; unlinking ends it.
func TestMemoryScopedToKeys(t *testing.T) {
	e := newEnvWithKeys(t, 60, "tablet-a", "tablet-b")
	remember := func(key, partner string) string {
		t.Helper()
		return e.infer(key, `{"remember":true,"user_id":"bob","messages":[{"role":"speaker","content":"`+partner+`"}]}`)
	}
	pairsOf := func(subject string) []string {
		t.Helper()
		ps, _, err := e.st.MemoryPairs(subject)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, p := range ps {
			out = append(out, p.Partner+"→"+p.Reply)
		}
		return out
	}
	a := remember("tablet-a", "A-TEA?")
	wantJSON(t, e.do(feedbackReq("tablet-a", `{"inference_id":"`+a+`","chosen_rank":1}`)), 200, fbOK(a, "spoken", 6, false, true))
	subjA := e.memSubject("tablet-a", "bob")
	if got := e.inf.last().MemoryUser; got != subjA {
		t.Fatalf("A's MemoryUser = %q, want %q", got, subjA)
	}

	// B names the same user_id: another memory, empty, and the answer is
	// an ordinary one.
	b := remember("tablet-b", "B-WALK?")
	subjB := e.inf.last().MemoryUser
	if subjB == subjA || subjB != e.memSubject("tablet-b", "bob") {
		t.Fatalf("B's MemoryUser = %q (A's is %q)", subjB, subjA)
	}
	if got := pairsOf(subjB); len(got) != 0 {
		t.Errorf("B reads pairs %v", got)
	}
	wantJSON(t, e.do(feedbackReq("tablet-b", `{"inference_id":"`+b+`","chosen_rank":1}`)), 200, fbOK(b, "spoken", 6, false, true))
	if got := pairsOf(subjA); len(got) != 1 || got[0] != "A-TEA?→reply 1" {
		t.Errorf("A's memory after B's feedback: %v", got)
	}
	// B's feedback on A's inference is refused like an unknown one.
	wantJSON(t, e.do(feedbackReq("tablet-b", `{"inference_id":"`+a+`","chosen_rank":2}`)), 404,
		errJSON("not_found", "no inference with this inference_id is open for feedback from this API key (unknown, older than 24 h, or made with another key)"))

	// The admin links B to A's user: B reads and writes A's memory.
	pa := userLabel(subjA)
	hb := secret.Hash("tablet-b")
	rec := e.do(adminReq(http.MethodPost, "/v1/admin/users/"+pa+"/keys", `{"api_key_hash":"`+hb+`"}`))
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), hb) || !strings.Contains(rec.Body.String(), secret.Hash("tablet-a")) {
		t.Fatalf("link: %d %s", rec.Code, rec.Body)
	}
	c := remember("tablet-b", "B-LINKED?")
	if got := e.inf.last().MemoryUser; got != subjA {
		t.Fatalf("linked B's MemoryUser = %q, want A's %q", got, subjA)
	}
	wantJSON(t, e.do(feedbackReq("tablet-b", `{"inference_id":"`+c+`","chosen_rank":1}`)), 200, fbOK(c, "spoken", 6, false, true))
	if got := pairsOf(subjA); len(got) != 2 || got[1] != "B-LINKED?→reply 1" {
		t.Errorf("A's memory after linked B's feedback: %v", got)
	}
	// The admin log names the link, not the user_id.
	if logs := e.do(adminReq("GET", "/v1/admin/logs?stream=admin", "")).Body.String(); !strings.Contains(logs, "linked API key "+hb[:12]+" to the memory of user "+pa) || strings.Contains(logs, "bob") {
		t.Errorf("admin log: %s", logs)
	}

	// Errors: a user_id kept by two keys is ambiguous; unknown key and
	// user; a malformed hash.
	wantJSON(t, e.do(adminReq(http.MethodPost, "/v1/admin/users/bob/keys", `{"api_key_hash":"`+hb+`"}`)), 409,
		errJSON("conflict", "this user_id has 2 memories, one for each tablet that made one; name one by its pseudonym from GET /v1/admin/users"))
	wantJSON(t, e.do(adminReq(http.MethodPost, "/v1/admin/users/"+pa+"/keys", `{"api_key_hash":"`+secret.Hash("nobody")+`"}`)), 404,
		errJSON("not_found", "no API key has this api_key_hash (or the user was deleted meanwhile)"))
	wantJSON(t, e.do(adminReq(http.MethodPost, "/v1/admin/users/p_0000000000000000/keys", `{"api_key_hash":"`+hb+`"}`)), 404,
		errJSON("not_found", "no remembered replies are kept for this user"))
	wantJSON(t, e.do(adminReq(http.MethodPost, "/v1/admin/users/"+pa+"/keys", `{"api_key_hash":"x"}`)), 400,
		errJSON("invalid_request", "api_key_hash must be 64 lowercase hex characters: the api_key_hash of a key from GET /v1/admin/keys"))

	// Unlinking: B is back on its own memory.
	if rec := e.do(adminReq(http.MethodDelete, "/v1/admin/users/"+pa+"/keys/"+hb, "")); rec.Code != 200 || strings.Contains(rec.Body.String(), hb) {
		t.Fatalf("unlink: %d %s", rec.Code, rec.Body)
	}
	wantJSON(t, e.do(adminReq(http.MethodDelete, "/v1/admin/users/"+pa+"/keys/"+hb, "")), 404,
		errJSON("not_found", "this API key is not linked to this user's memory"))
	remember("tablet-b", "B-AGAIN?")
	if got := e.inf.last().MemoryUser; got != subjB {
		t.Errorf("unlinked B's MemoryUser = %q, want its own %q", got, subjB)
	}

	// At pairing time: the new tablet is linked to A's user.
	p := e.mustPairing(`{"client_id":"bob's phone","memory_user":"` + pa + `"}`)
	if p.MemoryUser != pa {
		t.Errorf("pairing memory_user = %q", p.MemoryUser)
	}
	rec = e.do(pairReq(`{"code":"`+p.PairingCode+`"}`, ""))
	var k keyCreateResponse
	decode(t, rec, &k)
	remember(k.APIKey, "PHONE?")
	if got := e.inf.last().MemoryUser; got != subjA {
		t.Errorf("the paired phone's MemoryUser = %q, want A's %q", got, subjA)
	}
	wantJSON(t, e.do(adminReq(http.MethodPost, "/v1/admin/pairings", `{"memory_user":"bob"}`)), 400,
		errJSON("invalid_request", "memory_user must be a user's pseudonym (p_…) from GET /v1/admin/users"))

	// Deleting the user by user_id removes every key's memory of it.
	rec = e.do(adminReq(http.MethodDelete, "/v1/admin/users/bob", ""))
	if rec.Code != 200 {
		t.Fatalf("delete: %d %s", rec.Code, rec.Body)
	}
	for _, s := range []string{subjA, subjB} {
		if got := pairsOf(s); len(got) != 0 {
			t.Errorf("pairs left after deleting the user: %v", got)
		}
	}
	if body := e.do(adminReq("GET", "/v1/admin/users", "")).Body.String(); body != `{"items":[],"count":0}`+"\n" {
		t.Errorf("users after deletion: %s", body)
	}
}

// TestTOTPEnrollNeedsMoreThanASession: a session alone cannot enroll or
// replace the authenticator; with a code sent through the channel to the
// same address it can, a wrong code is 403 and counts as a wrong code, the
// admin key alone can, and the channel is told of each enrolment.
func TestTOTPEnrollNeedsMoreThanASession(t *testing.T) {
	e := newEnv(t)
	const addr = "10.9.0.1"
	otpSend(e, addr)
	login := otpVerify(e, e.notifier.lastCode(), addr)
	var v otpVerifyResponse
	decode(t, login, &v)
	enroll := func(body string) *httptest.ResponseRecorder {
		req := sessionReq(http.MethodPost, "/v1/admin/totp/enroll", v.SessionToken)
		if body != "" {
			req = httptest.NewRequest(http.MethodPost, "/v1/admin/totp/enroll", strings.NewReader(body))
			req.Header.Set(HeaderAdminSession, v.SessionToken)
			req.Header.Set("Content-Type", "application/json")
		}
		req.RemoteAddr = addr + ":5000"
		return e.do(req)
	}
	wantJSON(t, enroll(""), 403, errJSON("forbidden", `enrolling or replacing the authenticator app needs the admin key, or a code sent through the OTP channel: call POST /v1/admin/otp/send and repeat this request with {"code": the 8 digits}`))
	if _, ok, _ := e.st.Secret("totp"); ok {
		t.Fatal("a session alone enrolled TOTP")
	}
	wantJSON(t, enroll(`{"code":"123456"}`), 400, errJSON("invalid_request", "code must be the 8 digits of a code sent through the OTP channel"))
	e.clock.Advance(time.Minute)
	otpSend(e, addr)
	code := e.notifier.lastCode()
	wantJSON(t, enroll(`{"code":"`+otherCode(code, 1)+`"}`), 403, errJSON("forbidden", wrongCodeMessage))
	texts := len(e.notifier.textsCopy())
	if rec := enroll(`{"code":"` + code + `"}`); rec.Code != 200 || !strings.Contains(rec.Body.String(), `"otpauth_url"`) {
		t.Fatalf("session and a sent code: %d %s", rec.Code, rec.Body)
	}
	// The code was spent.
	wantJSON(t, enroll(`{"code":"`+code+`"}`), 403, errJSON("forbidden", wrongCodeMessage))
	// The admin key alone may replace it; the channel hears of both.
	if rec := e.do(adminReq(http.MethodPost, "/v1/admin/totp/enroll", "")); rec.Code != 200 {
		t.Fatalf("admin key: %d %s", rec.Code, rec.Body)
	}
	waitFor(t, func() bool { return len(e.notifier.textsCopy()) >= texts+2 })
	got := e.notifier.textsCopy()[texts:]
	if !strings.Contains(got[0], "authenticator app was enrolled") || !strings.Contains(got[1], "authenticator app was replaced") {
		t.Errorf("channel messages: %q", got)
	}
	for _, c := range e.notifier.codesCopy()[len(e.notifier.codesCopy())-2:] {
		if c != "" {
			t.Errorf("a notice carried a code %q", c)
		}
	}
	// With the totp channel there is no code to send: the admin key only.
	e2 := newEnv(t, func(o *Options) { o.TOTPOnly = true; o.Notifier = nil })
	if err := e2.st.CreateSession(secret.Hash("a-session"), e2.clock.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	wantJSON(t, e2.do(sessionReq(http.MethodPost, "/v1/admin/totp/enroll", "a-session")), 403,
		errJSON("forbidden", "enrolling or replacing the authenticator app needs the admin key (X-ADMIN-KEY): no OTP channel is configured to send a code"))
}
