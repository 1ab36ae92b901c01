package storetest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/replyd/replyd/store"
)

// Inf describes one infer log entry of the outcome and memory scenarios.
type Inf struct {
	At      time.Duration // after T0
	Key     string
	Subject string
	ID      string // "" for a failed call
	Version string
	Cands   []string
	Partner string // non-empty: made with remember: true
	Tag     string // the user's InferenceInfo.UserTag (with Partner)
	Status  int    // 0: 200
	Code    string
	Latency int64
	Model   string // the language model that answered
}

// MustInfer appends the log entry of one infer call.
func MustInfer(tb testing.TB, s store.Store, i Inf) {
	tb.Helper()
	if i.Status == 0 {
		i.Status = 200
	}
	e := store.LogEntry{
		Timestamp: T0.Add(i.At), Level: store.LevelInfo, Message: "infer", ResourceType: store.ResourceAPIKey,
		ResourceID: i.Key, StreamName: store.StreamInfer, Subject: i.Subject, Status: i.Status,
		LatencyMS: i.Latency, ErrorCode: i.Code,
	}
	if i.ID != "" {
		chars := make([]int, len(i.Cands))
		for n, c := range i.Cands {
			chars[n] = len([]rune(c))
		}
		e.Inference = &store.InferenceInfo{ID: i.ID, PromptVersion: i.Version, CandidateChars: chars, Model: i.Model}
		if i.Partner != "" {
			e.Inference.Remember = &store.RememberedTexts{Partner: i.Partner, Candidates: i.Cands}
			e.Inference.UserTag = i.Tag
		}
	}
	MustAppend(tb, s, e)
}

// Spoken is the outcome of candidate rank of chars characters spoken as it
// was, reported at at.
func Spoken(rank, chars int, at time.Time) store.Outcome {
	return store.Outcome{Kind: store.OutcomeSpoken, Rank: rank, SpokenChars: chars, KeystrokesSaved: chars - 1, TimeToChoiceMS: -1, FirstAt: at, At: at}
}

func outcomesInferenceAndOutcome(t *testing.T, e Env) {
	s := e.S
	MustInfer(t, s, Inf{Key: "k1", Subject: "s1", ID: "inf_a", Version: "3", Cands: []string{"Yes please.", "No."}})

	got, err := s.Inference("inf_a")
	Must(t, err)
	want := store.Inference{ID: "inf_a", At: T0, KeyHash: "k1", Subject: "s1", PromptVersion: "3", CandidateChars: []int{11, 3}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Inference (-want +got):\n%s", diff)
	}
	_, err = s.Inference("inf_nope")
	wantErr(t, "unknown id", err, store.ErrNotFound)
	_, err = s.SetOutcome("inf_nope", Spoken(1, 11, T0), "")
	wantErr(t, "SetOutcome of an unknown id", err, store.ErrNotFound)

	o := Spoken(1, 11, T0.Add(time.Minute))
	rev, err := s.SetOutcome("inf_a", o, "ignored: no remember")
	Must(t, err)
	if rev != 0 {
		t.Errorf("rev = %d for an inference without remember", rev)
	}
	got, _ = s.Inference("inf_a")
	want.Outcome = &o
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("after SetOutcome (-want +got):\n%s", diff)
	}
	// A replacement replaces it.
	o2 := store.Outcome{Kind: store.OutcomeNoneFit, TimeToChoiceMS: 4200, FirstAt: o.FirstAt, At: T0.Add(2 * time.Minute)}
	_, err = s.SetOutcome("inf_a", o2, "")
	Must(t, err)
	got, _ = s.Inference("inf_a")
	if got.Outcome == nil || !cmp.Equal(*got.Outcome, o2) {
		t.Errorf("replaced outcome = %+v, want %+v", got.Outcome, o2)
	}
	// The log entry records the id and the prompt version, never text.
	es, _ := s.Logs(store.LogQuery{})
	if es[0].Inference == nil || es[0].Inference.ID != "inf_a" || es[0].Inference.PromptVersion != "3" || es[0].Inference.Remember != nil {
		t.Errorf("log entry = %+v", es[0])
	}
	// Pruning the log entry forgets the id.
	_, err = s.PruneLogs(T0.Add(time.Second), 0)
	Must(t, err)
	_, err = s.Inference("inf_a")
	wantErr(t, "after prune", err, store.ErrNotFound)
}

