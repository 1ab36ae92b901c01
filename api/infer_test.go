package api

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/replyd/replyd/engine"
	"github.com/replyd/replyd/internal/secret"
	"github.com/replyd/replyd/store"
)

const okTextOnly = `{"response":["reply 1","reply 2","reply 3"],
 "candidates":[{"text":"reply 1","rank":1,"length":2,"language":"en"},{"text":"reply 2","rank":2,"length":2,"language":"en"},{"text":"reply 3","rank":3,"length":2,"language":"en"}],
 "timings_ms":{"decode":0,"stt":0,"prompt":5,"generation":20,"queue":1,"total":0},"inference_id":"inf_AAAAAAAAAAAAAAAAAAAAAQ"}`

const okAudio = `{"transcript":"transcript of 5 bytes","no_speech":false,"response":["reply 1","reply 2","reply 3"],
 "candidates":[{"text":"reply 1","rank":1,"length":2,"language":"en"},{"text":"reply 2","rank":2,"length":2,"language":"en"},{"text":"reply 3","rank":3,"length":2,"language":"en"}],
 "timings_ms":{"decode":3,"stt":40,"prompt":5,"generation":20,"queue":1,"total":0},"inference_id":"inf_AAAAAAAAAAAAAAAAAAAAAQ"}`

const simplePayload = `{"messages":[{"role":"speaker","content":"Tea?"}]}`

