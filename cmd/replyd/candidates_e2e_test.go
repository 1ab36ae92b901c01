package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/replyd/replyd/internal/replydproc"
	"github.com/replyd/replyd/internal/shareddata"
	"github.com/replyd/replyd/internal/sse"
	"github.com/replyd/replyd/internal/testaudio"
)

// e2eCandidate is a candidate event's data; e2eAnswer the parts of the
// candidates event (the InferResponse) compared with them.
type e2eCandidate struct {
	Turn        int    `json:"turn"`
	InferenceID string `json:"inference_id"`
	Rank        int    `json:"rank"`
	Text        string `json:"text"`
	Language    string `json:"language"`
}

type e2eAnswer struct {
	Turn        int    `json:"turn"`
	InferenceID string `json:"inference_id"`
	NoSpeech    *bool  `json:"no_speech"`
	Candidates  []struct {
		Text     string `json:"text"`
		Rank     int    `json:"rank"`
		Language string `json:"language"`
	} `json:"candidates"`
}

// checkCandidates checks that the candidate events equal the answer's
// candidates, in order, ranked 1..n, with the answer's inference id.
func checkCandidates(t *testing.T, name string, sent []e2eCandidate, ans e2eAnswer) {
	t.Helper()
	if len(sent) == 0 || len(sent) != len(ans.Candidates) {
		t.Fatalf("%s: %d candidate events, %d candidates in the answer", name, len(sent), len(ans.Candidates))
	}
	for i, c := range sent {
		a := ans.Candidates[i]
		if c.Rank != i+1 || a.Rank != i+1 || c.Text != a.Text || c.Language != a.Language || c.InferenceID != ans.InferenceID || c.InferenceID == "" {
			t.Errorf("%s: candidate event %d %+v, answer's %+v (id %s)", name, i+1, c, a, ans.InferenceID)
		}
	}
}

// sseReader reads /v1/infer's event stream.
type sseReader struct{ r *bufio.Reader }

func (s sseReader) next() (name, data string, err error) { return sse.Next(s.r) }

// streamInfer posts a streamed /v1/infer to addr.
func streamInfer(t *testing.T, addr, key, payload string, wav []byte) (*http.Response, sseReader) {
	t.Helper()
	ct, body := replydproc.InferForm([]byte(payload), wav)
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/infer", bytes.NewReader(body))
	req.Header.Set("Content-Type", ct)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("X-API-KEY", key)
	resp, err := (&http.Client{Timeout: 6 * time.Minute}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("stream: %d %s", resp.StatusCode, b)
	}
	return resp, sseReader{bufio.NewReader(resp.Body)}
}