// statsOutcomes checks every counter of Stats on a mix of keys, versions,
// errors and outcomes, and the series' outcome counts.
func statsOutcomes(t *testing.T, e Env) {
	s := e.S
	at := func(m int) time.Duration { return time.Duration(m) * time.Minute }
	// i1-i3 name the model that answered (a switch between i2 and i3); i4
	// is an answer logged before answers named their model.
	MustInfer(t, s, Inf{At: at(0), Key: "k1", Subject: "u1", ID: "i1", Version: "1", Cands: []string{"aaaa", "bb"}, Latency: 100, Model: "a.gguf"})
	MustInfer(t, s, Inf{At: at(1), Key: "k1", Subject: "u1", ID: "i2", Version: "1", Cands: []string{"aaaa", "bb"}, Latency: 300, Model: "a.gguf"})
	MustInfer(t, s, Inf{At: at(2), Key: "k2", Subject: "u2", ID: "i3", Version: "2", Cands: []string{"cc"}, Latency: 200, Model: "b.gguf"})
	MustInfer(t, s, Inf{At: at(3), Key: "k2", Subject: "u2", Status: 429, Code: "rate_limited", Latency: 1})
	MustInfer(t, s, Inf{At: at(4), Key: "k1", Subject: "u3", Status: 502, Code: "llm_failed", Latency: 5000})
	MustInfer(t, s, Inf{At: at(5), Key: "k2", Subject: "u2", ID: "i4", Version: "2", Cands: []string{"dd"}, Latency: 400})

	ts := T0.Add(time.Hour)
	for id, o := range map[string]store.Outcome{
		"i1": Spoken(1, 4, ts),
		"i2": {Kind: store.OutcomeEdited, Rank: 2, SpokenChars: 5, KeystrokesSaved: 2, TimeToChoiceMS: 3000, FirstAt: ts, At: ts},
		"i3": {Kind: store.OutcomeNoneFit, TimeToChoiceMS: 9000, FirstAt: ts, At: ts},
		"i4": {Kind: store.OutcomeTyped, SpokenChars: 7, TimeToChoiceMS: 5000, FirstAt: ts, At: ts},
	} {
		_, err := s.SetOutcome(id, o, "")
		Must(t, err)
	}
	got, err := s.Stats(T0, T0.Add(10*time.Minute))
	Must(t, err)
	want := store.Stats{
		TotalRequests: 6, ActiveUsers: 3,
		Errors:  map[string]int{"rate_limited": 1, "llm_failed": 1},
		Latency: store.Percentiles{N: 4, P50: 200, P95: 400},
		OutcomeStats: store.OutcomeStats{
			Outcomes: 4, Accepted: 2, NoneFit: 1, RankCounts: map[int]int{1: 1, 2: 1}, KeystrokesSaved: 3 + 2,
			TimeToChoice: store.Percentiles{N: 3, P50: 5000, P95: 9000},
		},
		ByKey: []store.KeyStats{
			{KeyHash: "k1", Requests: 3, Errors: 1, OutcomeStats: store.OutcomeStats{Outcomes: 2, Accepted: 2, RankCounts: map[int]int{1: 1, 2: 1}, KeystrokesSaved: 5, TimeToChoice: store.Percentiles{N: 1, P50: 3000, P95: 3000}}},
			{KeyHash: "k2", Requests: 3, Errors: 1, OutcomeStats: store.OutcomeStats{Outcomes: 2, NoneFit: 1, RankCounts: map[int]int{}, TimeToChoice: store.Percentiles{N: 2, P50: 5000, P95: 9000}}},
		},
		ByPromptVersion: []store.VersionStats{
			{Version: "1", Inferences: 2, Outcomes: 2, Accepted: 2},
			{Version: "2", Inferences: 2, Outcomes: 2, Accepted: 0},
		},
		ByModel: []store.ModelStats{
			{Model: "a.gguf", Inferences: 2, Outcomes: 2, Accepted: 2, Latency: store.Percentiles{N: 2, P50: 100, P95: 300}},
			{Model: "b.gguf", Inferences: 1, Outcomes: 1, Accepted: 0, Latency: store.Percentiles{N: 1, P50: 200, P95: 200}},
		},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Stats (-want +got):\n%s", diff)
	}
	series, err := s.StatsSeries(T0, T0.Add(6*time.Minute), 2*time.Minute)
	Must(t, err)
	wantSeries := []store.StatsBucket{
		{Start: T0, TotalRequests: 2, ActiveUsers: 1, Outcomes: 2, Accepted: 2},
		{Start: T0.Add(2 * time.Minute), TotalRequests: 2, ActiveUsers: 1, Outcomes: 1},
		{Start: T0.Add(4 * time.Minute), TotalRequests: 2, ActiveUsers: 2, Outcomes: 1},
	}
	if diff := cmp.Diff(wantSeries, series); diff != "" {
		t.Errorf("StatsSeries (-want +got):\n%s", diff)
	}
}