func TestInferScenarios(t *testing.T) {
	long := strings.Repeat("a", DefaultLimits().MaxContentChars+1)
	many := "[" + strings.Repeat(`{"role":"speaker","content":"x"},`, DefaultLimits().MaxMessages) + `{"role":"speaker"}]`
	wav := []byte("RIFF!")

	tests := []struct {
		name   string
		key    string // "" no header; "valid" the test key; anything else sent as is
		parts  []part
		status int
		body   string
	}{
		{"payload file part with json type", "valid", []part{payloadPart(simplePayload)}, 200, okTextOnly},
		{"payload plain field without type", "valid", []part{{name: "payload", data: []byte(simplePayload)}}, 200, okTextOnly},
		{"payload plain field with json type", "valid", []part{{name: "payload", ctype: "application/json", data: []byte(simplePayload)}}, 200, okTextOnly},
		{"payload file part without type", "valid", []part{{name: "payload", filename: "p.json", data: []byte(simplePayload)}}, 200, okTextOnly},
		{"payload with text/plain type", "valid", []part{{name: "payload", ctype: "text/plain", data: []byte(simplePayload)}}, 200, okTextOnly},
		{"unknown fields ignored", "valid", []part{payloadPart(`{"messages":[{"role":"speaker","content":"Tea?","mood":"x"}],"future":{"a":1}}`)}, 200, okTextOnly},
		{"other parts ignored", "valid", []part{{name: "extra", data: []byte("x")}, payloadPart(simplePayload)}, 200, okTextOnly},
		{"marked message with audio", "valid", []part{payloadPart(`{"messages":[{"role":"disabled_person","content":"hi"},{"role":"speaker","audio":true}]}`), audioPart(wav)}, 200, okAudio},
		{"audio without marked message", "valid", []part{payloadPart(simplePayload), audioPart(wav)}, 200, okAudio},

		{"no key", "", []part{payloadPart(simplePayload)}, 401, errJSON("unauthorized", "the X-API-KEY header is required")},
		{"unknown key", "nope", []part{payloadPart(simplePayload)}, 401, errJSON("unauthorized", "X-API-KEY is not a valid API key")},
		{"key without infer scope", "noscope", []part{payloadPart(simplePayload)}, 403, errJSON("forbidden", `this API key lacks the scope "infer"`)},

		{"missing payload part", "valid", []part{audioPart(wav)}, 400, errJSON("invalid_request", "payload: the multipart part is required")},
		{"payload twice", "valid", []part{payloadPart(simplePayload), payloadPart(simplePayload)}, 400, errJSON("invalid_request", "payload: the part was sent twice")},
		{"audio twice", "valid", []part{payloadPart(simplePayload), audioPart(wav), audioPart(wav)}, 400, errJSON("invalid_request", "audio: only one audio part is allowed")},
		{"empty payload", "valid", []part{payloadPart("  ")}, 400, errJSON("invalid_request", "payload is empty; it must be a JSON object with messages")},
		{"payload not json", "valid", []part{payloadPart(`{"messages":`)}, 400, errJSON("invalid_request", "payload is not valid JSON (unexpected end)")},
		{"payload syntax error", "valid", []part{payloadPart(`{"messages" 1}`)}, 400, errJSON("invalid_request", "payload is not valid JSON (syntax error at byte 13)")},
		{"payload is an array", "valid", []part{payloadPart(`[1]`)}, 400, errJSON("invalid_request", "payload must be a JSON object")},
		{"two json values", "valid", []part{payloadPart(simplePayload + "{}")}, 400, errJSON("invalid_request", "payload must hold exactly one JSON object")},
		{"messages missing", "valid", []part{payloadPart(`{"language":"en"}`)}, 400, errJSON("invalid_request", "messages is required")},
		{"messages null", "valid", []part{payloadPart(`{"messages":null}`)}, 400, errJSON("invalid_request", "messages is required")},
		{"messages empty", "valid", []part{payloadPart(`{"messages":[]}`)}, 400, errJSON("invalid_request", "messages must not be empty")},
		{"messages wrong type", "valid", []part{payloadPart(`{"messages":"hi"}`)}, 400, errJSON("invalid_request", "messages has the wrong type: expected an array")},
		{"too many messages", "valid", []part{payloadPart(`{"messages":` + many + `}`)}, 400, errJSON("invalid_request", "messages has 201 entries; the limit is 200")},
		{"role missing", "valid", []part{payloadPart(`{"messages":[{"content":"x"}]}`)}, 400, errJSON("invalid_request", "messages[0].role is required (speaker or disabled_person)")},
		{"role unknown", "valid", []part{payloadPart(`{"messages":[{"role":"speaker"},{"role":"assistant","content":"x"}]}`)}, 400, errJSON("invalid_request", `messages[1].role must be "speaker" or "disabled_person"`)},
		{"content too long", "valid", []part{payloadPart(`{"messages":[{"role":"speaker","content":"` + long + `"}]}`)}, 400, errJSON("invalid_request", "messages[0].content has 4001 characters; the limit is 4000")},
		{"audio on disabled_person", "valid", []part{payloadPart(`{"messages":[{"role":"disabled_person","audio":true}]}`), audioPart(wav)}, 400, errJSON("invalid_request", "messages[0].audio may be true only on a speaker message")},
		{"two audio messages", "valid", []part{payloadPart(`{"messages":[{"role":"speaker","audio":true},{"role":"speaker","audio":true}]}`), audioPart(wav)}, 400, errJSON("invalid_request", "messages[1].audio: at most one message may have audio: true (messages[0] already has)")},
		{"marked message without audio part", "valid", []part{payloadPart(`{"messages":[{"role":"speaker","audio":true}]}`)}, 400, errJSON("invalid_request", "messages[0].audio is true but the request has no audio part")},
		{"empty audio part", "valid", []part{payloadPart(simplePayload), audioPart(nil)}, 400, errJSON("invalid_request", "audio: the part is empty")},
		{"max_candidates too big", "valid", []part{payloadPart(`{"messages":[{"role":"speaker"}],"options":{"max_candidates":9}}`)}, 400, errJSON("invalid_request", "options.max_candidates must be between 1 and 8")},
		{"max_candidates zero", "valid", []part{payloadPart(`{"messages":[{"role":"speaker"}],"options":{"max_candidates":0}}`)}, 400, errJSON("invalid_request", "options.max_candidates must be between 1 and 8")},
		{"max_candidates fraction", "valid", []part{payloadPart(`{"messages":[{"role":"speaker"}],"options":{"max_candidates":2.5}}`)}, 400, errJSON("invalid_request", "options.max_candidates has the wrong type: expected an integer")},
		{"temperature too high", "valid", []part{payloadPart(`{"messages":[{"role":"speaker"}],"options":{"temperature":2.01}}`)}, 400, errJSON("invalid_request", "options.temperature must be between 0 and 2")},
		{"temperature negative", "valid", []part{payloadPart(`{"messages":[{"role":"speaker"}],"options":{"temperature":-0.1}}`)}, 400, errJSON("invalid_request", "options.temperature must be between 0 and 2")},
		{"time_window_sec negative", "valid", []part{payloadPart(`{"messages":[{"role":"speaker"}],"time_window_sec":-1}`)}, 400, errJSON("invalid_request", "time_window_sec must be between 0 and 31622400")},
		{"language not BCP 47", "valid", []part{payloadPart(`{"messages":[{"role":"speaker"}],"language":"English please; DROP TABLE"}`)}, 400, errJSON("invalid_request", "language must be a BCP 47 language tag such as en, de or pt-BR (or auto)")},
		{"language with unknown subtags", "valid", []part{payloadPart(`{"messages":[{"role":"speaker"}],"language":"qq-ZZZZ"}`)}, 400, errJSON("invalid_request", "language must be a BCP 47 language tag such as en, de or pt-BR (or auto)")},
		{"user_id too long", "valid", []part{payloadPart(`{"messages":[{"role":"speaker"}],"user_id":"` + strings.Repeat("u", 201) + `"}`)}, 400, errJSON("invalid_request", "user_id has 201 characters; the limit is 200")},
		{"payload part too large", "valid", []part{payloadPart(`{"messages":[{"role":"speaker"}],"pad":"` + strings.Repeat("p", 1<<20) + `"}`)}, 413, errJSON("payload_too_large", "payload: the part exceeds the limit of 1 MiB")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.addKey("valid", 60)
			e.addKey("noscope", 60, []string{}...)

			rec := e.do(inferReq(t, tc.key, tc.parts...))
			wantJSON(t, rec, tc.status, tc.body)

			// A failed authentication writes nothing (it is counted in
			// memory); any other call, exactly one log entry at the level
			// of its status.
			logs := e.st.logsCopy()
			if tc.status == 401 {
				if len(logs) != 0 {
					t.Fatalf("a failed authentication wrote %d log entries: %+v", len(logs), logs)
				}
				return
			}
			if len(logs) != 1 {
				t.Fatalf("%d log entries, want 1: %+v", len(logs), logs)
			}
			l := logs[0]
			wantLevel := map[bool]string{true: store.LevelInfo, false: store.LevelWarn}[tc.status == 200]
			if l.Level != wantLevel || l.StreamName != store.StreamInfer || l.ResourceType != store.ResourceAPIKey || l.Status != tc.status {
				t.Errorf("log entry = %+v, want level %s, stream infer, type api_key, status %d", l, wantLevel, tc.status)
			}
			if tc.key != "" && l.ResourceID != secret.Hash(tc.key) {
				t.Errorf("resource_id = %q, want the key hash", l.ResourceID)
			}
			if strings.Contains(l.Message, "Tea") || strings.Contains(l.Message, "transcript") {
				t.Errorf("log message leaks dialog text: %q", l.Message)
			}
		})
	}
}

