package recall

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/replyd/replyd/engine"
	"github.com/replyd/replyd/store"
	"github.com/replyd/replyd/store/bolt"
)

func pairs(kv ...string) []store.Pair {
	var out []store.Pair
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, store.Pair{InferenceID: fmt.Sprint("i", i/2), Partner: kv[i], Reply: kv[i+1]})
	}
	return out
}

func replies(ps []store.Pair) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Reply)
	}
	return out
}

func TestSearch(t *testing.T) {
	ix := Build(pairs(
		"Would you like some tea?", "Yes, milk no sugar.",
		"Shall we go for a walk?", "Only if it is dry.",
		"Do you want tea or coffee?", "Tea, always.",
		"How was the physio today?", "Hard work but good.",
		"Would you like some cake?", "Just a small piece.",
		"Would you like tea now?", "Yes, milk no sugar!", // same reply as the first
		"Is your sister coming?", "At three.",
	))
	for _, c := range []struct {
		query string
		k     int
		want  []string
	}{
		// Most shared words weighted by rarity first.
		{"Would you like a cup of tea?", 2, []string{"Yes, milk no sugar!", "Just a small piece."}},
		// Equal scores: the newer first; the older repeat of its reply is
		// skipped.
		{"TEA?", 3, []string{"Yes, milk no sugar!", "Tea, always."}},
		// "go" alone is under minRelScore of the physio match.
		{"How did the physio go?", 3, []string{"Hard work but good."}},
		{"Nothing in common here", 3, nil},
		{"", 3, nil},
		{"tea", 0, nil},
	} {
		if got := replies(ix.Search(c.query, c.k)); !cmp.Equal(got, c.want) {
			t.Errorf("Search(%q, %d) = %q, want %q", c.query, c.k, got, c.want)
		}
	}
	if got := Build(nil).Search("tea", 3); got != nil {
		t.Errorf("empty index: %v", got)
	}
}

// countingSource is a Source over a fixed set of pairs whose revision the
// test moves, counting the reads.
type countingSource struct {
	mu    sync.Mutex
	rev   map[string]uint64
	pairs map[string][]store.Pair
	loads int
}

func (s *countingSource) MemoryRev(u string) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rev[u], nil
}

func (s *countingSource) MemoryPairs(u string) ([]store.Pair, uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.loads++
	return s.pairs[u], s.rev[u], nil
}

func TestMemoryFollowsTheRevision(t *testing.T) {
	src := &countingSource{
		rev:   map[string]uint64{"a": 1, "b": 1, "c": 1},
		pairs: map[string][]store.Pair{"a": pairs("Tea?", "Yes."), "b": pairs("Walk?", "No."), "c": pairs("Cake?", "Please.")},
	}
	m := New(src, 2)
	recall := func(u, q string) []engine.Example {
		t.Helper()
		ex, err := m.Recall(context.Background(), u, q, 3)
		if err != nil {
			t.Fatal(err)
		}
		return ex
	}
	if got := recall("a", "tea"); !cmp.Equal(got, []engine.Example{{Partner: "Tea?", Reply: "Yes."}}) {
		t.Errorf("recall = %v", got)
	}
	recall("a", "tea")
	if src.loads != 1 {
		t.Errorf("%d loads for an unchanged user, want 1", src.loads)
	}
	src.mu.Lock()
	src.rev["a"], src.pairs["a"] = 2, pairs("Tea?", "Yes.", "More tea?", "No more.")
	src.mu.Unlock()
	if got := recall("a", "more tea"); len(got) != 1 || got[0].Reply != "No more." || src.loads != 2 {
		t.Errorf("after a new pair: %v (%d loads)", got, src.loads)
	}
	// Two users fit; a third evicts the least recently used (b).
	recall("b", "walk")
	recall("a", "tea")
	recall("c", "cake")
	loads := src.loads
	recall("a", "tea")
	recall("b", "walk")
	if src.loads != loads+1 {
		t.Errorf("LRU: %d reloads, want 1 (b)", src.loads-loads)
	}
	// A deleted user (revision 0) has nothing, and is not reloaded.
	src.mu.Lock()
	src.rev["a"] = 0
	src.mu.Unlock()
	if got := recall("a", "tea"); got != nil {
		t.Errorf("deleted user: %v", got)
	}
}