func memoryPairs(t *testing.T, e Env) {
	s := e.S
	MustInfer(t, s, Inf{At: 0, Key: "k", Subject: "s1", ID: "i1", Version: "1", Cands: []string{"Yes, with milk.", "No thanks."}, Partner: "Tea?"})
	MustInfer(t, s, Inf{At: time.Second, Key: "k", Subject: "s1", ID: "i2", Version: "1", Cands: []string{"Outside.", "Inside."}, Partner: "Shall we walk?"})
	MustInfer(t, s, Inf{At: 2 * time.Second, Key: "k", Subject: "s2", ID: "i3", Version: "1", Cands: []string{"Fine."}, Partner: "How are you?"})
	MustInfer(t, s, Inf{At: 3 * time.Second, Key: "k", Subject: "s3", ID: "i4", Version: "1", Cands: []string{"Sure."}})

	got, err := s.Inference("i1")
	Must(t, err)
	if !got.Remembered || got.Texts == nil || got.Texts.Partner != "Tea?" || !cmp.Equal(got.Texts.Candidates, []string{"Yes, with milk.", "No thanks."}) {
		t.Fatalf("remembered texts = %+v", got)
	}
	if got, _ := s.Inference("i4"); got.Remembered || got.Texts != nil {
		t.Errorf("an inference without remember kept texts: %+v", got)
	}
	rev0, err := s.MemoryRev("s1")
	Must(t, err)
	if rev0 == 0 {
		t.Error("a remembering user has revision 0")
	}
	ts := T0.Add(time.Minute)
	rev, err := s.SetOutcome("i1", Spoken(1, 15, ts), "Yes, with milk.")
	Must(t, err)
	if rev == rev0 || rev == 0 {
		t.Errorf("rev %d after a new pair, %d before", rev, rev0)
	}
	_, err = s.SetOutcome("i2", store.Outcome{Kind: store.OutcomeTyped, SpokenChars: 12, TimeToChoiceMS: -1, FirstAt: ts, At: ts}, "Let's go out.")
	Must(t, err)
	_, err = s.SetOutcome("i4", Spoken(1, 5, ts), "Sure.")
	Must(t, err)
	pairs, rev, err := s.MemoryPairs("s1")
	Must(t, err)
	want := []store.Pair{
		{InferenceID: "i1", At: T0, Partner: "Tea?", Reply: "Yes, with milk."},
		{InferenceID: "i2", At: T0.Add(time.Second), Partner: "Shall we walk?", Reply: "Let's go out."},
	}
	if diff := cmp.Diff(want, pairs); diff != "" {
		t.Errorf("pairs (-want +got):\n%s", diff)
	}
	if r, _ := s.MemoryRev("s1"); r != rev {
		t.Errorf("MemoryRev %d, MemoryPairs rev %d", r, rev)
	}
	// none_fit without a text removes the pair.
	_, err = s.SetOutcome("i2", store.Outcome{Kind: store.OutcomeNoneFit, TimeToChoiceMS: -1, FirstAt: ts, At: ts}, "")
	Must(t, err)
	pairs, rev2, _ := s.MemoryPairs("s1")
	if len(pairs) != 1 || pairs[0].InferenceID != "i1" || rev2 == rev {
		t.Errorf("after none_fit: %+v (rev %d, was %d)", pairs, rev2, rev)
	}
	users, err := s.MemoryUsers()
	Must(t, err)
	wantUsers := []store.MemoryUser{
		{Subject: "s1", Tag: "s1", Keys: []string{"k"}, Pairs: 1, CreatedAt: T0, LastAt: ts, Rev: rev2},
		{Subject: "s2", Tag: "s2", Keys: []string{"k"}, Pairs: 0, CreatedAt: T0, Rev: users[1].Rev},
	}
	if diff := cmp.Diff(wantUsers, users); diff != "" {
		t.Errorf("MemoryUsers (-want +got):\n%s", diff)
	}
	if p, rev, err := s.MemoryPairs("s3"); err != nil || len(p) != 0 || p == nil || rev != 0 {
		t.Errorf("a user without remember: %v %d %v", p, rev, err)
	}
	if r, err := s.MemoryRev("nobody"); err != nil || r != 0 {
		t.Errorf("MemoryRev(unknown) = %d, %v", r, err)
	}
}