func TestInferRequestReachesEngine(t *testing.T) {
	e := newEnv(t)
	e.addKey("valid", 60)
	if err := e.st.SavePrompt(store.PromptVersion{Prompt: "custom prompt", Version: "7"}); err != nil {
		t.Fatal(err)
	}
	payload := `{"messages":[{"role":"disabled_person","content":"I am tired."},{"role":"speaker","content":"ignored","audio":true},{"role":"speaker","content":"after"}],
	  "disabled_person_biography":"bio","language":" de ","persona":"p","user_id":"u-1","user_profile":"up","dialog_id":"d","step_id":"s","time_window_sec":30,
	  "options":{"max_candidates":5,"temperature":0}}`
	rec := e.do(inferReq(t, "valid", payloadPart(payload), part{name: "audio", filename: "x.ogg", ctype: "audio/ogg", data: []byte("OggS")}))
	if rec.Code != 200 {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	got := e.inf.last()
	pkey, _ := e.st.InstallationSecret(store.SecretPseudonym)
	want := engine.Request{
		Messages: []engine.Message{
			{Role: "disabled_person", Content: "I am tired."},
			{Role: "speaker", Content: "ignored", Audio: true},
			{Role: "speaker", Content: "after"},
		},
		Profile:          engine.Profile{Biography: "bio", Persona: "p", UserProfile: "up", Language: "de"},
		UserID:           "u-1",
		DialogID:         "d",
		StepID:           "s",
		TimeWindowSec:    30,
		MaxCandidates:    5,
		Temperature:      0,
		SystemPrompt:     "custom prompt",
		PromptVersion:    "7",
		UserTag:          secret.PseudonymOfHash(pkey, secret.Hash("u-1")),
		Audio:            []byte("OggS"),
		AudioContentType: "audio/ogg",
	}
	if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", want) {
		t.Errorf("engine request:\n got %+v\nwant %+v", got, want)
	}
	// The stats subject is the keyed pseudonym of user_id in the key's
	// namespace, never the id itself nor its bare SHA-256.
	logs := e.st.logsCopy()
	key, _ := e.st.InstallationSecret(store.SecretPseudonym)
	if len(logs) != 1 || logs[0].Subject != keyNamespaceSubject(key, logs[0].ResourceID, secret.Hash("u-1")) || logs[0].Subject == secret.Pseudonym(key, "u-1") {
		t.Errorf("subject = %+v, want the pseudonym of user_id", logs)
	}
	if want := "infer ok: 5 candidates in 0 ms (audio 4.2 s)"; logs[0].Message != want {
		t.Errorf("message = %q, want %q", logs[0].Message, want)
	}
}

