package storetest

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/replyd/replyd/store"
)

func logMessages(t *testing.T, s store.Store, q store.LogQuery) []string {
	t.Helper()
	es, err := s.Logs(q)
	Must(t, err)
	out := []string{}
	for _, e := range es {
		out = append(out, e.Message)
	}
	return out
}

func logsQuery(t *testing.T, e Env) {
	s := e.S
	if es, err := s.Logs(store.LogQuery{}); err != nil || es == nil || len(es) != 0 {
		t.Errorf("Logs on an empty store = %#v, %v; want an empty non-nil slice", es, err)
	}
	for i := range 10 {
		level, stream := store.LevelInfo, store.StreamInfer
		if i%3 == 0 {
			level = store.LevelError
		}
		if i%2 == 0 {
			stream = store.StreamAdmin
		}
		MustAppend(t, s, store.LogEntry{Timestamp: T0.Add(time.Duration(i) * time.Second), Level: level, Message: fmt.Sprint(i), StreamName: stream})
	}
	// Two entries in the same nanosecond keep append order (newest first).
	MustAppend(t, s, store.LogEntry{Timestamp: T0.Add(20 * time.Second), Message: "a"})
	MustAppend(t, s, store.LogEntry{Timestamp: T0.Add(20 * time.Second), Message: "b"})
	// An entry appended late with an older timestamp sorts by its time.
	MustAppend(t, s, store.LogEntry{Timestamp: T0.Add(4500 * time.Millisecond), Message: "late"})
	// A zero timestamp takes the clock.
	e.Clock.Add(time.Hour)
	MustAppend(t, s, store.LogEntry{Message: "clock"})

	for _, tc := range []struct {
		name string
		q    store.LogQuery
		want []string
	}{
		{"all", store.LogQuery{}, []string{"clock", "b", "a", "9", "8", "7", "6", "5", "late", "4", "3", "2", "1", "0"}},
		{"limit", store.LogQuery{Limit: 3}, []string{"clock", "b", "a"}},
		{"since inclusive", store.LogQuery{Since: T0.Add(8 * time.Second), Limit: 100}, []string{"clock", "b", "a", "9", "8"}},
		{"since and level", store.LogQuery{Since: T0.Add(3 * time.Second), Level: store.LevelError}, []string{"9", "6", "3"}},
		{"stream", store.LogQuery{Stream: store.StreamInfer, Limit: 2}, []string{"9", "7"}},
		{"level and stream", store.LogQuery{Level: store.LevelError, Stream: store.StreamAdmin}, []string{"6", "0"}},
		{"unknown level", store.LogQuery{Level: "nope"}, []string{}},
		{"future since", store.LogQuery{Since: T0.Add(2 * time.Hour)}, []string{}},
	} {
		if diff := cmp.Diff(tc.want, logMessages(t, s, tc.q)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, diff)
		}
	}
	es, err := s.Logs(store.LogQuery{Limit: 1})
	Must(t, err)
	if !es[0].Timestamp.Equal(T0.Add(time.Hour)) {
		t.Errorf("clock timestamp = %v", es[0].Timestamp)
	}
}

func logsRoundTrip(t *testing.T, e Env) {
	entries := []store.LogEntry{
		{Timestamp: T0.Add(123 * time.Nanosecond), Level: store.LevelWarn, Message: "m «ü» \"q\"", ResourceType: store.ResourceAPIKey, ResourceID: "rid", StreamName: store.StreamInfer, Subject: "subj", Status: 502, LatencyMS: 1234, Node: "box-a"},
		{Timestamp: T0.Add(time.Second), Level: store.LevelInfo, Message: "admin", ResourceType: store.ResourceAdmin, ResourceID: "otp", StreamName: store.StreamAdmin, Node: "box-b"},
		{Timestamp: T0.Add(2 * time.Second)},
		// An answer names the models that made it.
		{Timestamp: T0.Add(3 * time.Second), Level: store.LevelInfo, Message: "infer ok", ResourceType: store.ResourceAPIKey, ResourceID: "rid", StreamName: store.StreamInfer, Subject: "subj", Status: 200, LatencyMS: 40, Node: "box-a",
			Inference: &store.InferenceInfo{ID: "inf-1", PromptVersion: "1", CandidateChars: []int{3, 5}, Model: "qwen-0.5b.gguf", SpeechModel: "base.en.bin"}},
	}
	for _, le := range entries {
		MustAppend(t, e.S, le)
	}
	got, err := e.S.Logs(store.LogQuery{})
	Must(t, err)
	want := []store.LogEntry{entries[3], entries[2], entries[1], entries[0]}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
}

