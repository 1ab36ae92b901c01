package api

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/coder/websocket"

	"github.com/replyd/replyd/engine"
)

// replyAheadInferer adds replies generated ahead (engine.AheadReplier) to the
// live tests' fake engine: they answer the transcript heard ahead once
// release is closed, or fail when their context ends first.
type replyAheadInferer struct {
	*liveInferer
	release chan struct{}
	mu      sync.Mutex
	ctxs    []context.Context
	heard   []string
	prompts []string // the requests' system prompts
}

func (f *replyAheadInferer) ReplyAhead(ctx context.Context, req engine.Request) (engine.Result, error) {
	f.mu.Lock()
	f.ctxs = append(f.ctxs, ctx)
	f.heard = append(f.heard, req.Heard.Transcript)
	f.prompts = append(f.prompts, req.SystemPrompt)
	f.mu.Unlock()
	select {
	case <-f.release:
	case <-ctx.Done():
		return engine.Result{}, &engine.Error{Kind: engine.KindCanceled, Message: "canceled", Err: ctx.Err()}
	}
	res := engine.Result{HasTranscript: true, Transcript: req.Heard.Transcript, PartnerTurn: req.Heard.Transcript}
	for i := range req.MaxCandidates {
		res.Candidates = append(res.Candidates, engine.Candidate{Text: "ahead reply to " + req.Heard.Transcript, Rank: i + 1, Length: 1, Language: "en"})
	}
	return res, nil
}

func (f *replyAheadInferer) replies() ([]context.Context, []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]context.Context(nil), f.ctxs...), append([]string(nil), f.heard...)
}

func newReplyAheadEnv(t *testing.T, mod ...func(*Options)) (*liveEnv, *replyAheadInferer) {
	t.Helper()
	ra := &replyAheadInferer{release: make(chan struct{})}
	le := newLiveEnv(t, append([]func(*Options){func(o *Options) {
		ra.liveInferer = o.Inferer.(*liveInferer)
		o.Inferer = ra
	}}, mod...)...)
	return le, ra
}

// TestLiveRepliesAheadReused: the replies generated from the speculative
// pass's transcript, while the end of the turn was awaited, are the turn's
// candidates at its end, each sent as a candidate event after the
// transcript: no generation is started afresh, and nothing is sent before
// end_of_turn.
func TestLiveRepliesAheadReused(t *testing.T) {
	le, ra := newReplyAheadEnv(t)
	close(ra.release)
	c := le.open(t, livePayload)
	sendAudio(t, c, append(pcm(1, true), pcm(1, false)...))
	// Each reply generated ahead is a candidate event after the
	// transcript, equal to the answer's.
	names, evs := events(t, c, 7)
	if strings.Join(names, ",") != "speech_start,end_of_turn,transcript,candidate,candidate,candidate,candidates" {
		t.Fatalf("events %v", names)
	}
	var out inferResponse
	if err := json.Unmarshal(evs[6].Data, &out); err != nil {
		t.Fatal(err)
	}
	for i, ev := range evs[3:6] {
		var ce candidateEvent
		_ = json.Unmarshal(ev.Data, &ce)
		if i >= len(out.Candidates) || ce.Rank != i+1 || ce.Text != out.Candidates[i].Text || ce.InferenceID != out.InferenceID {
			t.Errorf("candidate event %s, answer %s", ev.Data, evs[6].Data)
		}
	}
	if out.Transcript == nil || len(out.Candidates) != 3 || out.Candidates[0].Text != "ahead reply to "+*out.Transcript || out.InferenceID == "" {
		t.Errorf("candidates event %+v: want the replies generated ahead", out)
	}
	if n := len(le.inf.requests()); n != 0 {
		t.Errorf("%d generations started afresh at the commit, want the ones ahead reused", n)
	}
}