func TestInferDefaultsAndAppendedAudioMessage(t *testing.T) {
	e := newEnv(t)
	e.addKey("valid", 60)
	rec := e.do(inferReq(t, "valid", payloadPart(simplePayload), audioPart([]byte("RIFF!"))))
	wantJSON(t, rec, 200, okAudio)
	got := e.inf.last()
	if got.MaxCandidates != 3 || got.Temperature != 0.7 || got.SystemPrompt != DefaultSystemPrompt {
		t.Errorf("defaults: max_candidates %d, temperature %v, default prompt %v", got.MaxCandidates, got.Temperature, got.SystemPrompt == DefaultSystemPrompt)
	}
	wantMsgs := []engine.Message{{Role: "speaker", Content: "Tea?"}, {Role: "speaker", Audio: true}}
	if fmt.Sprint(got.Messages) != fmt.Sprint(wantMsgs) {
		t.Errorf("messages = %+v, want %+v", got.Messages, wantMsgs)
	}
	logs := e.st.logsCopy()
	if logs[0].Subject != secret.Hash("valid") {
		t.Errorf("subject without user_id = %q, want the key hash", logs[0].Subject)
	}
}

func TestInferEmptyTranscriptIsPresent(t *testing.T) {
	e := newEnv(t)
	e.addKey("valid", 60)
	e.inf.fn = func(ctx context.Context, req engine.Request) (engine.Result, error) {
		return engine.Result{HasTranscript: true, Candidates: []engine.Candidate{{Text: "Sorry?", Rank: 1, Length: 2, Language: "fr"}}}, nil
	}
	rec := e.do(inferReq(t, "valid", payloadPart(`{"language":"fr","messages":[{"role":"speaker","audio":true}]}`), audioPart([]byte("RIFF"))))
	wantJSON(t, rec, 200, `{"transcript":"","no_speech":false,"response":["Sorry?"],"candidates":[{"text":"Sorry?","rank":1,"length":2,"language":"fr"}],
	  "timings_ms":{"decode":0,"stt":0,"prompt":0,"generation":0,"queue":0,"total":0},"inference_id":"inf_AAAAAAAAAAAAAAAAAAAAAQ"}`)
}

// TestInferNoSpeech: a recording without speech answers 200 with an empty
// transcript, no_speech true and no replies.
func TestInferNoSpeech(t *testing.T) {
	e := newEnv(t)
	e.addKey("valid", 60)
	e.inf.fn = func(ctx context.Context, req engine.Request) (engine.Result, error) {
		return engine.Result{HasTranscript: true, NoSpeech: true, AudioSeconds: 3}, nil
	}
	rec := e.do(inferReq(t, "valid", payloadPart(`{"messages":[{"role":"speaker","audio":true}]}`), audioPart([]byte("RIFF"))))
	wantJSON(t, rec, 200, `{"transcript":"","no_speech":true,"response":[],"candidates":[],
	  "timings_ms":{"decode":0,"stt":0,"prompt":0,"generation":0,"queue":0,"total":0},"inference_id":"inf_AAAAAAAAAAAAAAAAAAAAAQ"}`)
}