func memoryDeleteUser(t *testing.T, e Env) {
	s := e.S
	for i := range 5 {
		MustInfer(t, s, Inf{At: time.Duration(i) * time.Second, Key: "k", Subject: "victim", ID: fmt.Sprint("v", i), Version: "1", Cands: []string{"c"}, Partner: "p"})
		_, err := s.SetOutcome(fmt.Sprint("v", i), Spoken(1, 1, T0), "r")
		Must(t, err)
		MustInfer(t, s, Inf{At: time.Duration(i)*time.Second + 1, Key: "k", Subject: "other", ID: fmt.Sprint("o", i), Version: "1", Cands: []string{"c"}, Partner: "p"})
		_, err = s.SetOutcome(fmt.Sprint("o", i), Spoken(1, 1, T0), "r")
		Must(t, err)
	}
	MustInfer(t, s, Inf{At: time.Minute, Key: "k", Subject: "victim", ID: "pending", Version: "1", Cands: []string{"c"}, Partner: "p"})
	MustInfer(t, s, Inf{At: time.Minute, Key: "k", Subject: "plain", ID: "x", Version: "1", Cands: []string{"c"}})
	_, err := s.SetOutcome("x", Spoken(1, 1, T0), "")
	Must(t, err)

	d, err := s.DeleteUser("victim")
	Must(t, err)
	if !d.Key || d.Pairs != 5 || d.Outcomes != 5 || d.Pending != 6 {
		t.Errorf("deletion = %+v", d)
	}
	if pairs, rev, _ := s.MemoryPairs("victim"); len(pairs) != 0 || rev != 0 {
		t.Errorf("pairs left: %v (rev %d)", pairs, rev)
	}
	for _, id := range []string{"v3", "pending"} {
		_, err := s.Inference(id)
		wantErr(t, "a deleted user's inference "+id, err, store.ErrNotFound)
	}
	es, err := s.Logs(store.LogQuery{})
	Must(t, err)
	for _, le := range es {
		if le.Subject == "victim" && le.Inference != nil {
			t.Errorf("a deleted user's log entry keeps its inference id: %+v", le.Inference)
		}
		if le.Subject == "other" && le.Inference == nil {
			t.Error("another user's log entry lost its inference id")
		}
	}
	_, err = s.DeleteUser("victim")
	wantErr(t, "second deletion", err, store.ErrNotFound)
	_, err = s.DeleteUser("nobody")
	wantErr(t, "unknown user", err, store.ErrNotFound)
	// A user without memory: its outcomes go.
	d, err = s.DeleteUser("plain")
	Must(t, err)
	if d.Key || d.Outcomes != 1 {
		t.Errorf("deletion without memory = %+v", d)
	}
	// The other user is untouched; the counts stay.
	if pairs, _, _ := s.MemoryPairs("other"); len(pairs) != 5 {
		t.Errorf("other's pairs: %v", pairs)
	}
	if inf, err := s.Inference("o2"); err != nil || inf.Texts == nil || inf.Outcome == nil {
		t.Errorf("other's inference: %+v %v", inf, err)
	}
	if st, _ := s.Stats(T0, T0.Add(time.Hour)); st.TotalRequests != 12 || st.Outcomes != 5 {
		t.Errorf("stats after deletion: %d requests, %d outcomes", st.TotalRequests, st.Outcomes)
	}
	users, _ := s.MemoryUsers()
	if len(users) != 1 || users[0].Subject != "other" {
		t.Errorf("users after deletion: %+v", users)
	}
}