// TestLiveRepliesAheadCanceledByResumedSpeech: a partner who pauses 300 ms
// mid-sentence and goes on. The replies generated from the half sentence's
// transcript are canceled when the voice resumes and never shown: the only
// candidates are those of the whole turn, after its end_of_turn.
func TestLiveRepliesAheadCanceledByResumedSpeech(t *testing.T) {
	le, ra := newReplyAheadEnv(t)
	c := le.open(t, livePayload)
	sendAudio(t, c, append(append(pcm(1, true), pcm(0.3, false)...), pcm(0.8, true)...))
	if ev := next(t, c); ev.Event != "speech_start" {
		t.Fatalf("event %s, want speech_start", ev.Event)
	}
	waitFor(t, func() bool { ctxs, _ := ra.replies(); return len(ctxs) == 1 && ctxs[0].Err() != nil })
	close(ra.release)
	sendAudio(t, c, pcm(1, false))
	names, evs := answerEvents(t, c, 3)
	if strings.Join(names, ",") != "end_of_turn,transcript,candidates" {
		t.Fatalf("events %v: the half sentence's replies must not be shown", names)
	}
	var out inferResponse
	_ = json.Unmarshal(evs[2].Data, &out)
	_, heard := ra.replies()
	if len(heard) != 2 || out.Transcript == nil || *out.Transcript != heard[1] || heard[0] == heard[1] || out.Candidates[0].Text != "ahead reply to "+heard[1] {
		t.Errorf("replies ahead of %q, candidates %s: want the whole turn's", heard, evs[2].Data)
	}
}

// TestLiveRepliesAheadStaleAfterPayload: a payload control between the
// pause and the end of the turn makes the replies generated ahead stale:
// the turn is answered afresh with the new payload.
func TestLiveRepliesAheadStaleAfterPayload(t *testing.T) {
	le, ra := newReplyAheadEnv(t)
	close(ra.release)
	c := le.open(t, livePayload)
	sendAudio(t, c, append(pcm(1, true), pcm(0.3, false)...))
	if ev := next(t, c); ev.Event != "speech_start" {
		t.Fatalf("event %s, want speech_start", ev.Event)
	}
	waitFor(t, func() bool { ctxs, _ := ra.replies(); return len(ctxs) == 1 })
	write(t, c, websocket.MessageText, []byte(`{"type":"payload","payload":{"messages":[{"role":"disabled_person","content":"Hi."}],"dialog_id":"d2"}}`))
	sendAudio(t, c, pcm(1, false))
	names, evs := events(t, c, 3)
	if strings.Join(names, ",") != "end_of_turn,transcript,candidates" {
		t.Fatalf("events %v", names)
	}
	reqs := le.inf.requests()
	if len(reqs) != 1 || reqs[0].DialogID != "d2" || strings.Contains(string(evs[2].Data), "ahead reply") {
		t.Errorf("requests %+v, candidates %s: want one fresh answer with the new payload", reqs, evs[2].Data)
	}
}

// TestLiveRepliesAheadTranscriptFirst: at the commit, the transcript heard
// ahead is shown at once; the replies generated ahead follow when they are
// done (here held until the test releases them).
func TestLiveRepliesAheadTranscriptFirst(t *testing.T) {
	le, ra := newReplyAheadEnv(t)
	c := le.open(t, livePayload)
	sendAudio(t, c, append(pcm(1, true), pcm(1, false)...))
	names, _ := events(t, c, 3)
	if strings.Join(names, ",") != "speech_start,end_of_turn,transcript" {
		t.Fatalf("events %v: want the transcript before the replies generated ahead are done", names)
	}
	if ctxs, _ := ra.replies(); len(ctxs) != 1 || ctxs[0].Err() != nil {
		t.Fatalf("replies ahead: %d, want one still running", len(ctxs))
	}
	close(ra.release)
	_, evs := answerEvents(t, c, 1)
	ev := evs[0]
	var out inferResponse
	_ = json.Unmarshal(ev.Data, &out)
	if ev.Event != "candidates" || len(out.Candidates) != 3 || !strings.HasPrefix(out.Candidates[0].Text, "ahead reply to ") {
		t.Errorf("event %s %s: want the replies generated ahead", ev.Event, ev.Data)
	}
}
