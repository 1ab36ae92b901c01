package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/replyd/replyd/internal/replydproc"
	"github.com/replyd/replyd/internal/shareddata"
	"github.com/replyd/replyd/internal/testutil"
)

// The live end-to-end tests' shared parts: the real program on the demo
// models with Silero VAD, a live session opened as a tablet opens it, its
// events read as they come, and speech sent as 16-bit frames.

// liveRun is a started replyd with one key's live session open.
type liveRun struct {
	p      *testutil.Replyd
	env    map[string]string // the program's environment (demoEnv's, and the VAD model)
	key    testutil.CreatedKey
	ctx    context.Context // bounds the session: 5 minutes, or the test's end
	c      *websocket.Conn
	events <-chan liveEvent
}

// startLive starts the real program (Silero VAD, Whisper and the language
// model on the demo models) with adminKey, creates a key for clientID and
// opens its live session on dialog dialogID (openLiveSession), whose
// events are read from the start.
func startLive(t *testing.T, adminKey, clientID, dialogID string) *liveRun {
	t.Helper()
	_, env := demoEnv(t, adminKey)
	env["REPLYD_VAD_MODEL"] = shareddata.VADModel(t)
	p := startReplyd(t, env)
	key := p.CreateKey(clientID)
	ctx, c := openLiveSession(t, p, key.APIKey, dialogID)
	return &liveRun{p: p, env: env, key: key, ctx: ctx, c: c, events: liveEvents(ctx, c)}
}

// spokenQuestion is the question the live tests' partner asks, spoken by
// espeak-ng with 0.3 s of silence before it and 1.5 s after (enough to end
// the turn).
func spokenQuestion(t *testing.T) []float32 {
	t.Helper()
	return shareddata.Speak(t, "Would you like a cup of tea with your lunch today?", "en-us", 0.3, 1.5, 0)
}

// liveEvent is one message of a live session. The last one liveEvents
// sends is Closed, with the session's close status and no Event.
type liveEvent struct {
	Event  string               `json:"event"`
	Data   json.RawMessage      `json:"data"`
	Closed bool                 `json:"-"`
	Code   websocket.StatusCode `json:"-"` // the close status, on the Closed event
}

// liveEvents reads c's messages until the session ends, then sends one
// Closed event and closes the channel; a message that is not an event
// (no JSON, or no "event") comes as the event "invalid: " and its bytes, so
// that a test expecting names fails on it. The reader stops at ctx's end
// too, whether or not the test still reads.
func liveEvents(ctx context.Context, c *websocket.Conn) <-chan liveEvent {
	events := make(chan liveEvent, 64)
	go func() {
		defer close(events)
		for {
			_, b, err := c.Read(ctx)
			var ev liveEvent
			if err != nil {
				ev = liveEvent{Closed: true, Code: websocket.CloseStatus(err)}
			} else if json.Unmarshal(b, &ev) != nil || ev.Event == "" {
				ev = liveEvent{Event: "invalid: " + string(b)}
			}
			select {
			case events <- ev:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return events
}

// stream sends pcm as 16-bit frames of 100 ms, at about 1.5 times real
// time (replyd refuses more than twice).
func stream(ctx context.Context, t *testing.T, c *websocket.Conn, pcm []float32) {
	t.Helper()
	for b := pcmBytes(pcm); len(b) > 0; b = b[min(3200, len(b)):] {
		if err := c.Write(ctx, websocket.MessageBinary, b[:min(3200, len(b))]); err != nil {
			t.Fatal(err)
		}
		time.Sleep(66 * time.Millisecond)
	}
}

// pcmBytes is pcm as 16-bit little-endian samples, clipped to [-1, 1].
func pcmBytes(pcm []float32) []byte {
	b := make([]byte, 2*len(pcm))
	for i, v := range pcm {
		binary.LittleEndian.PutUint16(b[2*i:], uint16(int16(max(-1, min(1, v))*32767)))
	}
	return b
}

// openLiveSession takes a ticket for apiKey, opens p's live session with it
// and sends the session's payload (dialog dialogID, two candidates); the
// context bounds the session to 5 minutes, and both end with the test.
func openLiveSession(t *testing.T, p *testutil.Replyd, apiKey, dialogID string) (context.Context, *websocket.Conn) {
	t.Helper()
	r := p.Call(replydproc.Request{Method: "POST", Path: "/v1/live/ticket", Header: map[string]string{"X-API-KEY": apiKey}})
	var tk struct{ URL string }
	if err := json.Unmarshal(r.Body, &tk); r.Status != 201 || tk.URL == "" || err != nil {
		t.Fatalf("ticket: %d %s", r.Status, r.Body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	c, _, err := websocket.Dial(ctx, "ws://"+p.Addr+tk.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.CloseNow() })
	payload := `{"messages":[{"role":"disabled_person","content":"Hello."}],"dialog_id":"` + dialogID + `","options":{"max_candidates":2}}`
	if err := c.Write(ctx, websocket.MessageText, []byte(payload)); err != nil {
		t.Fatal(err)
	}
	return ctx, c
}