func memoryPrune(t *testing.T, e Env) {
	s := e.S
	MustInfer(t, s, Inf{At: 0, Key: "k", Subject: "old", ID: "a", Version: "1", Cands: []string{"x"}, Partner: "p1"})
	MustInfer(t, s, Inf{At: time.Hour, Key: "k", Subject: "new", ID: "b", Version: "1", Cands: []string{"y"}, Partner: "p2"})
	e.Clock.Add(2 * time.Hour)
	MustInfer(t, s, Inf{At: 2 * time.Hour, Key: "k", Subject: "new", ID: "c", Version: "1", Cands: []string{"z"}, Partner: "p3"})
	_, err := s.SetOutcome("a", Spoken(1, 1, T0), "x")
	Must(t, err)
	_, err = s.SetOutcome("b", Spoken(1, 1, T0), "y")
	Must(t, err)
	revNew, _ := s.MemoryRev("new")

	// Texts awaiting feedback before 1.5 h go; pairs before 30 min go.
	p, err := s.PruneMemory(T0.Add(30*time.Minute), T0.Add(90*time.Minute))
	Must(t, err)
	if p != (store.MemoryPrune{Pairs: 1, Pending: 2, Users: 1}) {
		t.Errorf("prune = %+v", p)
	}
	if r, _ := s.MemoryRev("old"); r != 0 {
		t.Error("an emptied user's memory was kept")
	}
	if pairs, _, _ := s.MemoryPairs("new"); len(pairs) != 1 || pairs[0].Reply != "y" {
		t.Errorf("new's pairs: %+v", pairs)
	}
	if inf, _ := s.Inference("c"); inf.Texts == nil {
		t.Error("recent texts were pruned")
	}
	if inf, _ := s.Inference("b"); inf.Texts != nil {
		t.Error("old texts were kept")
	}
	if r, _ := s.MemoryRev("new"); r != revNew {
		t.Errorf("rev changed without a pair change: %d -> %d", revNew, r)
	}
	// A zero pairsBefore keeps every pair.
	p, err = s.PruneMemory(time.Time{}, T0.Add(90*time.Minute))
	Must(t, err)
	if p != (store.MemoryPrune{}) {
		t.Errorf("second prune = %+v", p)
	}
}

func outcomesExport(t *testing.T, e Env) {
	s := e.S
	const n = 40
	for i := range n {
		in := Inf{At: time.Duration(i) * time.Second, Key: "k", Subject: "s", ID: fmt.Sprint("i", i), Version: "1", Cands: []string{"c"}}
		if i%2 == 0 {
			in.Partner = fmt.Sprint("partner ", i)
		}
		MustInfer(t, s, in)
		if i%3 != 0 {
			_, err := s.SetOutcome(in.ID, Spoken(1, 1, T0), fmt.Sprint("reply ", i))
			Must(t, err)
		}
	}
	var got []store.OutcomeRecord
	Must(t, s.Outcomes(T0, T0.Add(time.Hour), func(r store.OutcomeRecord) error {
		got = append(got, r)
		return nil
	}))
	want := 0
	for i := range n {
		if i%3 != 0 {
			want++
		}
	}
	if len(got) != want {
		t.Fatalf("%d outcomes, want %d", len(got), want)
	}
	for k, r := range got {
		if k > 0 && !got[k-1].Inference.At.Before(r.Inference.At) {
			t.Fatalf("not in time order at %d", k)
		}
		var i int
		fmt.Sscanf(r.Inference.ID, "i%d", &i)
		if r.Inference.Outcome == nil || r.Inference.KeyHash != "k" || r.Inference.PromptVersion != "1" {
			t.Errorf("%s: %+v", r.Inference.ID, r.Inference)
		}
		if (r.Pair != nil) != (i%2 == 0) {
			t.Errorf("%s: pair %+v", r.Inference.ID, r.Pair)
		}
		if r.Pair != nil && (r.Pair.Partner != fmt.Sprint("partner ", i) || r.Pair.Reply != fmt.Sprint("reply ", i)) {
			t.Errorf("%s: pair %+v", r.Inference.ID, r.Pair)
		}
	}
	stop := errors.New("stop")
	calls := 0
	if err := s.Outcomes(T0, T0.Add(time.Hour), func(store.OutcomeRecord) error { calls++; return stop }); !errors.Is(err, stop) || calls != 1 {
		t.Errorf("fn's error: %v after %d calls", err, calls)
	}
	calls = 0
	Must(t, s.Outcomes(T0.Add(10*time.Second), T0.Add(20*time.Second), func(store.OutcomeRecord) error { calls++; return nil }))
	if calls != 7 { // 10..19 without 12, 15, 18
		t.Errorf("%d outcomes in [10 s, 20 s), want 7", calls)
	}
}

