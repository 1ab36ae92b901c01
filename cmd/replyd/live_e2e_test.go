package main

import (
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
	question := spokenQuestion(t)
	lr := startLive(t, adminKey, "tablet-live", "live-e2e")
	p, ctx, c := lr.p, lr.ctx, lr.c

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
	case ev := <-lr.events:
		t.Fatalf("noise and silence brought the event %q", ev.Event)
	case <-time.After(300 * time.Millisecond):
	}

	stream(ctx, t, c, question)
	var got []string
	for ev := range lr.events {
		if ev.Event == "caption" { // the partner's words so far: any number, while they speak
			continue
		}
		if ev.Closed {
			break
		}
		got = append(got, ev.Event)
		if ev.Event == "candidates" || ev.Event == "error" {
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
					if m["model"] != filepath.Base(lr.env["REPLYD_LLM_MODEL"]) || m["speech_model"] != filepath.Base(lr.env["REPLYD_WHISPER_MODEL"]) {
						t.Errorf("the live turn's entry names models %v and %v, want %s and %s", m["model"], m["speech_model"],
							filepath.Base(lr.env["REPLYD_LLM_MODEL"]), filepath.Base(lr.env["REPLYD_WHISPER_MODEL"]))
					}
				}
			}
		}
	}
	if n != 1 {
		t.Errorf("%d live turns logged, want 1: %v", n, items)
	}
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
	jfk := shareddata.JFK(t)
	lr := startLive(t, adminKey, "tablet-live-pause", "live-e2e-pause")
	p, ctx, c := lr.p, lr.ctx, lr.c
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
		case ev := <-lr.events:
			if ev.Closed {
				t.Fatalf("the session ended (%d); events %v\n%s", ev.Code, got, p.Output())
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
