package api

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/replyd/replyd/engine"
	"github.com/replyd/replyd/store"
)

func TestWantsEventStream(t *testing.T) {
	for accept, want := range map[string]bool{
		"":                  false,
		"application/json":  false,
		"*/*":               false,
		"text/event-stream": true,
		"text/event-stream, application/json;q=0.9":                          true,
		"application/json, text/event-stream":                                false,
		"application/json;q=0.5, text/event-stream":                          true,
		"text/event-stream;q=0.8, */*;q=0.9":                                 false,
		"text/event-stream;q=0.8, */*;q=0.5":                                 true,
		"text/event-stream;q=0":                                              false,
		"text/event-stream, application/*":                                   false,
		"text/event-stream;q=0.9, application/*;q=1, application/json;q=0.5": true,
		"text/html, text/event-stream":                                       true,
		"garbage;;, text/event-stream":                                       true,
	} {
		if got := wantsEventStream(accept); got != want {
			t.Errorf("wantsEventStream(%q) = %v, want %v", accept, got, want)
		}
	}
}

// sseEvent is one parsed Server-Sent Event.
type sseEvent struct {
	name, data string
}

// readEvent reads the next event from r; io.EOF at the end of the stream.
func readEvent(r *bufio.Reader) (sseEvent, error) {
	var ev sseEvent
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			if err == io.EOF && line == "" && ev.name == "" {
				return ev, io.EOF
			}
			return ev, fmt.Errorf("event cut short (%q): %w", line, err)
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "":
			return ev, nil
		case strings.HasPrefix(line, "event: "):
			ev.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			ev.data = strings.TrimPrefix(line, "data: ")
		default:
			return ev, fmt.Errorf("unexpected line %q", line)
		}
	}
}

func readEvents(t *testing.T, body string) []sseEvent {
	t.Helper()
	r := bufio.NewReader(strings.NewReader(body))
	var out []sseEvent
	for {
		ev, err := readEvent(r)
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, ev)
	}
}

func streamReq(t *testing.T, key string, parts ...part) *http.Request {
	req := inferReq(t, key, parts...)
	req.Header.Set("Accept", "text/event-stream")
	return req
}

// TestInferStreamsTranscriptFirst runs a real HTTP server: the client reads
// the transcript event while the inference is still generating candidates,
// then the candidates event with the same JSON as the plain answer.
func TestInferStreamsTranscriptFirst(t *testing.T) {
	e := newEnv(t)
	e.addKey("valid", 60)
	generate := make(chan struct{})
	e.inf.fn = func(ctx context.Context, req engine.Request) (engine.Result, error) {
		req.OnTranscript(engine.Heard{Transcript: "transcript of 5 bytes"})
		<-generate // the candidates are generated after the client saw the transcript
		return echoInferer(ctx, engine.Request{MaxCandidates: req.MaxCandidates, Audio: req.Audio})
	}
	srv := httptest.NewServer(e.h)
	defer srv.Close()
	req := streamReq(t, "valid", payloadPart(simplePayload), audioPart([]byte("RIFF!")))
	req.RequestURI = ""
	u, _ := req.URL.Parse(srv.URL + "/v1/infer")
	req.URL = u
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" || resp.Header.Get("Cache-Control") != "no-cache" {
		t.Fatalf("status %d, headers %v", resp.StatusCode, resp.Header)
	}
	r := bufio.NewReader(resp.Body)
	first, err := readEvent(r)
	if err != nil {
		t.Fatal(err)
	}
	if first.name != "transcript" || first.data != `{"transcript":"transcript of 5 bytes"}` {
		t.Fatalf("first event = %+v, want the transcript", first)
	}
	close(generate)
	second, err := readEvent(r)
	if err != nil {
		t.Fatal(err)
	}
	if second.name != "candidates" || second.data != compact(t, okAudio) {
		t.Fatalf("second event = %+v, want the candidates:\n%s", second, compact(t, okAudio))
	}
	if ev, err := readEvent(r); err != io.EOF {
		t.Fatalf("after the candidates: %+v, %v; want the end of the stream", ev, err)
	}
}

