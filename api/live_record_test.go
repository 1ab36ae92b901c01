package api

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/coder/websocket"

	"github.com/replyd/replyd/store"
)

// changingPromptStore is a store whose prompt changes at every read, as if
// the admin saved a new version between any two: read n is "prompt n",
// version n.
type changingPromptStore struct {
	Store
	mu sync.Mutex
	n  int
}

func (s *changingPromptStore) CurrentPrompt() (store.PromptVersion, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n++
	return store.PromptVersion{Prompt: fmt.Sprintf("prompt %d", s.n), Version: fmt.Sprint(s.n)}, true, nil
}

// liveOneTurn opens a session on le and sends it one turn (a second of
// speech, a second of silence): it returns the socket and the turn's
// answer, its four events checked (and its candidate events against it).
func liveOneTurn(t *testing.T, le *liveEnv) (*websocket.Conn, inferResponse) {
	t.Helper()
	c := le.open(t, livePayload)
	sendAudio(t, c, append(pcm(1, true), pcm(1, false)...))
	names, evs := answerEvents(t, c, 4)
	if strings.Join(names, ",") != "speech_start,end_of_turn,transcript,candidates" {
		t.Fatalf("events %v", names)
	}
	var out inferResponse
	if err := json.Unmarshal(evs[3].Data, &out); err != nil {
		t.Fatal(err)
	}
	return c, out
}

// liveTurnRecord runs one turn on le (liveOneTurn) and returns its answer
// and the inference record of its log entry.
func liveTurnRecord(t *testing.T, le *liveEnv) (inferResponse, *store.InferenceInfo) {
	t.Helper()
	c, out := liveOneTurn(t, le)
	_ = c.Close(websocket.StatusNormalClosure, "")
	waitFor(t, func() bool { return le.srv.live.count() == 0 })
	logs, err := le.st.Logs(store.LogQuery{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range logs {
		if e.Inference != nil && e.Inference.ID == out.InferenceID {
			return out, e.Inference
		}
	}
	t.Fatalf("no log entry records %s: %+v", out.InferenceID, logs)
	return out, nil
}

// TestLiveRecordNamesThePromptUsed: a live turn's record names the version
// of the prompt its replies were made with, read with it once, however
// often the prompt changes meanwhile (the committed pass read it a second
// time for the record, and recorded the newer version).
func TestLiveRecordNamesThePromptUsed(t *testing.T) {
	ps := &changingPromptStore{}
	le := newLiveEnv(t, func(o *Options) { ps.Store = o.Store; o.Store = ps })
	_, inf := liveTurnRecord(t, le)
	reqs := le.inf.requests()
	if len(reqs) != 1 {
		t.Fatalf("%d generations, want 1", len(reqs))
	}
	if want := "prompt " + inf.PromptVersion; reqs[0].SystemPrompt != want {
		t.Errorf("the record names prompt version %q; the replies were made with %q", inf.PromptVersion, reqs[0].SystemPrompt)
	}
}

// TestLiveRecordNamesThePromptOfRepliesAhead: replies generated ahead and
// shown at the turn's end are recorded with the prompt they were made
// with (the speculative pass's), not one read at the end.
func TestLiveRecordNamesThePromptOfRepliesAhead(t *testing.T) {
	ps := &changingPromptStore{}
	le, ra := newReplyAheadEnv(t, func(o *Options) { ps.Store = o.Store; o.Store = ps })
	close(ra.release)
	out, inf := liveTurnRecord(t, le)
	ra.mu.Lock()
	prompts := append([]string(nil), ra.prompts...)
	ra.mu.Unlock()
	if len(prompts) != 1 || !strings.HasPrefix(out.Candidates[0].Text, "ahead reply") {
		t.Fatalf("replies ahead with prompts %v, candidates %+v: want one set, reused", prompts, out.Candidates)
	}
	if want := "prompt " + inf.PromptVersion; prompts[0] != want {
		t.Errorf("the record names prompt version %q; the replies were made with %q", inf.PromptVersion, prompts[0])
	}
}
