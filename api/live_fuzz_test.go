package api

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzLiveMessage feeds network bytes to the parsers of a live session's
// text messages: the first message (the payload) and the controls after
// it. Neither may panic, and every refusal is a 400 that
// never quotes the message.
func FuzzLiveMessage(f *testing.F) {
	for _, seed := range []string{
		livePayload,
		`{"messages":[{"role":"speaker","content":"Tea?","audio":true}],"dialog_id":"d","remember":true,"user_id":"u"}`,
		`{"messages":[{"role":"speaker","content":"x"}],"steer":{"mode":"replace","text":"no"}}`,
		`{"type":"payload","payload":{"messages":[{"role":"speaker","content":"a"}]}}`,
		`{"type":"pause"}`, `{"type":"resume"}`, `{"type":"end"}`, `{"type":"ping"}`,
		`{"type":"captions","enabled":false}`, `{"type":"captions"}`, `{"type":"captions","enabled":"no"}`,
		`{"type":"payload"}`, `{"type":"payload","payload":null}`, `{"type":"other"}`, `{}`,
		`{"type":"pause"} {"type":"end"}`, `[1,2]`, `"secret words"`, ``, "\xff\xfe", `{"type":`,
	} {
		f.Add([]byte(seed))
	}
	lim := DefaultLimits()
	f.Fuzz(func(t *testing.T, data []byte) {
		check := func(what string, err error) {
			if err == nil {
				return
			}
			ae := toAPIError(err)
			// One code for a malformed message (a steer object too).
			if ae.Status() != 400 || ae.Code != CodeInvalidRequest {
				t.Fatalf("%s: %s (%d) for %q", what, ae.Code, ae.Status(), data)
			}
			// A refusal names fields, never the text it was sent.
			if len(data) >= 8 && utf8.Valid(data) && strings.Contains(ae.Message, string(data)) {
				t.Fatalf("%s: the message quotes the input: %q", what, ae.Message)
			}
		}
		check("payload", parseLivePayload(data, lim))
		m, err := parseLiveControl(data)
		check("control", err)
		if err == nil && m.Type == "payload" {
			check("control payload", parseLivePayload(m.Payload, lim))
		}
	})
}