func logsConcurrentAppends(t *testing.T, e Env) {
	const writers, each = 50, 4
	errs := concurrently(writers, func(w int) error {
		for i := range each {
			if err := e.S.AppendLog(store.LogEntry{Timestamp: T0, Message: fmt.Sprintf("%d-%d", w, i), StreamName: store.StreamInfer, Subject: fmt.Sprint(w)}); err != nil {
				return err
			}
		}
		return nil
	})
	for _, err := range errs {
		Must(t, err)
	}
	es, err := e.S.Logs(store.LogQuery{})
	Must(t, err)
	seen := map[string]bool{}
	for _, le := range es {
		seen[le.Message] = true
	}
	for w := range writers {
		for i := range each {
			if !seen[fmt.Sprintf("%d-%d", w, i)] {
				t.Errorf("entry %d-%d missing", w, i)
			}
		}
	}
	if len(es) != writers*each {
		t.Errorf("%d entries, want %d", len(es), writers*each)
	}
	// Each writer's entries come newest first in its own append order.
	last := map[string]int{}
	for _, le := range es {
		var w, i int
		fmt.Sscanf(le.Message, "%d-%d", &w, &i)
		if prev, ok := last[fmt.Sprint(w)]; ok && i >= prev {
			t.Errorf("writer %d: entry %d listed after %d", w, i, prev)
		}
		last[fmt.Sprint(w)] = i
	}
	st, _ := e.S.Stats(T0, T0.Add(time.Second))
	if !cmp.Equal(st, Counts(writers*each, writers)) {
		t.Errorf("Stats = %+v", st)
	}
}

// Counts is the Stats of requests without keys, statuses or outcomes: the
// zero counts of a StatsBuilder with the two totals set.
func Counts(requests, users int) store.Stats {
	st := store.NewStatsBuilder().Stats()
	st.TotalRequests, st.ActiveUsers = requests, users
	return st
}

func statsWindowAndSeries(t *testing.T, e Env) {
	s := e.S
	add := func(d time.Duration, stream, subject string) {
		MustAppend(t, s, store.LogEntry{Timestamp: T0.Add(d), StreamName: stream, Subject: subject})
	}
	add(-time.Second, store.StreamInfer, "u0") // before the window
	add(0, store.StreamInfer, "u1")            // at since: counted
	add(time.Minute, store.StreamInfer, "u2")
	add(2*time.Minute, store.StreamInfer, "u1")
	add(3*time.Minute, store.StreamAdmin, "u3")  // not infer
	add(4*time.Minute, store.StreamInfer, "")    // counted, no subject
	add(5*time.Minute, store.StreamInfer, "u1")  // u1 again, in the second bucket
	add(10*time.Minute, store.StreamInfer, "u4") // at until: not counted

	st, err := s.Stats(T0, T0.Add(10*time.Minute))
	Must(t, err)
	if diff := cmp.Diff(Counts(5, 2), st); diff != "" {
		t.Errorf("Stats (-want +got):\n%s", diff)
	}
	series, err := s.StatsSeries(T0, T0.Add(10*time.Minute), 3*time.Minute)
	Must(t, err)
	want := []store.StatsBucket{
		{Start: T0, TotalRequests: 3, ActiveUsers: 2},
		{Start: T0.Add(3 * time.Minute), TotalRequests: 2, ActiveUsers: 1},
		{Start: T0.Add(6 * time.Minute)},
		{Start: T0.Add(9 * time.Minute)},
	}
	if diff := cmp.Diff(want, series); diff != "" {
		t.Errorf("StatsSeries (-want +got):\n%s", diff)
	}
	// A series of a single bucket.
	series, err = s.StatsSeries(T0.Add(-time.Second), T0.Add(time.Second), 2*time.Second)
	Must(t, err)
	if diff := cmp.Diff([]store.StatsBucket{{Start: T0.Add(-time.Second), TotalRequests: 2, ActiveUsers: 2}}, series); diff != "" {
		t.Errorf("StatsSeries one bucket (-want +got):\n%s", diff)
	}

	// Pruning removes entries from the statistics too.
	n, err := s.PruneLogs(T0.Add(90*time.Second), 0)
	Must(t, err)
	if n != 3 {
		t.Errorf("PruneLogs = %d, want 3", n)
	}
	st, _ = s.Stats(time.Time{}, T0.Add(time.Hour))
	if diff := cmp.Diff(Counts(4, 2), st); diff != "" {
		t.Errorf("Stats after prune (-want +got):\n%s", diff)
	}
}