// memoryLinks: a memory user is linked to the key that created it, under
// the user's tag; another key sees no link for that tag (it uses its own
// namespace) until an admin links it, directly or through a pairing; a
// link can be removed; deleting the user removes its links.
func memoryLinks(t *testing.T, e Env) {
	s := e.S
	MustCreateKey(t, s, "kA", T0)
	MustCreateKey(t, s, "kB", T0)
	MustInfer(t, s, Inf{Key: "kA", Subject: "sA-bob", ID: "i1", Version: "1", Cands: []string{"Yes."}, Partner: "Tea?", Tag: "tag-bob"})
	subject := func(key, tag string) string {
		t.Helper()
		subj, err := s.MemorySubject(key, tag)
		Must(t, err)
		return subj
	}
	if got := subject("kA", "tag-bob"); got != "sA-bob" {
		t.Errorf("the creating key's subject for its user = %q", got)
	}
	if got := subject("kB", "tag-bob"); got != "" {
		t.Errorf("another key's subject for the same user_id = %q, want none", got)
	}
	if got := subject("kA", "tag-alice"); got != "" {
		t.Errorf("the key's subject for another user_id = %q", got)
	}
	users := func() []store.MemoryUser {
		t.Helper()
		us, err := s.MemoryUsers()
		Must(t, err)
		return us
	}
	if us := users(); len(us) != 1 || us[0].Tag != "tag-bob" || !cmp.Equal(us[0].Keys, []string{"kA"}) {
		t.Fatalf("MemoryUsers = %+v", us)
	}

	wantErr(t, "LinkMemory of an unknown user", s.LinkMemory("kB", "nobody"), store.ErrNotFound)
	wantErr(t, "LinkMemory of an unknown key", s.LinkMemory("kZ", "sA-bob"), store.ErrNotFound)
	wantErr(t, "LinkMemory with an empty key", s.LinkMemory("", "sA-bob"), store.ErrInvalid)
	Must(t, s.LinkMemory("kB", "sA-bob"))
	Must(t, s.LinkMemory("kB", "sA-bob")) // again: no change
	if got := subject("kB", "tag-bob"); got != "sA-bob" {
		t.Errorf("the linked key's subject = %q", got)
	}
	if us := users(); !cmp.Equal(us[0].Keys, []string{"kA", "kB"}) {
		t.Errorf("linked keys = %v", us[0].Keys)
	}
	// The linked key's inferences and feedback use the memory: a pair.
	MustInfer(t, s, Inf{At: time.Second, Key: "kB", Subject: "sA-bob", ID: "i2", Version: "1", Cands: []string{"Later."}, Partner: "Walk?", Tag: "tag-bob"})
	_, err := s.SetOutcome("i2", Spoken(1, 6, T0.Add(time.Minute)), "Later.")
	Must(t, err)
	if pairs, _, _ := s.MemoryPairs("sA-bob"); len(pairs) != 1 || pairs[0].InferenceID != "i2" {
		t.Errorf("pairs after the linked key's feedback = %+v", pairs)
	}

	Must(t, s.UnlinkMemory("kB", "sA-bob"))
	wantErr(t, "UnlinkMemory twice", s.UnlinkMemory("kB", "sA-bob"), store.ErrNotFound)
	if got := subject("kB", "tag-bob"); got != "" {
		t.Errorf("the unlinked key's subject = %q", got)
	}

	// A pairing that names the memory links the key it mints.
	p := PairingFor("pair-bob", "bob's phone")
	p.MemorySubject = "sA-bob"
	Must(t, s.CreatePairing(p, 10, T0))
	_, err = s.RedeemPairing("pair-bob", "kC", T0.Add(time.Second))
	Must(t, err)
	if got := subject("kC", "tag-bob"); got != "sA-bob" {
		t.Errorf("the paired key's subject = %q", got)
	}
	// A pairing naming a memory deleted since links nothing.
	p = PairingFor("pair-gone", "gone")
	p.MemorySubject = "deleted-since"
	Must(t, s.CreatePairing(p, 10, T0))
	_, err = s.RedeemPairing("pair-gone", "kD", T0.Add(time.Second))
	Must(t, err)

	_, err = s.DeleteUser("sA-bob")
	Must(t, err)
	for _, k := range []string{"kA", "kC"} {
		if got := subject(k, "tag-bob"); got != "" {
			t.Errorf("after DeleteUser, %s's subject = %q", k, got)
		}
	}
	if us := users(); len(us) != 0 {
		t.Errorf("MemoryUsers after DeleteUser = %+v", us)
	}
}

