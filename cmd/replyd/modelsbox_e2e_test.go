package main

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/replyd/replyd/internal/replydproc"
	"github.com/replyd/replyd/internal/testutil"
)

// What the end-to-end tests of the models feature (switch, time, compare,
// broken files) share: a box with a candidate model in its models folder,
// and tablets that keep asking while the admin works on the models.

// modelsBox is the real program on modelsFolderEnv's folder, which holds a
// candidate language model (writeCandidate) beside the demo models, with an
// admin key and a tablet's API key.
type modelsBox struct {
	*testutil.Replyd
	env    map[string]string
	folder string
	admin  map[string]string
	apiKey string
}

// startModelsBox starts a models box named name (its admin key and the
// tablet's client id say it) with the candidate of seed; prepare, when not
// nil, changes the environment or the folder before the start.
func startModelsBox(t *testing.T, name string, seed uint64, prepare func(env map[string]string, folder string)) *modelsBox {
	t.Helper()
	adminKey := "e2e-admin-key-" + name + "-0123456789"
	env, folder := modelsFolderEnv(t, adminKey)
	writeCandidate(t, folder, seed)
	if prepare != nil {
		prepare(env, folder)
	}
	b := &modelsBox{Replyd: startReplyd(t, env), env: env, folder: folder, admin: map[string]string{"X-ADMIN-KEY": adminKey}}
	var err error
	if b.apiKey, err = b.CreateAPIKey(context.Background(), "tablet-"+name, 0); err != nil {
		t.Fatal(err)
	}
	return b
}

// inferAnswer is one answer a tablet of an inferLoad got.
type inferAnswer struct {
	Status     int
	Code       string // the error's code, "" on success
	RetryAfter string
	ID         string // the inference id, "" on failure
}

// inferLoad is tablets that keep sending inferences, each its next one as
// soon as the last is answered (after pause, and after 200 ms more when it
// was a 503), until Stop.
type inferLoad struct {
	mu      sync.Mutex
	answers []inferAnswer
	stop    chan struct{}
	wg      sync.WaitGroup
}

// startLoad starts workers tablets on b; request gives tablet w's i-th
// request: its payload, and a recording or nil.
func (b *modelsBox) startLoad(t *testing.T, workers int, pause time.Duration, request func(w, i int) (payload string, audio []byte)) *inferLoad {
	l := &inferLoad{stop: make(chan struct{})}
	for w := range workers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for i := 0; ; i++ {
				select {
				case <-l.stop:
					return
				case <-time.After(pause):
				}
				payload, audio := request(w, i)
				r, err := b.Do(context.Background(), inferRequest(b.apiKey, payload, audio))
				if err != nil {
					t.Errorf("tablet %d: %v", w, err)
					return
				}
				var body struct {
					Error       string `json:"error"`
					InferenceID string `json:"inference_id"`
				}
				_ = json.Unmarshal(r.Body, &body)
				l.mu.Lock()
				l.answers = append(l.answers, inferAnswer{Status: r.Status, Code: body.Error, RetryAfter: r.Header.Get("Retry-After"), ID: body.InferenceID})
				l.mu.Unlock()
				if r.Status == 503 {
					time.Sleep(200 * time.Millisecond)
				}
			}
		}()
	}
	return l
}

// count is how many answers the tablets have had.
func (l *inferLoad) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.answers)
}

// wait waits for n more answers (a bound, not a timed assertion: the test
// fails only if the server stops answering).
func (l *inferLoad) wait(t *testing.T, n int) {
	t.Helper()
	want := l.count() + n
	deadline := time.Now().Add(5 * time.Minute)
	for l.count() < want {
		if time.Now().After(deadline) {
			t.Fatalf("no answers: %d of %d", l.count(), want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop stops the tablets and returns every answer they had.
func (l *inferLoad) Stop() []inferAnswer {
	close(l.stop)
	l.wg.Wait()
	return l.answers
}

// statuses counts answers by status.
func statuses(answers []inferAnswer) map[int]int {
	out := map[int]int{}
	for _, a := range answers {
		out[a.Status]++
	}
	return out
}

// loggedInfer is an entry of the infer log: its status and the model that
// answered.
type loggedInfer struct {
	Status int
	Model  string
}

// loggedInfers returns the box's latest 1000 infer log entries, newest
// first.
func (b *modelsBox) loggedInfers(t *testing.T) []loggedInfer {
	t.Helper()
	var logs struct{ Items []loggedInfer }
	if err := json.Unmarshal(b.Must(replydproc.Request{Path: "/v1/admin/logs?stream=infer&limit=1000", Header: b.admin}, 200), &logs); err != nil {
		t.Fatal(err)
	}
	return logs.Items
}