func TestInferStreamWithoutAudio(t *testing.T) {
	e := newEnv(t)
	e.addKey("valid", 60)
	rec := e.do(streamReq(t, "valid", payloadPart(simplePayload)))
	evs := readEvents(t, rec.Body.String())
	if rec.Code != 200 || len(evs) != 4 || evs[3].name != "candidates" || evs[3].data != compact(t, okTextOnly) {
		t.Fatalf("status %d, events %+v", rec.Code, evs)
	}
	for i, ev := range evs[:3] {
		want := fmt.Sprintf(`{"inference_id":"inf_AAAAAAAAAAAAAAAAAAAAAQ","rank":%d,"text":"reply %d","language":"en"}`, i+1, i+1)
		if ev.name != "candidate" || ev.data != want {
			t.Errorf("event %d = %+v, want candidate %s", i, ev, want)
		}
	}
	if logs := e.st.logsCopy(); len(logs) != 1 || logs[0].Level != store.LevelInfo || logs[0].Status != 200 {
		t.Errorf("logs = %+v", logs)
	}
}

// TestInferStreamErrorsBeforeStartAreJSON: what fails before the transcript
// exists (credentials, the payload, the audio, admission) is a plain JSON
// answer with its status, whatever the Accept header asked for.
func TestInferStreamErrorsBeforeStartAreJSON(t *testing.T) {
	for _, tc := range []struct {
		name   string
		key    string
		err    error
		status int
		body   string
	}{
		{"no key", "", nil, 401, errJSON("unauthorized", "the X-API-KEY header is required")},
		{"unsupported audio", "valid", engine.Errorf(engine.KindUnsupportedAudio, nil, "unsupported audio format"), 415, errJSON("unsupported_media_type", "audio: unsupported audio format")},
		{"bad audio", "valid", engine.Errorf(engine.KindBadAudio, nil, "empty audio"), 400, errJSON("invalid_request", "audio: empty audio")},
		{"audio too long", "valid", engine.Errorf(engine.KindAudioTooLong, nil, "too long"), 413, errJSON("payload_too_large", "audio: the recording is longer than the limit of 2m0s")},
		{"overloaded", "valid", engine.ErrOverloaded, 503, errJSON("overloaded", "the inference queue is full; retry shortly")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.addKey("valid", 60)
			e.inf.fn = func(ctx context.Context, req engine.Request) (engine.Result, error) { return engine.Result{}, tc.err }
			wantJSON(t, e.do(streamReq(t, tc.key, payloadPart(simplePayload), audioPart([]byte("x")))), tc.status, tc.body)
		})
	}
	e := newEnv(t)
	e.addKey("limited", 1)
	e.do(streamReq(t, "limited", payloadPart(simplePayload)))
	rec := e.do(streamReq(t, "limited", payloadPart(simplePayload)))
	if rec.Code != 429 || !strings.HasPrefix(rec.Header().Get("Content-Type"), "application/json") {
		t.Errorf("rate limited: status %d, Content-Type %q", rec.Code, rec.Header().Get("Content-Type"))
	}
}

// TestInferStreamErrorAfterStart: a failure after the transcript event is an
// error event with the error body, and the log entry records its code.
func TestInferStreamErrorAfterStart(t *testing.T) {
	var captured logCapture
	e := newEnv(t, func(o *Options) { o.Logger = slog.New(slog.NewTextHandler(&captured, nil)) })
	e.addKey("valid", 60)
	e.inf.fn = func(ctx context.Context, req engine.Request) (engine.Result, error) {
		req.OnTranscript(engine.Heard{Transcript: "hello"})
		return engine.Result{HasTranscript: true, Transcript: "hello"}, engine.Errorf(engine.KindLLM, fmt.Errorf("decode -1"), "reply generation failed")
	}
	rec := e.do(streamReq(t, "valid", payloadPart(simplePayload), audioPart([]byte("x"))))
	evs := readEvents(t, rec.Body.String())
	if rec.Code != 200 || len(evs) != 2 || evs[0].name != "transcript" || evs[1].name != "error" {
		t.Fatalf("status %d, events %+v", rec.Code, evs)
	}
	var body errorBody
	if err := json.Unmarshal([]byte(evs[1].data), &body); err != nil || body != (errorBody{Error: "llm_failed", Message: "reply generation failed"}) {
		t.Errorf("error event data %q (%v)", evs[1].data, err)
	}
	logs := e.st.logsCopy()
	if len(logs) != 1 || logs[0].Message != "infer failed: llm_failed" || logs[0].Level != store.LevelError || logs[0].Status != 502 {
		t.Errorf("logs = %+v, want one error entry 'infer failed: llm_failed' with status 502", logs)
	}
	// The access log records the status the error event stands for, not
	// the 200 the stream started with.
	out := captured.String()
	if !strings.Contains(out, `msg="http request" `) || !strings.Contains(out, "route=/v1/infer status=502") {
		t.Errorf("access log lacks the infer request with status=502:\n%s", out)
	}
}