// statsKSR checks that an outcome keeps its steering mode and reported
// actions, and the keystroke saving rate per mode and prompt version.
func statsKSR(t *testing.T, e Env) {
	s := e.S
	at := func(m int) time.Duration { return time.Duration(m) * time.Minute }
	MustInfer(t, s, Inf{At: at(0), Key: "k1", Subject: "u1", ID: "i1", Version: "1", Cands: []string{"I would like tea"}})
	MustInfer(t, s, Inf{At: at(1), Key: "k1", Subject: "u1", ID: "i2", Version: "1", Cands: []string{"Yes"}})
	MustInfer(t, s, Inf{At: at(2), Key: "k1", Subject: "u1", ID: "i3", Version: "2", Cands: []string{"No thanks"}})
	MustInfer(t, s, Inf{At: at(3), Key: "k1", Subject: "u1", ID: "i4", Version: "2", Cands: []string{"Later"}})
	ts := T0.Add(time.Hour)
	words := store.Outcome{Kind: store.OutcomeSpoken, Rank: 1, SpokenChars: 16, KeystrokesSaved: 15, TimeToChoiceMS: -1, FirstAt: ts, At: ts,
		SteerMode: "words", KeysPressed: 4, Selections: 1, ActionsReported: true}
	for id, o := range map[string]store.Outcome{
		"i1": words,
		"i2": {Kind: store.OutcomeSpoken, Rank: 1, SpokenChars: 3, KeystrokesSaved: 2, TimeToChoiceMS: -1, FirstAt: ts, At: ts, Selections: 1, ActionsReported: true},
		"i3": {Kind: store.OutcomeSpoken, Rank: 1, SpokenChars: 9, KeystrokesSaved: 8, TimeToChoiceMS: -1, FirstAt: ts, At: ts, SteerMode: "prefix"},
		"i4": {Kind: store.OutcomeNoneFit, TimeToChoiceMS: -1, FirstAt: ts, At: ts, KeysPressed: 3, ActionsReported: true},
	} {
		_, err := s.SetOutcome(id, o, "")
		Must(t, err)
	}
	got, err := s.Inference("i1")
	Must(t, err)
	if got.Outcome == nil || !cmp.Equal(*got.Outcome, words) {
		t.Errorf("outcome read back = %+v, want %+v", got.Outcome, words)
	}
	st, err := s.Stats(T0, T0.Add(10*time.Minute))
	Must(t, err)
	want := []store.KSRStats{
		{SteerMode: "none", PromptVersion: "1", Replies: 1, Chars: 3, Actions: 1},
		{SteerMode: "words", PromptVersion: "1", Replies: 1, Chars: 16, Actions: 5},
	}
	if diff := cmp.Diff(want, st.KSR); diff != "" {
		t.Errorf("Stats.KSR (-want +got):\n%s", diff)
	}
	if r := st.KSR[1].Rate(); r < 0.6874 || r > 0.6876 {
		t.Errorf("KSR of iwlt + one pick = %v, want 0.6875", r)
	}
}
