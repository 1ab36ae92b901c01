package api

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/coder/websocket"

	"github.com/replyd/replyd/store"
)

// turnOf is the "turn" of a live event's data (0 when absent).
func turnOf(t *testing.T, ev gotEvent) int {
	t.Helper()
	var d struct {
		Turn int `json:"turn"`
	}
	if err := json.Unmarshal(ev.Data, &d); err != nil {
		t.Fatalf("event %s: %v", ev.Data, err)
	}
	return d.Turn
}

// firstReplyOfTurn opens a session on le, sends it a turn (speech then
// silence, in seconds) and reads its events up to its first candidate,
// which it returns with the socket.
func firstReplyOfTurn(t *testing.T, le *liveEnv, speech, silence float64) (*websocket.Conn, candidateEvent) {
	t.Helper()
	c := le.open(t, livePayload)
	sendAudio(t, c, append(pcm(speech, true), pcm(silence, false)...))
	names, evs := events(t, c, 4)
	if strings.Join(names, ",") != "speech_start,end_of_turn,transcript,candidate" {
		t.Fatalf("events %v", names)
	}
	var ce candidateEvent
	if err := json.Unmarshal(evs[3].Data, &ce); err != nil {
		t.Fatal(err)
	}
	return c, ce
}

// TestLiveCandidateEvents: each reply of a turn is a candidate event
// between its transcript and its candidates, rank 1 first, naming the turn
// and its inference id, equal to the final answer's replies in order; every
// event of a turn carries its number, 1 for the session's first.
func TestLiveCandidateEvents(t *testing.T) {
	le := newLiveEnv(t)
	le.inf.stream = true
	c := le.open(t, livePayload)
	for turn := 1; turn <= 2; turn++ {
		sendAudio(t, c, append(pcm(1.0, true), pcm(1.0, false)...))
		names, evs := events(t, c, 7)
		if got := strings.Join(names, ","); got != "speech_start,end_of_turn,transcript,candidate,candidate,candidate,candidates" {
			t.Fatalf("turn %d events %v", turn, got)
		}
		for _, ev := range evs {
			if n := turnOf(t, ev); n != turn {
				t.Errorf("turn %d: %s event carries turn %d: %s", turn, ev.Event, n, ev.Data)
			}
		}
		var out inferResponse
		if err := json.Unmarshal(evs[6].Data, &out); err != nil {
			t.Fatal(err)
		}
		if len(out.Candidates) != 3 || out.InferenceID == "" {
			t.Fatalf("candidates %s", evs[6].Data)
		}
		for i, ev := range evs[3:6] {
			var ce candidateEvent
			if err := json.Unmarshal(ev.Data, &ce); err != nil {
				t.Fatal(err)
			}
			want := candidateEvent{InferenceID: out.InferenceID, Rank: i + 1, Text: out.Candidates[i].Text, Language: out.Candidates[i].Language}
			if ce != want || out.Candidates[i].Rank != i+1 {
				t.Errorf("turn %d candidate %d = %+v, want %+v (the final answer's)", turn, i+1, ce, want)
			}
		}
	}
}

// TestLiveFeedbackOnAReplyShownEarly: feedback on a live turn's first
// reply, sent while the others are generated, stops the turn's generation
// (errChosen) and is recorded; the turn is answered with the reply sent.
func TestLiveFeedbackOnAReplyShownEarly(t *testing.T) {
	le := newLiveEnv(t)
	le.inf.stream, le.inf.blockFirst, le.inf.sendFirst = true, 1, 1
	c, ce := firstReplyOfTurn(t, le, 1.0, 1.0)
	fb := le.do(feedbackReq(liveKey, `{"inference_id":"`+ce.InferenceID+`","chosen_rank":1}`))
	wantJSON(t, fb, 200, fbOK(ce.InferenceID, "spoken", 6, false, false))
	ev := next(t, c)
	var out inferResponse
	_ = json.Unmarshal(ev.Data, &out)
	if ev.Event != "candidates" || out.InferenceID != ce.InferenceID || len(out.Response) != 1 || out.Response[0] != ce.Text || turnOf(t, ev) != 1 {
		t.Fatalf("after the feedback: %s %s", ev.Event, ev.Data)
	}
	le.inf.mu.Lock()
	causes := le.inf.causes
	le.inf.mu.Unlock()
	if len(causes) != 1 || !errors.Is(causes[0], errChosen) {
		t.Errorf("the generation ended with %v, want errChosen", causes)
	}
}

// TestLiveSupersededTurnKeepsItsReplies: a turn superseded after it sent a
// reply sends no more (not even one its engine completed as it was
// superseded), ends with the superseded error naming it, and its record
// holds the reply it sent, open for feedback.
func TestLiveSupersededTurnKeepsItsReplies(t *testing.T) {
	le := newLiveEnv(t)
	le.inf.stream, le.inf.blockFirst, le.inf.sendFirst, le.inf.lateAfterCancel = true, 1, 1, true
	c, first := firstReplyOfTurn(t, le, 1.5, 0.8)
	sendAudio(t, c, append(pcm(1.5, true), pcm(0.8, false)...))
	var got []string
	for !slices.Contains(got, "candidates/2") || !slices.Contains(got, "error/1") {
		ev := next(t, c)
		got = append(got, ev.Event+"/"+string(rune('0'+turnOf(t, ev))))
		if ev.Event == "error" && (turnOf(t, ev) != 1 || !strings.Contains(string(ev.Data), `"superseded"`)) {
			t.Errorf("error event %s", ev.Data)
		}
		if ev.Event == "candidate" && turnOf(t, ev) == 1 {
			t.Errorf("a superseded turn's reply was sent: %s", ev.Data)
		}
	}
	var kept *store.InferenceInfo
	waitFor(t, func() bool {
		logs, _ := le.st.Logs(store.LogQuery{})
		for _, e := range logs {
			if e.Inference != nil && e.Inference.ID == first.InferenceID {
				kept = e.Inference
				return true
			}
		}
		return false
	})
	if len(kept.CandidateChars) != 1 {
		t.Errorf("the superseded turn's record %+v, want its one reply", kept)
	}
	wantJSON(t, le.do(feedbackReq(liveKey, `{"inference_id":"`+first.InferenceID+`","chosen_rank":1}`)), 200, fbOK(first.InferenceID, "spoken", 6, false, false))
}
