package api

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/replyd/replyd/engine"
	"github.com/replyd/replyd/store"
)

// sendReplies calls req.OnCandidate for replies 1..n, ranked in that order.
func sendReplies(req engine.Request, n int) []engine.Candidate {
	var out []engine.Candidate
	for i := 1; i <= n; i++ {
		c := engine.Candidate{Text: fmt.Sprintf("reply %d", i), Rank: i, Length: 2, Language: "en"}
		out = append(out, c)
		req.OnCandidate(c)
	}
	return out
}

func candidateJSON(id string, rank int) string {
	return fmt.Sprintf(`{"inference_id":%q,"rank":%d,"text":"reply %d","language":"en"}`, id, rank, rank)
}

// streamDone runs a streamed /v1/infer in the background.
func (e *env) streamInBackground(t *testing.T, payload string) chan *httptest.ResponseRecorder {
	done := make(chan *httptest.ResponseRecorder, 1)
	go func() { done <- e.do(streamReq(t, "valid", payloadPart(payload))) }()
	return done
}

// TestFeedbackOnAReplyShownEarly: the user takes the first reply while the
// others are still being generated. The report stops the turn's generation
// at once (its context ends with errChosen), is recorded against the reply
// sent, and the stream ends with the candidates event holding the replies
// that were sent, in their order.
func TestFeedbackOnAReplyShownEarly(t *testing.T) {
	e := newEnv(t)
	e.addKey("valid", 60)
	shown := make(chan struct{})
	cause := make(chan error, 1)
	e.inf.fn = func(ctx context.Context, req engine.Request) (engine.Result, error) {
		sendReplies(req, 1)
		close(shown)
		select {
		case <-ctx.Done():
		case <-time.After(5 * time.Second):
		}
		cause <- context.Cause(ctx)
		return engine.Result{}, &engine.Error{Kind: engine.KindCanceled, Message: "canceled", Err: ctx.Err()}
	}
	done := e.streamInBackground(t, simplePayload)
	<-shown
	id := testID(1)
	fb := e.do(feedbackReq("valid", `{"inference_id":"`+id+`","chosen_rank":1}`))
	wantJSON(t, fb, 200, fbOK(id, "spoken", 6, false, false))
	if c := <-cause; !errors.Is(c, errChosen) {
		t.Errorf("the generation ended with cause %v, want errChosen", c)
	}
	rec := <-done
	evs := readEvents(t, rec.Body.String())
	if len(evs) != 2 || evs[0].name != "candidate" || evs[0].data != candidateJSON(id, 1) || evs[1].name != "candidates" ||
		!strings.Contains(evs[1].data, `"response":["reply 1"]`) || !strings.Contains(evs[1].data, `"inference_id":"`+id+`"`) {
		t.Fatalf("events %+v, want the candidate then the candidates of reply 1", evs)
	}
	logs := e.st.logsCopy()
	if len(logs) != 1 || logs[0].Status != 200 || logs[0].Inference == nil || len(logs[0].Inference.CandidateChars) != 1 {
		t.Errorf("logs = %+v, want one 200 entry whose record holds the reply sent", logs)
	}
}