func TestInferEngineErrors(t *testing.T) {
	tests := []struct {
		name       string
		err        error
		status     int
		body       string
		retryAfter string
		level      string
	}{
		{"unsupported audio", engine.Errorf(engine.KindUnsupportedAudio, nil, "unsupported audio format: not WAV, Ogg, WebM, MP3 or FLAC"), 415,
			errJSON("unsupported_media_type", "audio: unsupported audio format: not WAV, Ogg, WebM, MP3 or FLAC"), "", "warn"},
		{"bad audio", engine.Errorf(engine.KindBadAudio, nil, "empty audio"), 400, errJSON("invalid_request", "audio: empty audio"), "", "warn"},
		{"audio too long", engine.Errorf(engine.KindAudioTooLong, nil, "audio too long"), 413, errJSON("payload_too_large", "audio: the recording is longer than the limit of 2m0s"), "", "warn"},
		{"stt", engine.Errorf(engine.KindSTT, fmt.Errorf("whisper: -3"), "speech-to-text failed"), 502, errJSON("stt_failed", "audio: speech-to-text failed"), "", "error"},
		{"llm", engine.Errorf(engine.KindLLM, fmt.Errorf("llama: decode -1"), "reply generation failed"), 502, errJSON("llm_failed", "reply generation failed"), "", "error"},
		{"prompt too long", engine.Errorf(engine.KindPromptTooLong, nil, "the prompt needs 5000 tokens but the language model fits 4047: persona 3000 tokens"), 400,
			errJSON("prompt_too_long", "the prompt needs 5000 tokens but the language model fits 4047: persona 3000 tokens"), "", "warn"},
		{"overloaded", engine.ErrOverloaded, 503, errJSON("overloaded", "the inference queue is full; retry shortly"), "2", "error"},
		{"not ready", engine.Errorf(engine.KindNotReady, nil, "loading"), 503, errJSON("not_ready", "models are loading; retry shortly"), "5", "error"},
		{"loading, the engine's estimate", &engine.Error{Kind: engine.KindLoading, Message: "the language model is being switched; retry in 13 s", RetryAfter: 12300 * time.Millisecond}, 503,
			errJSON("loading", "the language model is being switched; retry in 13 s"), "13", "error"},
		{"loading, no estimate", &engine.Error{Kind: engine.KindLoading}, 503, errJSON("loading", "a model is being switched; retry shortly"), "5", "error"},
		{"deadline", context.DeadlineExceeded, 503, errJSON("timeout", "the inference did not finish within 30s"), "2", "error"},
		{"unknown", fmt.Errorf("secret internal detail"), 500, errJSON("internal", "Internal error."), "", "error"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.addKey("valid", 60)
			e.inf.fn = func(ctx context.Context, req engine.Request) (engine.Result, error) { return engine.Result{}, tc.err }
			rec := e.do(inferReq(t, "valid", payloadPart(simplePayload), audioPart([]byte("x"))))
			wantJSON(t, rec, tc.status, tc.body)
			if got := rec.Header().Get("Retry-After"); got != tc.retryAfter {
				t.Errorf("Retry-After = %q, want %q", got, tc.retryAfter)
			}
			logs := e.st.logsCopy()
			code := strings.SplitN(tc.body, `"`, 5)[3]
			if len(logs) != 1 || logs[0].Level != tc.level || logs[0].Message != "infer failed: "+code {
				t.Errorf("log = %+v, want one %s entry 'infer failed: %s'", logs, tc.level, code)
			}
		})
	}
}

func TestInferDeadlineIsApplied(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.Limits.InferTimeout = 7 * time.Second })
	e.addKey("valid", 60)
	var deadline time.Time
	e.inf.fn = func(ctx context.Context, req engine.Request) (engine.Result, error) {
		deadline, _ = ctx.Deadline()
		return engine.Result{}, &engine.Error{Kind: engine.KindCanceled, Message: "canceled", Err: context.DeadlineExceeded}
	}
	rec := e.do(inferReq(t, "valid", payloadPart(simplePayload)))
	wantJSON(t, rec, 503, errJSON("timeout", "the inference did not finish within 7s"))
	if deadline.IsZero() {
		t.Error("the engine got no deadline")
	}
}

