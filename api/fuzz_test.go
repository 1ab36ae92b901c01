package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"mime"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/labstack/echo/v4"
	"github.com/replyd/replyd/engine"
)

// FuzzParsePayload checks that the payload parser never panics, that every
// rejection is a 400 invalid_request whose message quotes no input, and that
// every accepted payload satisfies the documented invariants.
func FuzzParsePayload(f *testing.F) {
	for _, s := range []string{
		simplePayload,
		`{"messages":[{"role":"disabled_person","content":"hi"},{"role":"speaker","audio":true}],"options":{"max_candidates":8,"temperature":2}}`,
		`{"messages":[{"role":"speaker","audio":true},{"role":"speaker","audio":true}]}`,
		`{"messages":[]}`, `{"messages":null}`, `{}`, `[]`, `null`, `"x"`, ``, `{"messages":[{"role":"x"}]}`,
		`{"messages":[{"role":"speaker"}],"time_window_sec":1e30}`, `{"messages":[{"role":"speaker"}],"options":{"temperature":1e400}}`,
		"\xef\xbb\xbf" + simplePayload, `{"messages":[{"role":"speaker","content":"\ud800"}]}`,
		// Steering: a malformed steer is invalid_request like the rest.
		`{"messages":[{"role":"speaker","content":"x"}],"steer":{"words":["a"]},"parent_inference_id":"inf_AAAAAAAAAAAAAAAAAAAAAA"}`,
		`{"messages":[{"role":"speaker","content":"x"}],"steer":{}}`, `{"messages":[{"role":"speaker"}],"parent_inference_id":"x"}`,
		`{"messages":[{"role":"speaker","content":"x"}],"steer":{"replace":{"text":"a b","word":5}},"parent_inference_id":"inf_AAAAAAAAAAAAAAAAAAAAAA"}`,
	} {
		f.Add([]byte(s))
	}
	lim := DefaultLimits()
	lim.MaxMessages = 4
	lim.MaxContentChars = 16
	lim.MaxProfileChars = 16
	lim.MaxIDChars = 8
	f.Fuzz(func(t *testing.T, data []byte) {
		req, audioIdx, err := parsePayload(data, lim)
		if err != nil {
			var ae *Error
			if !errors.As(err, &ae) || ae.Code != CodeInvalidRequest || ae.Status() != 400 {
				t.Fatalf("error %v is not a 400 invalid_request", err)
			}
			if ae.Message == "" || !utf8.ValidString(ae.Message) {
				t.Fatalf("bad message %q", ae.Message)
			}
			return
		}
		if n := len(req.Messages); n < 1 || n > lim.MaxMessages {
			t.Fatalf("%d messages accepted", n)
		}
		marked := -1
		for i, m := range req.Messages {
			if m.Role != engine.RoleSpeaker && m.Role != engine.RoleDisabledPerson {
				t.Fatalf("role %q accepted", m.Role)
			}
			if utf8.RuneCountInString(m.Content) > lim.MaxContentChars {
				t.Fatal("content over the limit accepted")
			}
			if m.Audio {
				if marked >= 0 || m.Role != engine.RoleSpeaker {
					t.Fatal("invalid audio marking accepted")
				}
				marked = i
			}
		}
		if marked != audioIdx {
			t.Fatalf("audio index %d, want %d", audioIdx, marked)
		}
		if req.MaxCandidates < 1 || req.MaxCandidates > lim.MaxCandidates {
			t.Fatalf("max_candidates %d accepted", req.MaxCandidates)
		}
		if !(req.Temperature >= 0 && req.Temperature <= lim.MaxTemperature) {
			t.Fatalf("temperature %v accepted", req.Temperature)
		}
		if req.TimeWindowSec < 0 || req.Audio != nil || req.SystemPrompt != "" {
			t.Fatalf("unexpected fields %+v", req)
		}
	})
}