// TestRecallFromTheStore goes through the real store: a remembered
// inference, its feedback, then the pair is recalled; after deletion,
// nothing is.
func TestRecallFromTheStore(t *testing.T) {
	db, err := bolt.Open(filepath.Join(t.TempDir(), "replyd.db"), bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.AppendLog(store.LogEntry{StreamName: store.StreamInfer, Subject: "s", Status: 200,
		Inference: &store.InferenceInfo{ID: "inf_1", CandidateChars: []int{4}, Remember: &store.RememberedTexts{Partner: "Fancy a cuppa?", Candidates: []string{"Yes."}}}})
	if err != nil {
		t.Fatal(err)
	}
	m := New(db, 0)
	if ex, _ := m.Recall(context.Background(), "s", "a cuppa?", 3); ex != nil {
		t.Errorf("before feedback: %v", ex)
	}
	now := time.Now()
	if _, err := db.SetOutcome("inf_1", store.Outcome{Kind: store.OutcomeEdited, Rank: 1, FirstAt: now, At: now, TimeToChoiceMS: -1}, "Go on then."); err != nil {
		t.Fatal(err)
	}
	ex, err := m.Recall(context.Background(), "s", "Another cuppa?", 3)
	if err != nil || !cmp.Equal(ex, []engine.Example{{Partner: "Fancy a cuppa?", Reply: "Go on then."}}) {
		t.Errorf("after feedback: %v %v", ex, err)
	}
	if _, err := db.DeleteUser("s"); err != nil {
		t.Fatal(err)
	}
	if ex, _ := m.Recall(context.Background(), "s", "Another cuppa?", 3); ex != nil {
		t.Errorf("after deletion: %v", ex)
	}
}

// syntheticPairs makes n everyday exchanges from a vocabulary of topics.
func syntheticPairs(n int) []store.Pair {
	r := rand.New(rand.NewPCG(1, 2))
	topics := []string{"tea", "coffee", "walk", "park", "physio", "doctor", "sister", "brother", "music", "radio",
		"lunch", "dinner", "breakfast", "bath", "bed", "garden", "rain", "news", "football", "book", "film", "shop",
		"nurse", "pain", "pillow", "window", "blanket", "visit", "phone", "photo"}
	openers := []string{"Would you like", "Shall we talk about the", "Do you want the", "How about some", "What do you think of the", "Is it time for the"}
	out := make([]store.Pair, n)
	for i := range out {
		a, b := topics[r.IntN(len(topics))], topics[r.IntN(len(topics))]
		out[i] = store.Pair{
			InferenceID: fmt.Sprint("inf_", i),
			Partner:     fmt.Sprintf("%s %s and the %s later today?", openers[r.IntN(len(openers))], a, b),
			Reply:       fmt.Sprintf("%s yes, %s maybe %d", strings.ToUpper(a[:1])+a[1:], b, i),
		}
	}
	return out
}

// BenchmarkRecall10k measures one recall for a user with 10,000 pairs whose
// index is built (the case of every inference but the first after a change).
func BenchmarkRecall10k(b *testing.B) {
	src := &countingSource{rev: map[string]uint64{"u": 1}, pairs: map[string][]store.Pair{"u": syntheticPairs(10_000)}}
	m := New(src, 0)
	ctx := context.Background()
	if ex, _ := m.Recall(ctx, "u", "Would you like some tea in the garden?", 3); len(ex) != 3 {
		b.Fatalf("recall = %v", ex)
	}
	b.ResetTimer()
	for b.Loop() {
		if _, err := m.Recall(ctx, "u", "Would you like some tea in the garden?", 3); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkBuild10k measures building the index of 10,000 pairs: what the
// first recall after a change of the user's pairs pays on top.
func BenchmarkBuild10k(b *testing.B) {
	ps := syntheticPairs(10_000)
	for b.Loop() {
		Build(ps)
	}
}

// BenchmarkRecallStore10k is BenchmarkRecall10k with the store's revision
// read from a real bbolt file, as in production.
func BenchmarkRecallStore10k(b *testing.B) {
	db, err := bolt.Open(filepath.Join(b.TempDir(), "replyd.db"), bolt.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	ps := syntheticPairs(10_000)
	for i := 0; i < len(ps); i += 500 {
		// Remembered inferences, then their feedback, in batches.
		var wg sync.WaitGroup
		for j := i; j < min(i+500, len(ps)); j++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				id := ps[j].InferenceID
				if err := db.AppendLog(store.LogEntry{StreamName: store.StreamInfer, Subject: "u", Status: 200,
					Inference: &store.InferenceInfo{ID: id, CandidateChars: []int{1}, Remember: &store.RememberedTexts{Partner: ps[j].Partner, Candidates: []string{"x"}}}}); err != nil {
					b.Error(err)
				}
			}()
		}
		wg.Wait()
	}
	now := time.Now()
	for _, p := range ps {
		if _, err := db.SetOutcome(p.InferenceID, store.Outcome{Kind: store.OutcomeTyped, FirstAt: now, At: now}, p.Reply); err != nil {
			b.Fatal(err)
		}
	}
	m := New(db, 0)
	ctx := context.Background()
	t0 := time.Now()
	if ex, _ := m.Recall(ctx, "u", "Would you like some tea in the garden?", 3); len(ex) != 3 {
		b.Fatalf("recall = %v", ex)
	}
	first := time.Since(t0)
	b.ResetTimer()
	for b.Loop() {
		if _, err := m.Recall(ctx, "u", "Would you like some tea in the garden?", 3); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(first.Microseconds()), "first-µs")
}

// TestLargeMemoryRebuildsInTheBackground: a user with syncRebuild pairs or
// more is answered from the previous index while the new one is built.
func TestLargeMemoryRebuildsInTheBackground(t *testing.T) {
	big := syntheticPairs(syncRebuild)
	src := &countingSource{rev: map[string]uint64{"u": 1}, pairs: map[string][]store.Pair{"u": big}}
	m := New(src, 0)
	ctx := context.Background()
	if ex, _ := m.Recall(ctx, "u", "unicorn", 3); ex != nil {
		t.Fatalf("recall = %v", ex)
	}
	src.mu.Lock()
	src.rev["u"] = 2
	src.pairs["u"] = append(append([]store.Pair(nil), big...), store.Pair{Partner: "A unicorn?", Reply: "Magic!"})
	src.mu.Unlock()
	if ex, _ := m.Recall(ctx, "u", "unicorn", 3); ex != nil {
		t.Fatalf("the first recall after the change waited for the rebuild: %v", ex)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ex, err := m.Recall(ctx, "u", "unicorn", 3)
		if err != nil {
			t.Fatal(err)
		}
		if len(ex) == 1 && ex[0].Reply == "Magic!" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the new pair never arrived")
		}
		time.Sleep(time.Millisecond)
	}
}