func statsEmptyAndInvalid(t *testing.T, e Env) {
	s := e.S
	MustAppend(t, s, store.LogEntry{Timestamp: T0, StreamName: store.StreamInfer, Subject: "u"})
	if st, err := s.Stats(T0, T0); err != nil || !cmp.Equal(st, Counts(0, 0)) {
		t.Errorf("empty window: %+v, %v", st, err)
	}
	if st, err := s.Stats(T0.Add(time.Hour), T0); err != nil || !cmp.Equal(st, Counts(0, 0)) {
		t.Errorf("inverted window: %+v, %v", st, err)
	}
	if series, err := s.StatsSeries(T0, T0, time.Minute); err != nil || series == nil || len(series) != 0 {
		t.Errorf("empty series: %#v, %v; want an empty non-nil slice", series, err)
	}
	_, err := s.StatsSeries(T0, T0.Add(time.Hour), 0)
	wantErr(t, "zero bucket", err, store.ErrInvalid)
	_, err = s.StatsSeries(T0, T0.Add(time.Hour), -time.Minute)
	wantErr(t, "negative bucket", err, store.ErrInvalid)
	_, err = s.StatsSeries(T0, T0.Add(time.Hour), time.Millisecond)
	wantErr(t, "too many buckets", err, store.ErrInvalid)
	// 300 years is longer than a time.Duration holds: its bucket count is unknowable.
	_, err = s.StatsSeries(T0.AddDate(-300, 0, 0), T0, time.Duration(math.MaxInt64/100))
	wantErr(t, "window longer than a Duration", err, store.ErrInvalid)
	series, err := s.StatsSeries(T0, T0.Add(store.MaxSeriesBuckets*time.Second), time.Second)
	Must(t, err)
	if len(series) != store.MaxSeriesBuckets || series[0].TotalRequests != 1 {
		t.Errorf("the longest series: %d buckets, first %+v", len(series), series[0])
	}
}

func pruneLogsInBatches(t *testing.T, e Env) {
	s := e.S
	for i := range 25 {
		MustAppend(t, s, store.LogEntry{Timestamp: T0.Add(time.Duration(i) * time.Second), Message: fmt.Sprint(i), StreamName: store.StreamInfer, Subject: "u"})
	}
	before := T0.Add(20 * time.Second)
	var calls []int
	for {
		n, err := s.PruneLogs(before, 7)
		Must(t, err)
		calls = append(calls, n)
		if n < 7 {
			break
		}
	}
	if diff := cmp.Diff([]int{7, 7, 6}, calls); diff != "" {
		t.Errorf("batches (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"24", "23", "22", "21", "20"}, logMessages(t, s, store.LogQuery{})); diff != "" {
		t.Errorf("left after prune (-want +got):\n%s", diff)
	}
	if st, _ := s.Stats(T0, T0.Add(time.Hour)); st.TotalRequests != 5 {
		t.Errorf("Stats after prune: %+v", st)
	}
	// The oldest go first: a batch smaller than what is due leaves the newer.
	n, err := s.PruneLogs(T0.Add(time.Hour), 2)
	Must(t, err)
	if diff := cmp.Diff([]string{"24", "23", "22"}, logMessages(t, s, store.LogQuery{})); n != 2 || diff != "" {
		t.Errorf("PruneLogs(batch 2) = %d (-want +got):\n%s", n, diff)
	}
}

// pruneLogsToSize: a bound the log is within deletes nothing; a tight one
// deletes the oldest first and keeps the statistics in step.
func pruneLogsToSize(t *testing.T, e Env) {
	s := e.S
	const n = 400
	errs := concurrently(n, func(i int) error {
		return s.AppendLog(store.LogEntry{Timestamp: T0.Add(time.Duration(i) * time.Second), Level: store.LevelInfo,
			Message: fmt.Sprintf("%04d infer ok: 3 candidates in 812 ms (audio 4.1 s)", i), StreamName: store.StreamInfer, Subject: "u"})
	})
	for _, err := range errs {
		Must(t, err)
	}
	if d, err := s.PruneLogsToSize(1<<40, 50); err != nil || d != 0 {
		t.Fatalf("PruneLogsToSize(1 TiB) = %d, %v; want 0", d, err)
	}
	d, err := s.PruneLogsToSize(1, 50)
	Must(t, err)
	left := logMessages(t, s, store.LogQuery{})
	if d < n*9/10 || d+len(left) != n {
		t.Fatalf("PruneLogsToSize(1 byte) deleted %d, left %d of %d", d, len(left), n)
	}
	// What is left is the newest.
	for i, m := range left {
		if want := fmt.Sprintf("%04d", n-1-i); m[:4] != want {
			t.Errorf("left[%d] = %q, want entry %s", i, m, want)
		}
	}
	if st, _ := s.Stats(T0, T0.Add(time.Hour)); st.TotalRequests != len(left) {
		t.Errorf("Stats after pruning to size: %+v, want %d requests", st, len(left))
	}
}