func TestInferClientGone(t *testing.T) {
	e := newEnv(t)
	e.addKey("valid", 60)
	ctx, cancel := context.WithCancel(context.Background())
	e.inf.fn = func(c context.Context, req engine.Request) (engine.Result, error) {
		cancel()
		<-c.Done()
		return engine.Result{}, c.Err()
	}
	rec := e.do(inferReq(t, "valid", payloadPart(simplePayload)).WithContext(ctx))
	if rec.Code != StatusClientClosedRequest {
		t.Errorf("status = %d, want 499", rec.Code)
	}
	if logs := e.st.logsCopy(); len(logs) != 1 || logs[0].Message != "infer failed: canceled" || logs[0].Level != "warn" {
		t.Errorf("logs = %+v", logs)
	}
}

func TestInferRevokedKeyRefusedAtOnce(t *testing.T) {
	e := newEnv(t)
	e.addKey("valid", 60)
	wantJSON(t, e.do(inferReq(t, "valid", payloadPart(simplePayload))), 200, okTextOnly)
	rec := e.do(adminReq(http.MethodDelete, "/v1/admin/keys/"+secret.Hash("valid"), ""))
	if rec.Code != 200 {
		t.Fatalf("revoke: %d %s", rec.Code, rec.Body)
	}
	wantJSON(t, e.do(inferReq(t, "valid", payloadPart(simplePayload))), 401, errJSON("unauthorized", "X-API-KEY has been revoked"))
}

func TestInferNotMultipart(t *testing.T) {
	e := newEnv(t)
	e.addKey("valid", 60)
	req := httptest.NewRequest(http.MethodPost, "/v1/infer", strings.NewReader(simplePayload))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(HeaderAPIKey, "valid")
	wantJSON(t, e.do(req), 415, errJSON("unsupported_media_type", "Content-Type must be multipart/form-data with a payload part"))

	req = httptest.NewRequest(http.MethodPost, "/v1/infer", strings.NewReader("--x\r\nContent-Disposition: form-data; name=\"payload\"\r\n\r\n{"))
	req.Header.Set("Content-Type", "multipart/form-data; boundary=x")
	req.Header.Set(HeaderAPIKey, "valid")
	wantJSON(t, e.do(req), 400, errJSON("invalid_request", "the multipart body is malformed or truncated"))
}

func TestInferBodyLimit(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.Limits.MaxBodyBytes = 4 << 10 })
	e.addKey("valid", 60)
	big := make([]byte, 5<<10)

	// Declared length over the limit: refused before reading.
	req := inferReq(t, "valid", payloadPart(simplePayload), audioPart(big))
	wantJSON(t, e.do(req), 413, errJSON("payload_too_large", fmt.Sprintf("the request body is %d bytes; the limit is 4 KiB", req.ContentLength)))

	// Unknown length (chunked): cut off while reading.
	req = inferReq(t, "valid", payloadPart(simplePayload), audioPart(big))
	req.ContentLength = -1
	wantJSON(t, e.do(req), 413, errJSON("payload_too_large", "the request body exceeds the limit of 4 KiB"))
	if e.inf.count() != 0 {
		t.Error("the engine ran on an oversized request")
	}
	if n := len(e.st.logsCopy()); n != 2 {
		t.Errorf("%d log entries, want 2", n)
	}
}

// TestRateLimitExactUnderConcurrency sends 50 parallel requests with a limit
// of 10: exactly 10 are admitted, whatever the interleaving. The in-flight
// bound is lifted: it is checked first and answers 429 with Retry-After 1
// when more than MaxInflightPerKey of the 50 overlap (make test under -race
// once met it), which is not what this test measures.
func TestRateLimitExactUnderConcurrency(t *testing.T) {
	const n = 50
	e := newEnv(t, func(o *Options) { o.Limits.MaxInflightPerKey = n })
	e.addKey("valid", 10)
	var wg sync.WaitGroup
	codes := make([]int, n)
	retry := make([]string, n)
	for i := 0; i < n; i++ {
		req := inferReq(t, "valid", payloadPart(simplePayload))
		wg.Add(1)
		go func() {
			defer wg.Done()
			rec := e.do(req)
			codes[i] = rec.Code
			retry[i] = rec.Header().Get("Retry-After")
		}()
	}
	wg.Wait()
	count := map[int]int{}
	for i, c := range codes {
		count[c]++
		if c == 429 && retry[i] != "60" {
			t.Errorf("Retry-After = %q, want 60", retry[i])
		}
	}
	if count[200] != 10 || count[429] != 40 {
		t.Errorf("statuses = %v, want 10×200 and 40×429", count)
	}
	if e.inf.count() != 10 {
		t.Errorf("engine ran %d times, want 10", e.inf.count())
	}
	// One entry per admitted call, and one for the first refusal of the
	// window: refused calls cannot grow the log faster than the limit.
	if got := len(e.st.logsCopy()); got != 11 {
		t.Errorf("%d log entries, want 11", got)
	}
}

