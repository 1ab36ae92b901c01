package api

import (
	"context"
	"strings"
	"testing"

	"github.com/replyd/replyd/engine"
)

// TestInferLanguageFields: reply_language reaches the engine beside
// language; an unknown or malformed code in either is a 400 naming the
// field (never quoting the value); "auto" in reply_language means follow.
func TestInferLanguageFields(t *testing.T) {
	e := newEnv(t)
	e.addKey("valid", 60)
	for _, tc := range []struct {
		payload       string
		lang, replyTo string
	}{
		{`{"messages":[{"role":"speaker","content":"Hallo"}],"language":"DE","reply_language":"uk"}`, "de", "uk"},
		{`{"messages":[{"role":"speaker","content":"Hallo"}],"language":"auto","reply_language":"auto"}`, "auto", ""},
		{`{"messages":[{"role":"speaker","content":"Hallo"}],"reply_language":"pt-br"}`, "", "pt-BR"},
		{`{"messages":[{"role":"speaker","content":"Hallo"}]}`, "", ""},
	} {
		if rec := e.do(inferReq(t, "valid", payloadPart(tc.payload))); rec.Code != 200 {
			t.Fatalf("%s: status %d: %s", tc.payload, rec.Code, rec.Body)
		}
		if p := e.inf.last().Profile; p.Language != tc.lang || p.ReplyLanguage != tc.replyTo {
			t.Errorf("%s: language %q, reply_language %q; want %q, %q", tc.payload, p.Language, p.ReplyLanguage, tc.lang, tc.replyTo)
		}
	}
	for _, tc := range []struct{ payload, msg string }{
		{`{"messages":[{"role":"speaker"}],"reply_language":"xx"}`, "reply_language must be a BCP 47 language tag such as en, de or pt-BR (or auto)"},
		{`{"messages":[{"role":"speaker"}],"reply_language":"German"}`, "reply_language must be a BCP 47 language tag such as en, de or pt-BR (or auto)"},
		{`{"messages":[{"role":"speaker"}],"language":"zz"}`, "language must be a BCP 47 language tag such as en, de or pt-BR (or auto)"},
		{`{"messages":[{"role":"speaker"}],"reply_language":7}`, "reply_language has the wrong type: expected a string"},
	} {
		wantJSON(t, e.do(inferReq(t, "valid", payloadPart(tc.payload))), 400, errJSON("invalid_request", tc.msg))
	}
}

// TestInferReportsTranscriptLanguage: the answer and the "transcript" event
// carry the language the recording was transcribed in and the warning
// when it is not the one asked for; each candidate says its language.
func TestInferReportsTranscriptLanguage(t *testing.T) {
	e := newEnv(t)
	e.addKey("valid", 60)
	const warning = "the speech-to-text model is English-only: the recording was transcribed as English"
	e.inf.fn = func(ctx context.Context, req engine.Request) (engine.Result, error) {
		h := engine.Heard{Transcript: "Guten Morgen", Language: "en", Warning: warning}
		if req.OnTranscript != nil {
			req.OnTranscript(h)
		}
		return engine.Result{HasTranscript: true, Transcript: h.Transcript, TranscriptLanguage: h.Language, TranscriptWarning: h.Warning,
			Candidates: []engine.Candidate{{Text: "Morgen!", Rank: 1, Length: 2, Language: req.Profile.ReplyLanguageFor(h.Language)}}}, nil
	}
	payload := payloadPart(`{"language":"de","reply_language":"de","messages":[{"role":"speaker","audio":true}]}`)
	const answer = `{"transcript":"Guten Morgen","transcript_language":"en","transcript_warning":"` + warning + `","no_speech":false,
	  "response":["Morgen!"],"candidates":[{"text":"Morgen!","rank":1,"length":2,"language":"de"}],
	  "timings_ms":{"decode":0,"stt":0,"prompt":0,"generation":0,"queue":0,"total":0},"inference_id":"inf_AAAAAAAAAAAAAAAAAAAAAQ"}`
	wantJSON(t, e.do(inferReq(t, "valid", payload, audioPart([]byte("RIFF")))), 200, answer)

	e = newEnv(t)
	e.addKey("valid", 60)
	e.inf.fn = func(ctx context.Context, req engine.Request) (engine.Result, error) {
		req.OnTranscript(engine.Heard{Transcript: "Guten Morgen", Language: "de"})
		return engine.Result{HasTranscript: true, Transcript: "Guten Morgen", TranscriptLanguage: "de",
			Candidates: []engine.Candidate{{Text: "Morgen!", Rank: 1, Length: 2, Language: "de"}}}, nil
	}
	rec := e.do(streamReq(t, "valid", payloadPart(`{"messages":[{"role":"speaker","audio":true}]}`), audioPart([]byte("RIFF"))))
	evs := readEvents(t, rec.Body.String())
	if len(evs) != 2 || evs[0].name != "transcript" || evs[0].data != `{"transcript":"Guten Morgen","transcript_language":"de"}` {
		t.Fatalf("events %+v", evs)
	}
}

// TestStatusShowsEnglishOnlyWarning: the admin status carries the
// speech-to-text engine's English-only flag, its count of requests for
// other languages and its warning, as the engine reports them.
func TestStatusShowsEnglishOnlyWarning(t *testing.T) {
	e := newEnv(t)
	e.health.mu.Lock()
	e.health.engines[1] = engine.EngineStatus{Name: "stt", Ready: true, EnglishOnly: true, NonEnglishRequests: 2, Warning: "English-only: 2 requests"}
	e.health.mu.Unlock()
	body := e.do(adminReq("GET", "/v1/admin/status", "")).Body.String()
	if !strings.Contains(body, `"english_only":true,"non_english_requests":2,"warning":"English-only: 2 requests"}`) {
		t.Errorf("status: %s", body)
	}
}
