package storetest

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/replyd/replyd/store"
)

// MustSteer appends the log entry of a steered answer id of key, made at
// T0+at, that refines turn with candidates of the given lengths.
func MustSteer(tb testing.TB, s store.Store, at time.Duration, key, id, turn, mode string, chars ...int) {
	tb.Helper()
	MustAppend(tb, s, store.LogEntry{
		Timestamp: T0.Add(at), Level: store.LevelInfo, Message: "steer", ResourceType: store.ResourceAPIKey,
		ResourceID: key, StreamName: store.StreamSteer, Subject: "s1", Status: 200, LatencyMS: 80,
		Inference: &store.InferenceInfo{ID: id, PromptVersion: "3", CandidateChars: chars, Turn: turn, SteerMode: mode},
	})
}

// steeredAnswers: a steered answer is found by its id, from any store
// opened on the same data, with its turn and mode; it counts in no
// statistics, takes no outcome, survives a snapshot and goes with its log
// entry.
func steeredAnswers(t *testing.T, e Env) {
	s := e.S
	MustInfer(t, s, Inf{Key: "k1", Subject: "s1", ID: "inf_turn", Version: "3", Cands: []string{"Yes.", "No."}})
	MustSteer(t, s, time.Second, "k1", "inf_steer1", "inf_turn", "words", 16, 14)
	// A keystroke refining the steered answer counts as the same turn.
	MustSteer(t, s, 2*time.Second, "k1", "inf_steer2", "inf_turn", "prefix", 12)

	want := store.Inference{ID: "inf_steer1", At: T0.Add(time.Second), KeyHash: "k1", Subject: "s1", PromptVersion: "3",
		CandidateChars: []int{16, 14}, Turn: "inf_turn", SteerMode: "words"}
	got, err := s.Inference("inf_steer1")
	Must(t, err)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("steered Inference (-want +got):\n%s", diff)
	}
	turn, err := s.Inference("inf_turn")
	Must(t, err)
	if turn.Turn != "" || turn.SteerMode != "" {
		t.Errorf("the turn reads as steered: %+v", turn)
	}
	// Only the turn counts.
	st, err := s.Stats(T0, T0.Add(time.Hour))
	Must(t, err)
	if st.TotalRequests != 1 || len(st.ByPromptVersion) != 1 || st.ByPromptVersion[0].Inferences != 1 {
		t.Errorf("Stats = %d requests, versions %+v; want the turn alone", st.TotalRequests, st.ByPromptVersion)
	}
	// The outcome is the turn's, never the steered answer's.
	_, err = s.SetOutcome("inf_steer1", Spoken(1, 16, T0.Add(time.Minute)), "")
	wantErr(t, "SetOutcome of a steered answer", err, store.ErrNotFound)
	// The log entry says what it refined, never text.
	es, err := s.Logs(store.LogQuery{Stream: store.StreamSteer})
	Must(t, err)
	if len(es) != 2 || es[1].Inference == nil || es[1].Inference.Turn != "inf_turn" || es[1].Inference.SteerMode != "words" {
		t.Errorf("steer log entries = %+v", es)
	}

	// A copy of the store (another box, a migration) finds it too.
	b := e.Open()
	Must(t, s.Snapshot(func(snap store.Snapshot) error { return b.Import(snap, false) }))
	got, err = b.Inference("inf_steer1")
	Must(t, err)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("steered Inference after a snapshot (-want +got):\n%s", diff)
	}

	// Pruning the log entry forgets the id; the later one stays.
	_, err = s.PruneLogs(T0.Add(1500*time.Millisecond), 0)
	Must(t, err)
	_, err = s.Inference("inf_steer1")
	wantErr(t, "a pruned steered answer", err, store.ErrNotFound)
	got, err = s.Inference("inf_steer2")
	Must(t, err)
	if got.Turn != "inf_turn" || got.SteerMode != "prefix" || !cmp.Equal(got.CandidateChars, []int{12}) {
		t.Errorf("the later steered answer = %+v", got)
	}
}

// take calls l.Take and checks the outcome (and, when refused, the retry).
func take(t *testing.T, l store.RateLimiter, key string, now time.Time, wantOK bool, wantRetry time.Duration) {
	t.Helper()
	ok, retry, err := l.Take(key, 100, 10, now)
	Must(t, err)
	if ok != wantOK || (!ok && retry != wantRetry) {
		t.Errorf("Take(%s, 100/min, burst 10, T0+%s) = %v, retry %s; want %v, retry %s", key, now.Sub(T0), ok, retry, wantOK, wantRetry)
	}
}

// limiterBucket: the token bucket of the steering budget (100 a minute,
// bursts of 10) starts full, refills one request every 600 ms, is apart
// from the windows of Allow and from other keys, and refills nothing for
// a clock behind its last request.
func limiterBucket(t *testing.T, l store.RateLimiter) {
	for i := range 10 {
		take(t, l, "k", T0.Add(time.Duration(i)*time.Millisecond), true, 0)
	}
	take(t, l, "k", T0.Add(10*time.Millisecond), false, 590*time.Millisecond)
	take(t, l, "k", T0.Add(310*time.Millisecond), false, 290*time.Millisecond)
	take(t, l, "k", T0.Add(600*time.Millisecond), true, 0)
	take(t, l, "k", T0.Add(600*time.Millisecond), false, 600*time.Millisecond)
	// Another box's clock, behind: no refill, the same answer.
	take(t, l, "k", T0.Add(100*time.Millisecond), false, 600*time.Millisecond)
	// Other keys and the windows are apart.
	take(t, l, "other", T0, true, 0)
	allow(t, l, "k", 1, T0, true, 0)
	// A keystroke every 600 ms is always admitted.
	for i := 2; i < 200; i++ {
		take(t, l, "k", T0.Add(time.Duration(i)*600*time.Millisecond), true, 0)
	}
	// A quiet minute fills the bucket to its burst, not beyond.
	quiet := T0.Add(10 * time.Minute)
	for i := range 10 {
		take(t, l, "k", quiet.Add(time.Duration(i)), true, 0)
	}
	take(t, l, "k", quiet.Add(10), false, 600*time.Millisecond)
	// Unlimited.
	if ok, _, err := l.Take("free", 0, 0, T0); err != nil || !ok {
		t.Errorf("Take with no budget = %v, %v", ok, err)
	}
}

// limiterBucketConcurrent: 40 keystrokes at once from a full bucket of 7
// admit exactly 7, on any box.
func limiterBucketConcurrent(t *testing.T, l store.RateLimiter) {
	n := admitted(t, 40, func() (bool, error) {
		ok, _, err := l.Take("k", 100, 7, T0)
		return ok, err
	})
	if n != 7 {
		t.Errorf("%d of 40 concurrent keystrokes admitted from a bucket of 7", n)
	}
}