// TestCandidateEventsEndToEnd runs the real program on the demo models:
// /v1/infer's stream sends each reply as a candidate event, equal in order
// and content to its candidates event; feedback on the first reply, sent
// as soon as it came, is recorded (and stops the rest); a recording
// without speech streams no candidate.
func TestCandidateEventsEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test starts the real binary")
	}
	const adminKey = "e2e-admin-key-candidates-0123456789ab"
	_, env := demoEnv(t, adminKey)
	env["REPLYD_VAD_MODEL"] = shareddata.VADModel(t)
	p := startReplyd(t, env)
	key := p.CreateKey("tablet-stream").APIKey
	payload := `{"messages":[{"role":"speaker","content":"Would you like some tea?"}],"dialog_id":"e2e-stream","options":{"max_candidates":4}}`

	// The whole stream: the candidate events, then the same replies.
	_, r := streamInfer(t, p.Addr, key, payload, nil)
	var sent []e2eCandidate
	var ans e2eAnswer
	for {
		name, data, err := r.next()
		if err != nil {
			t.Fatalf("stream ended before candidates: %v\n%s", err, p.Tail(30))
		}
		if name == "candidate" {
			var c e2eCandidate
			if err := json.Unmarshal([]byte(data), &c); err != nil {
				t.Fatal(err)
			}
			sent = append(sent, c)
			continue
		}
		if name != "candidates" {
			t.Fatalf("event %s %s", name, data)
		}
		if err := json.Unmarshal([]byte(data), &ans); err != nil {
			t.Fatal(err)
		}
		break
	}
	checkCandidates(t, "whole stream", sent, ans)
	if len(sent) > 4 {
		t.Errorf("%d candidate events for max_candidates 4", len(sent))
	}

	// Feedback on the first reply as soon as it is shown.
	_, r = streamInfer(t, p.Addr, key, strings.Replace(payload, "tea", "coffee", 1), nil)
	name, data, err := r.next()
	if err != nil || name != "candidate" {
		t.Fatalf("first event %s %s (%v)", name, data, err)
	}
	var first e2eCandidate
	_ = json.Unmarshal([]byte(data), &first)
	fb := p.Call(replydproc.Request{Method: "POST", Path: "/v1/feedback", Header: map[string]string{"X-API-KEY": key},
		JSON: map[string]any{"inference_id": first.InferenceID, "chosen_rank": 1}})
	if fb.Status != 200 || !strings.Contains(string(fb.Body), `"outcome":"spoken"`) {
		t.Fatalf("feedback on the first reply: %d %s", fb.Status, fb.Body)
	}
	sent = []e2eCandidate{first}
	for {
		name, data, err := r.next()
		if err != nil {
			t.Fatalf("stream ended before candidates: %v", err)
		}
		if name == "candidate" {
			var c e2eCandidate
			_ = json.Unmarshal([]byte(data), &c)
			sent = append(sent, c)
			continue
		}
		if name != "candidates" {
			t.Fatalf("event %s %s", name, data)
		}
		ans = e2eAnswer{}
		_ = json.Unmarshal([]byte(data), &ans)
		break
	}
	checkCandidates(t, "feedback early", sent, ans)
	t.Logf("feedback on the first reply: the answer holds %d of 4 replies", len(sent))

	// Silence: no_speech, no candidate event.
	_, r = streamInfer(t, p.Addr, key, `{"messages":[{"role":"speaker","audio":true}]}`, testaudio.Mono16(16000, make([]float32, 2*16000)))
	var names []string
	for {
		name, data, err := r.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
		if name == "candidates" && !strings.Contains(data, `"no_speech":true`) {
			t.Errorf("silence answered %s", data)
		}
	}
	if !slices.Equal(names, []string{"candidates"}) {
		t.Errorf("silence streamed %v, want only candidates", names)
	}
}

// TestLiveCandidateEventsEndToEnd: on the real program, a live turn the
// partner did not finish (the listening paused mid-sentence) sends no
// transcript and no candidate; the next, finished turn sends its candidate
// events after its end_of_turn, each naming the turn (2) and equal in order
// and content to its candidates event.
func TestLiveCandidateEventsEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test starts the real binary")
	}
	const adminKey = "e2e-admin-key-live-cand-0123456789ab"
	question := spokenQuestion(t)
	lr := startLive(t, adminKey, "tablet-live-cand", "live-cand-e2e")
	p, ctx, c, events := lr.p, lr.ctx, lr.c, lr.events
	control := func(typ string) {
		if err := c.Write(ctx, websocket.MessageText, []byte(`{"type":"`+typ+`"}`)); err != nil {
			t.Fatal(err)
		}
	}

	// Half the sentence, then the listening pauses: the turn is dropped.
	stream(ctx, t, c, question[:len(question)/2])
	control("pause")
	quiet := time.After(2 * time.Second)
wait:
	for {
		select {
		case ev := <-events:
			if ev.Event != "speech_start" && ev.Event != "caption" {
				t.Fatalf("an unfinished turn sent %s %s", ev.Event, ev.Data)
			}
		case <-quiet:
			break wait
		}
	}
	control("resume")
	stream(ctx, t, c, question)
	var names []string
	var sent []e2eCandidate
	var ans e2eAnswer
	for ev := range events {
		if ev.Event == "caption" {
			continue
		}
		if ev.Closed {
			break
		}
		names = append(names, ev.Event)
		switch ev.Event {
		case "candidate":
			var cd e2eCandidate
			_ = json.Unmarshal(ev.Data, &cd)
			if cd.Turn != 2 {
				t.Errorf("candidate of turn %d, want 2: %s", cd.Turn, ev.Data)
			}
			sent = append(sent, cd)
		case "candidates", "error":
			_ = json.Unmarshal(ev.Data, &ans)
		}
		if ev.Event == "candidates" || ev.Event == "error" {
			break
		}
	}
	s := strings.Join(names, ",")
	if !strings.HasPrefix(s, "speech_start,end_of_turn,transcript,candidate,") || !strings.HasSuffix(s, ",candidates") || ans.Turn != 2 {
		t.Fatalf("events %s (answer of turn %d: %+v)\n%s", s, ans.Turn, ans, p.Tail(30))
	}
	checkCandidates(t, "live turn", sent, ans)
	_ = c.Close(websocket.StatusNormalClosure, "")
}
