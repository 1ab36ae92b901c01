package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/replyd/replyd/internal/replydproc"
	"github.com/replyd/replyd/internal/shareddata"
	"github.com/replyd/replyd/internal/testutil"
)

// TestLiveEndToEnd runs the real program (Silero VAD, Whisper and the
// language model on the demo models) with a live session: a stretch of
// broadband noise, hum and silence starts no turn (so no Whisper or
// language-model work: both need a turn), then a spoken question followed by
// silence is one turn answered with speech_start, end_of_turn and
// candidates, logged as a live turn of the key.
func TestLiveEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test starts the real binary")
	}
	const adminKey = "e2e-admin-key-live-0123456789abcdef"
	_, env := demoEnv(t, adminKey)
	env["REPLYD_VAD_MODEL"] = shareddata.VADModel(t)
	question := shareddata.Speak(t, "Would you like a cup of tea with your lunch today?", "en-us", 0.3, 1.5, 0)
	p := startReplyd(t, env)
	key := p.CreateKey("tablet-live")

	ctx, c := openLiveSession(t, p, key.APIKey, "live-e2e")
	events := make(chan string, 16)
	go func() {
		defer close(events)
		for {
			_, b, err := c.Read(ctx)
			if err != nil {
				return
			}
			var ev struct{ Event string }
			_ = json.Unmarshal(b, &ev)
			events <- ev.Event
		}
	}()

	// Noise (broadband, hum) and silence, 4 s, at about real time.
	rng := rand.New(rand.NewPCG(7, 9))
	noise := make([]float32, 4*16000)
	for i := range noise {
		switch {
		case i < 16000:
			noise[i] = float32(0.08 * (2*rng.Float64() - 1))
		case i < 2*16000:
			noise[i] = float32(0.1 * math.Sin(2*math.Pi*50*float64(i)/16000))
		}
	}
	stream(ctx, t, c, noise)
	select {
	case ev := <-events:
		t.Fatalf("noise and silence brought the event %q", ev)
	case <-time.After(300 * time.Millisecond):
	}

	stream(ctx, t, c, question)
	var got []string
	for ev := range events {
		if ev == "caption" { // the partner's words so far: any number, while they speak
			continue
		}
		got = append(got, ev)
		if ev == "candidates" || ev == "error" {
			break
		}
	}
	if s := strings.Join(got, ","); !strings.HasPrefix(s, "speech_start,end_of_turn,") || !strings.HasSuffix(s, ",candidates") {
		t.Fatalf("events %s\n%s", s, p.Output())
	}
	_ = c.Close(websocket.StatusNormalClosure, "")
	// The replies were generated from the speculative pass's transcript
	// while the end of the turn was awaited, and reused at its commit
	// (issue 35): the committed turn waits for them, so this holds on any
	// box.
	if m := p.Call(replydproc.Request{Method: "GET", Path: "/metrics", Header: map[string]string{"X-ADMIN-KEY": adminKey}}); !strings.Contains(string(m.Body), `replyd_live_replies_ahead_total{outcome="reused"} 1`) {
		t.Errorf("replies generated ahead not reused once:\n%s", grepLines(string(m.Body), "replyd_live_"))
	}

	// The turn's entry is written once its answer was sent.
	n := 0
	var items []any
	for deadline := time.Now().Add(10 * time.Second); n == 0 && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		logs := p.JSON("GET", "/v1/admin/logs?stream=infer", map[string]string{"X-ADMIN-KEY": adminKey}, nil, 200)
		items, _ = logs["items"].([]any)
		for _, e := range items {
			if m, _ := e.(map[string]any); m != nil {
				if msg, _ := m["message"].(string); strings.HasPrefix(msg, "live turn ok") {
					n++
					// Its answer names both models that made it, the
					// transcript heard ahead included.
					if m["model"] != filepath.Base(env["REPLYD_LLM_MODEL"]) || m["speech_model"] != filepath.Base(env["REPLYD_WHISPER_MODEL"]) {
						t.Errorf("the live turn's entry names models %v and %v, want %s and %s", m["model"], m["speech_model"],
							filepath.Base(env["REPLYD_LLM_MODEL"]), filepath.Base(env["REPLYD_WHISPER_MODEL"]))
					}
				}
			}
		}
	}
	if n != 1 {
		t.Errorf("%d live turns logged, want 1: %v", n, items)
	}
}

// stream sends pcm as 16-bit frames of 100 ms, at about 1.5 times real
// time (replyd refuses more than twice).
func stream(ctx context.Context, t *testing.T, c *websocket.Conn, pcm []float32) {
	t.Helper()
	for len(pcm) > 0 {
		n := min(1600, len(pcm))
		b := make([]byte, 2*n)
		for i, v := range pcm[:n] {
			binary.LittleEndian.PutUint16(b[2*i:], uint16(int16(max(-1, min(1, v))*32767)))
		}
		if err := c.Write(ctx, websocket.MessageBinary, b); err != nil {
			t.Fatal(err)
		}
		pcm = pcm[n:]
		time.Sleep(66 * time.Millisecond)
	}
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

// TestLivePausedSentenceAnswered runs the real program on jfk.wav's first
// 5 s, whose 1 s pause inside the sentence ends a turn: "And so, my fellow
// Americans," then "ask not what your country". The second turn is heard
// as speech (kept by the stream's own voice probabilities) and answered
// with replies; no turn is answered no_speech, and every turn gets an
// answer (candidates, or superseded for the first).
func TestLivePausedSentenceAnswered(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test starts the real binary")
	}
	const adminKey = "e2e-admin-key-live-pause-0123456789ab"
	_, env := demoEnv(t, adminKey)
	env["REPLYD_VAD_MODEL"] = shareddata.VADModel(t)
	jfk := shareddata.JFK(t)
	p := startReplyd(t, env)
	key := p.CreateKey("tablet-live-pause")
	ctx, c := openLiveSession(t, p, key.APIKey, "live-e2e-pause")
	type event struct {
		Event string
		Data  json.RawMessage
	}
	events := make(chan event, 32)
	go func() {
		defer close(events)
		for {
			_, b, err := c.Read(ctx)
			if err != nil {
				return
			}
			var ev event
			_ = json.Unmarshal(b, &ev)
			events <- ev
		}
	}()
	stream(ctx, t, c, append(jfk[:5*16000:5*16000], make([]float32, 3*16000)...))

	var got []string
	turns, answers := 0, 0
	var last struct {
		NoSpeech bool     `json:"no_speech"`
		Response []string `json:"response"`
	}
	timeout := time.After(3 * time.Minute)
	for turns < 2 || answers < turns {
		select {
		case ev, ok := <-events:
			if !ok {
				t.Fatalf("the session ended; events %v\n%s", got, p.Output())
			}
			got = append(got, ev.Event)
			switch ev.Event {
			case "end_of_turn":
				turns++
			case "candidates":
				answers++
				if err := json.Unmarshal(ev.Data, &last); err != nil || last.NoSpeech {
					t.Errorf("a turn answered %s", ev.Data)
				}
			case "error":
				answers++
				if !strings.Contains(string(ev.Data), `"superseded"`) {
					t.Errorf("a turn failed: %s", ev.Data)
				}
			}
		case <-timeout:
			t.Fatalf("events %v: want two turns, each answered\n%s", got, p.Output())
		}
	}
	if turns != 2 || len(last.Response) == 0 {
		t.Errorf("events %v: %d turns, the last answer holds %d replies", got, turns, len(last.Response))
	}
}

// grepLines returns the lines of s that hold sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