func TestRateLimitWindow(t *testing.T) {
	e := newEnv(t)
	e.addKey("valid", 2)
	for i := uint64(1); i <= 2; i++ {
		wantJSON(t, e.do(inferReq(t, "valid", payloadPart(simplePayload))), 200, strings.Replace(okTextOnly, testID(1), testID(i), 1))
	}
	e.clock.Advance(45 * time.Second)
	rec := e.do(inferReq(t, "valid", payloadPart(`not even json`)))
	wantJSON(t, rec, 429, errJSON("rate_limited", "rate limit of 2 requests per minute exceeded for this API key; retry in 15 s"))
	if got := rec.Header().Get("Retry-After"); got != "15" {
		t.Errorf("Retry-After = %q, want 15", got)
	}
	e.clock.Advance(15 * time.Second)
	wantJSON(t, e.do(inferReq(t, "valid", payloadPart(simplePayload))), 200, strings.Replace(okTextOnly, testID(1), testID(3), 1))

	// 0 means unlimited.
	e.addKey("free", 0)
	for i := 0; i < 5; i++ {
		if rec := e.do(inferReq(t, "free", payloadPart(simplePayload))); rec.Code != 200 {
			t.Fatalf("unlimited key refused: %d", rec.Code)
		}
	}
}

// TestTouchKeyThrottled: every admitted call records its key's use through
// Store.TouchKey, and the store (the one place the rule lives) writes
// LastUsedAt at most once a minute: calls inside the minute leave it at the
// first one's time.
func TestTouchKeyThrottled(t *testing.T) {
	e := newEnv(t)
	key := e.addKey("valid", 0)
	for i := 0; i < 5; i++ {
		e.do(inferReq(t, key, payloadPart(simplePayload)))
		e.clock.Advance(time.Second)
	}
	if k, _ := e.st.GetKey(secret.Hash(key)); !k.LastUsedAt.Equal(t0) {
		t.Errorf("LastUsedAt after 5 calls in a minute = %v, want the first call's %v", k.LastUsedAt, t0)
	}
	e.clock.Advance(time.Minute)
	e.do(inferReq(t, key, payloadPart(simplePayload)))
	if k, _ := e.st.GetKey(secret.Hash(key)); !k.LastUsedAt.Equal(e.clock.Now()) {
		t.Errorf("LastUsedAt a minute later = %v, want %v", k.LastUsedAt, e.clock.Now())
	}
}

func TestInferPanicIsAnswered(t *testing.T) {
	e := newEnv(t)
	e.addKey("valid", 60)
	e.inf.fn = func(ctx context.Context, req engine.Request) (engine.Result, error) { panic("engine bug") }
	wantJSON(t, e.do(inferReq(t, "valid", payloadPart(simplePayload))), 500, errJSON("internal", "Internal error."))
	if logs := e.st.logsCopy(); len(logs) != 1 || logs[0].Level != "error" || logs[0].Message != "infer failed: internal" {
		t.Errorf("logs = %+v", logs)
	}
	// The server still serves (the id made at the start of the request
	// that failed is not used again).
	e.inf.fn = echoInferer
	wantJSON(t, e.do(inferReq(t, "valid", payloadPart(simplePayload))), 200, strings.Replace(okTextOnly, "AAAQ", "AAAg", 1))
}

func TestParseLanguage(t *testing.T) {
	for in, want := range map[string]string{"": "", "auto": "auto", "en": "en", " DE ": "de", "pt-br": "pt-BR", "zh-hant-TW": "zh-Hant-TW", "sr-Latn": "sr-Latn", "uk": "uk", "ar": "ar"} {
		got, err := parseLanguage("language", in)
		if err != nil || got != want {
			t.Errorf("parseLanguage(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"english", "e", "en_US!", "123", "en-", "x", "qq-ZZZZ", "xx", "zz", "deutsch"} {
		if _, err := parseLanguage("language", bad); err == nil {
			t.Errorf("parseLanguage(%q) accepted", bad)
		}
	}
}