// FuzzInferMultipart sends arbitrary bodies with a multipart content type to
// /v1/infer: the server must answer with a JSON status, never panic, and log
// exactly one entry per call.
func FuzzInferMultipart(f *testing.F) {
	body, ct := multipartBody(f, payloadPart(simplePayload), audioPart([]byte("RIFF")))
	_, params, err := mime.ParseMediaType(ct)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(body.Bytes(), params["boundary"])
	f.Add([]byte("--b\r\nContent-Disposition: form-data; name=\"payload\"\r\n\r\n{}\r\n--b--\r\n"), "b")
	e := newEnv(f)
	e.addKey("valid", 0)
	f.Fuzz(func(t *testing.T, data []byte, boundary string) {
		before := e.st.logCount()
		req := httptest.NewRequest("POST", "/v1/infer", bytes.NewReader(data))
		req.Header.Set("Content-Type", "multipart/form-data; boundary=\""+boundary+"\"")
		req.Header.Set(HeaderAPIKey, "valid")
		rec := e.do(req)
		switch rec.Code {
		case 200, 400, 413, 415:
		default:
			t.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
		if n := e.st.logCount() - before; n != 1 {
			t.Fatalf("%d log entries for one call", n)
		}
	})
}

// FuzzFeedback sends arbitrary bodies to /v1/feedback for a real
// inference: the server answers 200, 400, 409 or 413 with a JSON body,
// never panics, and a message never quotes the body.
func FuzzFeedback(f *testing.F) {
	e := newEnv(f)
	e.addKey("valid", 0)
	id := e.infer("valid", simplePayload)
	for _, s := range []string{
		`{"inference_id":"` + id + `","chosen_rank":1}`,
		`{"inference_id":"` + id + `","chosen_rank":2,"spoken_text":"reply two"}`,
		`{"inference_id":"` + id + `","none_fit":true,"time_to_choice_ms":12}`,
		`{"inference_id":"` + id + `","spoken_text":"\ud800"}`,
		`{"inference_id":"` + id + `","chosen_rank":9223372036854775807}`,
		`{}`, `[]`, `null`, ``, `{"inference_id":7}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		rec := e.do(feedbackReq("valid", string(data)))
		switch rec.Code {
		case 200, 400, 404, 409, 413:
		default:
			t.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
		var body map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
			t.Fatalf("not JSON: %s", rec.Body)
		}
		if rec.Code != 200 {
			if msg, _ := body["message"].(string); len(data) > 8 && strings.Contains(msg, string(data)) {
				t.Fatalf("message quotes the body: %s", msg)
			}
		}
	})
}

// FuzzAdminJSON sends arbitrary bodies to the admin endpoints that read
// JSON, from arbitrary client addresses: every answer is a JSON error or
// success with a documented status, never a 500 or a panic.
func FuzzAdminJSON(f *testing.F) {
	for _, s := range []string{`{"client_id":"tablet"}`, `{"prompt":"Be brief.","version":"9"}`, `{"code":"12345678"}`, `{"code":"123456"}`,
		`{"scopes":["infer"],"rate_limit_per_minute":0}`, `{}`, ``, `[`, `{"code":123}`, "\x00"} {
		f.Add([]byte(s), uint8(0), "10.0.0.1")
		f.Add([]byte(s), uint8(2), "2001:db8::1")
	}
	e := newEnv(f)
	paths := []string{"/v1/admin/keys", "/v1/admin/system-prompt", "/v1/admin/otp/verify"}
	f.Fuzz(func(t *testing.T, body []byte, route uint8, addr string) {
		path := paths[int(route)%len(paths)]
		req := httptest.NewRequest("POST", path, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if path != "/v1/admin/otp/verify" {
			req.Header.Set(HeaderAdminKey, testAdminKey)
		}
		req.RemoteAddr = net.JoinHostPort(addr, "4000")
		rec := e.do(req)
		switch rec.Code {
		case 200, 400, 401, 409, 413, 429:
		default:
			t.Fatalf("POST %s: status %d: %s", path, rec.Code, rec.Body)
		}
		var eb errorBody
		if rec.Code != 200 && (json.Unmarshal(rec.Body.Bytes(), &eb) != nil || eb.Error == "" || eb.Message == "") {
			t.Fatalf("POST %s: %d without an error body: %s", path, rec.Code, rec.Body)
		}
	})
}

// FuzzCredentials sends arbitrary credential headers: an API key to
// /v1/infer, an admin key or session to /v1/admin/status. The answer is 200
// (only for the real ones), 401 or 429, never anything else.
func FuzzCredentials(f *testing.F) {
	f.Add("valid", "", "", "10.0.0.1")
	f.Add("", testAdminKey, "", "10.0.0.2")
	f.Add("x", "y", "z", "::1")
	f.Add(strings.Repeat("k", 600), "\x00", "\xff", "1.2.3.4")
	e := newEnv(f)
	e.addKey("valid", 0)
	// Verified once, the admin key is served from any address.
	if rec := e.do(adminReq("GET", "/v1/admin/status", "")); rec.Code != 200 {
		f.Fatalf("admin key: %d", rec.Code)
	}
	f.Fuzz(func(t *testing.T, apiKey, adminKey, session, addr string) {
		req := inferReq(t, "", payloadPart(simplePayload))
		req.Header.Set(HeaderAPIKey, apiKey)
		req.RemoteAddr = net.JoinHostPort(addr, "4000")
		rec := e.do(req)
		want401 := apiKey != "valid"
		if (want401 && rec.Code != 401 && rec.Code != 429) || (!want401 && rec.Code != 200) {
			t.Fatalf("X-API-KEY %q: %d %s", apiKey, rec.Code, rec.Body)
		}
		req = httptest.NewRequest("GET", "/v1/admin/status", nil)
		req.Header.Set(HeaderAdminKey, adminKey)
		req.Header.Set(HeaderAdminSession, session)
		req.RemoteAddr = net.JoinHostPort(addr, "4000")
		rec = e.do(req)
		switch {
		case adminKey == testAdminKey && rec.Code == 200:
		case adminKey != testAdminKey && (rec.Code == 401 || rec.Code == 429):
		default:
			t.Fatalf("X-ADMIN-KEY %q, X-ADMIN-SESSION %q: %d %s", adminKey, session, rec.Code, rec.Body)
		}
	})
}

// FuzzClientAddr feeds arbitrary peer addresses, X-Forwarded-For values and
// trusted-proxy lists: ClientAddr never panics, always answers a canonical
// address or "unknown", and believes X-Forwarded-For only from a trusted
// peer.
func FuzzClientAddr(f *testing.F) {
	f.Add("10.0.0.5:1234", "192.168.1.20", "10.0.0.5")
	f.Add("[::ffff:10.0.0.5]:1", "6.6.6.6, 192.168.1.20", "10.0.0.0/8")
	f.Add("@", "garbage", "")
	f.Add("[fe80::1%eth0]:80", "[2001:db8::1]", "fe80::/10, 2001:db8::/32")
	f.Fuzz(func(t *testing.T, peer, xff, trusted string) {
		nets, err := ParseTrustedProxies(trusted)
		if err != nil {
			nets = nil
		}
		e := echo.New()
		e.IPExtractor = ipExtractor(nets)
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.RemoteAddr = peer
		req.Header.Set("X-Forwarded-For", xff)
		got := ClientAddr(e.NewContext(req, httptest.NewRecorder()))
		if got != "unknown" {
			a, err := netip.ParseAddr(got)
			if err != nil || a.String() != got || a.Is4In6() || a.Zone() != "" {
				t.Fatalf("ClientAddr = %q, not a canonical address", got)
			}
		}
		if len(nets) == 0 {
			// No trusted proxy: the header changes nothing.
			req.Header.Del("X-Forwarded-For")
			if without := ClientAddr(e.NewContext(req, httptest.NewRecorder())); got != without {
				t.Fatalf("untrusted peer %q: X-Forwarded-For %q made ClientAddr %q instead of %q", peer, xff, got, without)
			}
		}
	})
}
