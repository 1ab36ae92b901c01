package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"mime"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"

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