// TestStreamCutShortKeepsTheRepliesSent: a streamed request that ends in an
// error after some replies were sent (its deadline, a newer request of the
// dialog) sends the error event after them, its record holds them, and
// feedback on them works; a rank it never sent is refused.
func TestStreamCutShortKeepsTheRepliesSent(t *testing.T) {
	for _, tc := range []struct {
		name, code string
		status     int
		err        error
	}{
		{"deadline", "timeout", 503, &engine.Error{Kind: engine.KindCanceled, Message: "canceled", Err: context.DeadlineExceeded}},
		{"llm failed", "llm_failed", 502, engine.Errorf(engine.KindLLM, errors.New("decode -3"), "reply generation failed")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.addKey("valid", 60)
			e.inf.fn = func(ctx context.Context, req engine.Request) (engine.Result, error) {
				sendReplies(req, 2)
				return engine.Result{}, tc.err
			}
			id := testID(1)
			rec := e.do(streamReq(t, "valid", payloadPart(simplePayload)))
			evs := readEvents(t, rec.Body.String())
			if len(evs) != 3 || evs[0].data != candidateJSON(id, 1) || evs[1].data != candidateJSON(id, 2) || evs[2].name != "error" ||
				!strings.Contains(evs[2].data, `"error":"`+tc.code+`"`) {
				t.Fatalf("events %+v", evs)
			}
			logs := e.st.logsCopy()
			if len(logs) != 1 || logs[0].Status != tc.status || logs[0].Inference == nil || len(logs[0].Inference.CandidateChars) != 2 {
				t.Fatalf("logs = %+v, want one %d entry whose record holds the 2 replies sent", logs, tc.status)
			}
			wantJSON(t, e.do(feedbackReq("valid", `{"inference_id":"`+id+`","chosen_rank":2}`)), 200, fbOK(id, "spoken", 6, false, false))
			if rec := e.do(feedbackReq("valid", `{"inference_id":"`+id+`","chosen_rank":3}`)); rec.Code != 400 {
				t.Errorf("rank 3 of 2 sent: status %d %s", rec.Code, rec.Body)
			}
		})
	}
}

// TestStreamSupersededKeepsTheRepliesSent: a newer request of the same key
// and dialog_id supersedes one that sent a reply: the older ends with the
// superseded error event after it, and its record keeps the reply.
func TestStreamSupersededKeepsTheRepliesSent(t *testing.T) {
	e := newEnv(t)
	e.addKey("valid", 60)
	shown := make(chan struct{})
	first := true
	e.inf.fn = func(ctx context.Context, req engine.Request) (engine.Result, error) {
		if first {
			first = false
			sendReplies(req, 1)
			close(shown)
			<-ctx.Done()
			return engine.Result{}, &engine.Error{Kind: engine.KindCanceled, Message: "canceled", Err: ctx.Err()}
		}
		return echoInferer(ctx, req)
	}
	payload := `{"messages":[{"role":"speaker","content":"Tea?"}],"dialog_id":"d1"}`
	done := e.streamInBackground(t, payload)
	<-shown
	if rec := e.do(inferReq(t, "valid", payloadPart(payload))); rec.Code != 200 {
		t.Fatalf("newer request: %d %s", rec.Code, rec.Body)
	}
	evs := readEvents(t, (<-done).Body.String())
	if len(evs) != 2 || evs[0].data != candidateJSON(testID(1), 1) || evs[1].name != "error" || !strings.Contains(evs[1].data, `"superseded"`) {
		t.Fatalf("events %+v", evs)
	}
	var kept *store.InferenceInfo
	for _, l := range e.st.logsCopy() {
		if l.Inference != nil && l.Inference.ID == testID(1) {
			kept = l.Inference
		}
	}
	if kept == nil || len(kept.CandidateChars) != 1 {
		t.Errorf("the superseded request's record = %+v, want its one reply", kept)
	}
}

// TestStreamNoCandidateEventsWithoutReplies: a recording without speech
// streams no candidate event; the JSON answer has none either way.
func TestStreamNoCandidateEventsWithoutReplies(t *testing.T) {
	e := newEnv(t)
	e.addKey("valid", 60)
	e.inf.fn = func(ctx context.Context, req engine.Request) (engine.Result, error) {
		return engine.Result{HasTranscript: true, NoSpeech: true}, nil
	}
	rec := e.do(streamReq(t, "valid", payloadPart(simplePayload), audioPart([]byte("RIFF"))))
	evs := readEvents(t, rec.Body.String())
	if len(evs) != 1 || evs[0].name != "candidates" || !strings.Contains(evs[0].data, `"no_speech":true`) {
		t.Fatalf("events %+v", evs)
	}
}
