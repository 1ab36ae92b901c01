package api

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/replyd/replyd/engine"
	"github.com/replyd/replyd/store/bolt"
)

// steerOn sends a steered request refining parent to e and returns its
// status and inference id.
func steerOn(t *testing.T, e *env, key, parent string) (int, string) {
	t.Helper()
	rec := e.do(inferReq(t, key, payloadPart(steerPayload(fmt.Sprintf(`,"options":{"max_candidates":3},"steer":{"prefix":"rep"},"parent_inference_id":%q`, parent)))))
	var out struct {
		InferenceID string `json:"inference_id"`
	}
	decode(t, rec, &out)
	return rec.Code, out.InferenceID
}

// TestSteerAfterRestart: the steered answers and their parents are in the
// store, not in one process's memory. After a restart on the same bbolt
// file, a keystroke refining a steered answer of the old process succeeds,
// and feedback naming that answer is the turn's outcome.
func TestSteerAfterRestart(t *testing.T) {
	e1 := newEnv(t)
	key := e1.addKey("valid", 100)
	parent := e1.infer(key, steerPayload(`,"options":{"max_candidates":3}`))
	code, steered := steerOn(t, e1, key, parent)
	if code != 200 {
		t.Fatalf("steered: %d", code)
	}
	path := e1.st.Path()
	if err := e1.st.Close(); err != nil {
		t.Fatal(err)
	}

	// The restarted process: the same file, nothing in memory.
	clock := &fakeClock{t: t0.Add(time.Minute)}
	db, err := bolt.Open(path, bolt.Options{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	st := &testStore{DB: db, faults: map[string]error{}}
	e2 := newEnv(t, func(o *Options) {
		o.Store = st
		o.Now = clock.Now
		o.Rand = &countingReader{n: 100} // ids of its own
	})
	e2.st = st
	for _, p := range []string{steered, parent} {
		if code, id := steerOn(t, e2, key, p); code != 200 || id == "" {
			t.Fatalf("after the restart, refining %s: %d", p, code)
		}
	}
	// Feedback names the old process's steered answer: the turn's outcome
	// ("reply 1" of the steered answer, 7 characters, without its text here).
	wantJSON(t, e2.do(feedbackReq(key, fmt.Sprintf(`{"inference_id":%q,"chosen_rank":1,"keys_pressed":3,"selections":1}`, steered))),
		200, fbOK(parent, "spoken", 6, false, false))
	inf, err := db.Inference(parent)
	if err != nil || inf.Outcome == nil || inf.Outcome.SteerMode != "prefix" || inf.Outcome.KeysPressed != 3 {
		t.Fatalf("the turn's outcome = %+v, %v", inf.Outcome, err)
	}
	// Another key still gets the one 404.
	e2.addKey("other", 100)
	if code, _ := steerOn(t, e2, "other", steered); code != 404 {
		t.Fatalf("another key refining a stored steered answer: %d", code)
	}
}

// TestSteerAcrossBoxes: two boxes share one store (as through PostgreSQL).
// A keystroke on one box refines the steered answer of the other, and the
// per-key steering budget (bursts of 10) is one for both.
func TestSteerAcrossBoxes(t *testing.T) {
	a := newEnv(t)
	key := a.addKey("valid", 100)
	b := newEnv(t, func(o *Options) {
		o.Store = a.st
		o.Now = a.clock.Now
		o.Rand = &countingReader{n: 1000}
	})
	last := a.infer(key, steerPayload(`,"options":{"max_candidates":3}`))
	for i := range steerBurst {
		box := []*env{a, b}[i%2]
		code, id := steerOn(t, box, key, last)
		if code != 200 {
			t.Fatalf("keystroke %d on box %d refining the other box's answer: %d", i+1, i%2, code)
		}
		last = id
	}
	for _, box := range []*env{a, b} {
		if code, _ := steerOn(t, box, key, last); code != 429 {
			t.Fatalf("past the shared burst: %d, want 429", code)
		}
	}
	a.clock.Advance(600 * time.Millisecond)
	if code, _ := steerOn(t, b, key, last); code != 200 {
		t.Fatalf("600 ms later: %d", code)
	}
}

// TestSteerSuperseded: the next keystroke (same key and dialog_id)
// supersedes the steered request in flight: that one's engine context is
// cancelled and it is answered 409 superseded, counted as a steered
// request, while the keystroke is answered.
func TestSteerSuperseded(t *testing.T) {
	e := newEnv(t)
	key := e.addKey("valid", 100)
	started := make(chan []string, 2)
	stopped := make(chan struct{})
	e.inf.fn = func(ctx context.Context, req engine.Request) (engine.Result, error) {
		if req.Steer != nil {
			started <- req.Steer.Words
			if len(req.Steer.Words) == 1 {
				<-ctx.Done()
				close(stopped)
				return engine.Result{}, &engine.Error{Kind: engine.KindCanceled, Message: "canceled", Err: ctx.Err()}
			}
		}
		return echoInferer(ctx, req)
	}
	parent := e.infer(key, steerPayload(`,"dialog_id":"d1"`))
	keystroke := func(words string) chan *httptest.ResponseRecorder {
		out := make(chan *httptest.ResponseRecorder, 1)
		js := steerPayload(fmt.Sprintf(`,"dialog_id":"d1","steer":{"words":%s},"parent_inference_id":%q`, words, parent))
		go func() { out <- e.do(inferReq(t, key, payloadPart(js))) }()
		<-started
		return out
	}
	first := keystroke(`["i"]`)
	second := keystroke(`["i","w"]`)
	select {
	case <-stopped:
	case <-time.After(30 * time.Second):
		t.Fatal("the superseded keystroke's engine context was not cancelled")
	}
	wantJSON(t, <-first, 409, errJSON("superseded", "a newer request for the same dialog_id replaced this one; do not retry it"))
	if rec := <-second; rec.Code != 200 {
		t.Fatalf("the next keystroke: %d %s", rec.Code, rec.Body)
	}
	m := e.do(adminReq("GET", "/metrics", "")).Body.String()
	for _, want := range []string{`replyd_steer_requests_total{outcome="superseded"} 1`, `replyd_steer_requests_total{outcome="ok"} 1`} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
