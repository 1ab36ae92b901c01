package store

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	bolt "go.etcd.io/bbolt"
)

// inf describes one infer log entry for the tests.
type inf struct {
	at      time.Duration // after t0
	key     string
	subject string
	id      string // "" for a failed call
	version string
	cands   []string
	partner string // non-empty: remember
	status  int
	code    string
	latency int64
}

// MustInfer appends the log entry of one infer call.
func MustInfer(tb testing.TB, db *DB, i inf) {
	tb.Helper()
	if i.status == 0 {
		i.status = 200
	}
	e := LogEntry{
		Timestamp: t0.Add(i.at), Level: LevelInfo, Message: "infer", ResourceType: ResourceAPIKey,
		ResourceID: i.key, StreamName: StreamInfer, Subject: i.subject, Status: i.status,
		LatencyMS: i.latency, ErrorCode: i.code,
	}
	if i.id != "" {
		chars := make([]int, len(i.cands))
		for n, c := range i.cands {
			chars[n] = len([]rune(c))
		}
		e.Inference = &InferenceInfo{ID: i.id, PromptVersion: i.version, CandidateChars: chars}
		if i.partner != "" {
			e.Inference.Remember = &RememberedTexts{Partner: i.partner, Candidates: i.cands}
		}
	}
	MustAppend(tb, db, e)
}

func spoken(rank, chars int, at time.Time) Outcome {
	return Outcome{Kind: OutcomeSpoken, Rank: rank, SpokenChars: chars, KeystrokesSaved: chars - 1, TimeToChoiceMS: -1, FirstAt: at, At: at}
}

func TestInferenceAndOutcome(t *testing.T) {
	db, _ := MustOpen(t)
	MustInfer(t, db, inf{key: "k1", subject: "s1", id: "inf_a", version: "3", cands: []string{"Yes please.", "No."}})

	got, err := db.Inference("inf_a")
	Must(t, err)
	want := Inference{ID: "inf_a", At: t0, KeyHash: "k1", Subject: "s1", PromptVersion: "3", CandidateChars: []int{11, 3}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Inference (-want +got):\n%s", diff)
	}
	if _, err := db.Inference("inf_nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("unknown id: %v, want ErrNotFound", err)
	}
	if _, err := db.SetOutcome("inf_nope", spoken(1, 11, t0), ""); !errors.Is(err, ErrNotFound) {
		t.Errorf("SetOutcome of an unknown id: %v, want ErrNotFound", err)
	}

	o := spoken(1, 11, t0.Add(time.Minute))
	rev, err := db.SetOutcome("inf_a", o, "ignored: no remember")
	Must(t, err)
	if rev != 0 {
		t.Errorf("rev = %d for an inference without remember", rev)
	}
	got, _ = db.Inference("inf_a")
	want.Outcome = &o
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("after SetOutcome (-want +got):\n%s", diff)
	}
	// No text of an inference without remember reaches the file.
	if b, _ := os.ReadFile(db.Path()); bytes.Contains(b, []byte("Yes please")) || bytes.Contains(b, []byte("ignored: no")) {
		t.Error("candidate or reply text in the data file")
	}

	// The log entry records the id and the prompt version, never text.
	es, _ := db.Logs(LogQuery{})
	if es[0].Inference == nil || es[0].Inference.ID != "inf_a" || es[0].Inference.PromptVersion != "3" || es[0].Inference.Remember != nil {
		t.Errorf("log entry = %+v", es[0])
	}

	// Pruning the log entry forgets the id.
	_, err = db.PruneLogs(t0.Add(time.Second), 0)
	Must(t, err)
	if _, err := db.Inference("inf_a"); !errors.Is(err, ErrNotFound) {
		t.Errorf("after prune: %v, want ErrNotFound", err)
	}
}

// TestStatsOutcomes checks every counter of Stats on a mix of keys,
// versions, errors and outcomes, and the series' outcome counts.
func TestStatsOutcomes(t *testing.T) {
	db, _ := MustOpen(t)
	at := func(m int) time.Duration { return time.Duration(m) * time.Minute }
	MustInfer(t, db, inf{at: at(0), key: "k1", subject: "u1", id: "i1", version: "1", cands: []string{"aaaa", "bb"}, latency: 100})
	MustInfer(t, db, inf{at: at(1), key: "k1", subject: "u1", id: "i2", version: "1", cands: []string{"aaaa", "bb"}, latency: 300})
	MustInfer(t, db, inf{at: at(2), key: "k2", subject: "u2", id: "i3", version: "2", cands: []string{"cc"}, latency: 200})
	MustInfer(t, db, inf{at: at(3), key: "k2", subject: "u2", status: 429, code: "rate_limited", latency: 1})
	MustInfer(t, db, inf{at: at(4), key: "k1", subject: "u3", status: 502, code: "llm_failed", latency: 5000})
	MustInfer(t, db, inf{at: at(5), key: "k2", subject: "u2", id: "i4", version: "2", cands: []string{"dd"}, latency: 400})

	ts := t0.Add(time.Hour)
	for id, o := range map[string]Outcome{
		"i1": spoken(1, 4, ts),
		"i2": {Kind: OutcomeEdited, Rank: 2, SpokenChars: 5, KeystrokesSaved: 2, TimeToChoiceMS: 3000, FirstAt: ts, At: ts},
		"i3": {Kind: OutcomeNoneFit, TimeToChoiceMS: 9000, FirstAt: ts, At: ts},
		"i4": {Kind: OutcomeTyped, SpokenChars: 7, TimeToChoiceMS: 5000, FirstAt: ts, At: ts},
	} {
		_, err := db.SetOutcome(id, o, "")
		Must(t, err)
	}

	got, err := db.Stats(t0, t0.Add(10*time.Minute))
	Must(t, err)
	want := Stats{
		TotalRequests: 6, ActiveUsers: 3,
		Errors:  map[string]int{"rate_limited": 1, "llm_failed": 1},
		Latency: Percentiles{N: 4, P50: 200, P95: 400},
		OutcomeStats: OutcomeStats{
			Outcomes: 4, Accepted: 2, NoneFit: 1, RankCounts: map[int]int{1: 1, 2: 1}, KeystrokesSaved: 3 + 2,
			TimeToChoice: Percentiles{N: 3, P50: 5000, P95: 9000},
		},
		ByKey: []KeyStats{
			{KeyHash: "k1", Requests: 3, Errors: 1, OutcomeStats: OutcomeStats{Outcomes: 2, Accepted: 2, RankCounts: map[int]int{1: 1, 2: 1}, KeystrokesSaved: 5, TimeToChoice: Percentiles{N: 1, P50: 3000, P95: 3000}}},
			{KeyHash: "k2", Requests: 3, Errors: 1, OutcomeStats: OutcomeStats{Outcomes: 2, NoneFit: 1, RankCounts: map[int]int{}, TimeToChoice: Percentiles{N: 2, P50: 5000, P95: 9000}}},
		},
		ByPromptVersion: []VersionStats{
			{Version: "1", Inferences: 2, Outcomes: 2, Accepted: 2},
			{Version: "2", Inferences: 2, Outcomes: 2, Accepted: 0},
		},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Stats (-want +got):\n%s", diff)
	}

	series, err := db.StatsSeries(t0, t0.Add(6*time.Minute), 2*time.Minute)
	Must(t, err)
	wantSeries := []StatsBucket{
		{Start: t0, TotalRequests: 2, ActiveUsers: 1, Outcomes: 2, Accepted: 2},
		{Start: t0.Add(2 * time.Minute), TotalRequests: 2, ActiveUsers: 1, Outcomes: 1},
		{Start: t0.Add(4 * time.Minute), TotalRequests: 2, ActiveUsers: 2, Outcomes: 1},
	}
	if diff := cmp.Diff(wantSeries, series); diff != "" {
		t.Errorf("StatsSeries (-want +got):\n%s", diff)
	}
}

func TestPercentiles(t *testing.T) {
	for _, c := range []struct {
		in   []int64
		want Percentiles
	}{
		{nil, Percentiles{}},
		{[]int64{7}, Percentiles{N: 1, P50: 7, P95: 7}},
		{[]int64{4, 1, 3, 2}, Percentiles{N: 4, P50: 2, P95: 4}},
		{[]int64{10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110, 120, 130, 140, 150, 160, 170, 180, 190, 200}, Percentiles{N: 20, P50: 100, P95: 190}},
	} {
		if got := percentiles(c.in); got != c.want {
			t.Errorf("percentiles(%v) = %+v, want %+v", c.in, got, c.want)
		}
	}
}

// TestLegacyIndexRows: infer_index values of schema 1 (the subject alone)
// still count.
func TestLegacyIndexRows(t *testing.T) {
	db, _ := MustOpen(t)
	Must(t, db.bolt.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketInferIdx).Put(timeKey(t0, 1), []byte("0123abcd"))
	}))
	s, err := db.Stats(t0, t0.Add(time.Second))
	Must(t, err)
	if diff := cmp.Diff(counts(1, 1), s); diff != "" {
		t.Errorf("Stats (-want +got):\n%s", diff)
	}
}

func TestOpenUpgradesSchema1(t *testing.T) {
	path := filepath.Join(t.TempDir(), "replyd.db")
	// A schema 1 file: its buckets and version only.
	b, err := bolt.Open(path, 0o600, nil)
	Must(t, err)
	Must(t, b.Update(func(tx *bolt.Tx) error {
		for _, name := range schemaBuckets[1] {
			if _, err := tx.CreateBucket(name); err != nil {
				return err
			}
		}
		return tx.Bucket(bucketMeta).Put(metaSchemaVersion, u64(1))
	}))
	Must(t, b.Close())
	ro, err := Open(path, Options{ReadOnly: true})
	Must(t, err) // a backup of an old file still works read-only
	Must(t, ro.Close())
	db := MustOpenAt(t, path, Options{})
	MustInfer(t, db, inf{key: "k", subject: "s", id: "i", version: "1", cands: []string{"x"}, partner: "p"})
	if _, err := db.Inference("i"); err != nil {
		t.Fatal(err)
	}
}

// userKey reads the user's raw AES key (a test of what deletion destroys).
func userKey(tb testing.TB, db *DB, subject string) []byte {
	tb.Helper()
	var key []byte
	Must(tb, db.view(func(tx *bolt.Tx) error {
		u, err := getUser(tx, subject)
		if u != nil {
			key = append([]byte(nil), u.Key...)
		}
		return err
	}))
	return key
}

func TestMemoryPairs(t *testing.T) {
	db, _ := MustOpen(t)
	MustInfer(t, db, inf{at: 0, key: "k", subject: "s1", id: "i1", version: "1", cands: []string{"Yes, with milk.", "No thanks."}, partner: "Tea?"})
	MustInfer(t, db, inf{at: time.Second, key: "k", subject: "s1", id: "i2", version: "1", cands: []string{"Outside.", "Inside."}, partner: "Shall we walk?"})
	MustInfer(t, db, inf{at: 2 * time.Second, key: "k", subject: "s2", id: "i3", version: "1", cands: []string{"Fine."}, partner: "How are you?"})

	got, err := db.Inference("i1")
	Must(t, err)
	if !got.Remembered || got.Texts == nil || got.Texts.Partner != "Tea?" || !cmp.Equal(got.Texts.Candidates, []string{"Yes, with milk.", "No thanks."}) {
		t.Fatalf("remembered texts = %+v", got)
	}
	rev0, _ := db.MemoryRev("s1")

	ts := t0.Add(time.Minute)
	rev, err := db.SetOutcome("i1", spoken(1, 15, ts), "Yes, with milk.")
	Must(t, err)
	if rev != rev0+1 {
		t.Errorf("rev %d, want %d", rev, rev0+1)
	}
	_, err = db.SetOutcome("i2", Outcome{Kind: OutcomeTyped, SpokenChars: 12, TimeToChoiceMS: -1, FirstAt: ts, At: ts}, "Let's go out.")
	Must(t, err)
	pairs, rev, err := db.MemoryPairs("s1")
	Must(t, err)
	want := []Pair{
		{InferenceID: "i1", At: t0, Partner: "Tea?", Reply: "Yes, with milk."},
		{InferenceID: "i2", At: t0.Add(time.Second), Partner: "Shall we walk?", Reply: "Let's go out."},
	}
	if diff := cmp.Diff(want, pairs); diff != "" {
		t.Errorf("pairs (-want +got):\n%s", diff)
	}
	if r, _ := db.MemoryRev("s1"); r != rev {
		t.Errorf("MemoryRev %d, MemoryPairs rev %d", r, rev)
	}

	// A replacement replaces the pair; none_fit without a text removes it.
	_, err = db.SetOutcome("i2", Outcome{Kind: OutcomeNoneFit, TimeToChoiceMS: -1, FirstAt: ts, At: ts}, "")
	Must(t, err)
	pairs, _, _ = db.MemoryPairs("s1")
	if len(pairs) != 1 || pairs[0].InferenceID != "i1" {
		t.Errorf("after none_fit: %+v", pairs)
	}

	users, err := db.MemoryUsers()
	Must(t, err)
	wantUsers := []MemoryUser{
		{Subject: "s1", Pairs: 1, CreatedAt: t0, LastAt: ts, Rev: rev + 1},
		{Subject: "s2", Pairs: 0, CreatedAt: t0},
	}
	if diff := cmp.Diff(wantUsers, users); diff != "" {
		t.Errorf("MemoryUsers (-want +got):\n%s", diff)
	}
	if p, rev, err := db.MemoryPairs("nobody"); err != nil || len(p) != 0 || rev != 0 {
		t.Errorf("unknown user: %v %d %v", p, rev, err)
	}

	// Texts are only ever stored encrypted.
	b, err := os.ReadFile(db.Path())
	Must(t, err)
	for _, s := range []string{"Tea?", "with milk", "Shall we walk", "go out", "How are you"} {
		if bytes.Contains(b, []byte(s)) {
			t.Errorf("%q in the data file in clear", s)
		}
	}
}

// TestDeleteUserLeavesNoKeyOrText deletes a user and finds no byte of its
// key or its texts in the file or a backup taken afterwards. The texts are
// never in clear; the key is, until deletion, and a deletion without the
// scrub leaves it in a free page (the control that shows the check can
// fail).
func TestDeleteUserLeavesNoKeyOrText(t *testing.T) {
	const marker = "MARKER-7f3c9a-tea-with-honey"
	setup := func(t *testing.T) (*DB, []byte) {
		db, _ := MustOpen(t)
		for i := range 20 {
			MustInfer(t, db, inf{at: time.Duration(i) * time.Second, key: "k", subject: "victim", id: fmt.Sprint("v", i), version: "1",
				cands: []string{marker + " candidate"}, partner: marker + " partner"})
			_, err := db.SetOutcome(fmt.Sprint("v", i), spoken(1, 10, t0), marker+" reply")
			Must(t, err)
			MustInfer(t, db, inf{at: time.Duration(i)*time.Second + 1, key: "k", subject: "other", id: fmt.Sprint("o", i), version: "1",
				cands: []string{"other candidate"}, partner: "other partner"})
		}
		key := userKey(t, db, "victim")
		if len(key) != userKeySize {
			t.Fatalf("no key for the user")
		}
		key = []byte(base64.StdEncoding.EncodeToString(key)) // as the record holds it
		b, err := os.ReadFile(db.Path())
		Must(t, err)
		if !bytes.Contains(b, key) {
			t.Fatal("the user's key is not in the file before deletion: the test could not fail")
		}
		return db, key
	}
	inFile := func(t *testing.T, db *DB, needle []byte) (file, backup bool) {
		b, err := os.ReadFile(db.Path())
		Must(t, err)
		var buf bytes.Buffer
		_, err = db.Backup(&buf)
		Must(t, err)
		return bytes.Contains(b, needle), bytes.Contains(buf.Bytes(), needle)
	}

	t.Run("control: without the scrub the key survives in a free page", func(t *testing.T) {
		db, key := setup(t)
		_, err := db.deleteUserRows("victim")
		Must(t, err)
		if f, _ := inFile(t, db, key); !f {
			t.Skip("bbolt happened to reuse the page; the control proves nothing this run")
		}
	})

	db, key := setup(t)
	d, err := db.DeleteUser("victim")
	Must(t, err)
	if !d.Key || d.Pairs != 20 || d.Outcomes != 20 || d.Pending != 20 || d.ScrubbedPages == 0 {
		t.Errorf("deletion = %+v", d)
	}
	for _, needle := range [][]byte{key, []byte(marker), []byte("MARKER")} {
		if f, bk := inFile(t, db, needle); f || bk {
			t.Errorf("%q left after deletion: file %v, backup %v", needle[:6], f, bk)
		}
	}
	Must(t, db.Check())
	if pairs, rev, _ := db.MemoryPairs("victim"); len(pairs) != 0 || rev != 0 {
		t.Errorf("pairs left: %v", pairs)
	}
	if _, err := db.Inference("v3"); !errors.Is(err, ErrNotFound) {
		t.Errorf("a deleted user's inference can still be reported on: %v", err)
	}
	if _, err := db.DeleteUser("victim"); !errors.Is(err, ErrNotFound) {
		t.Errorf("second deletion: %v, want ErrNotFound", err)
	}
	// The other user is untouched; the counts stay.
	if pairs, _, _ := db.MemoryPairs("other"); len(pairs) != 0 {
		t.Errorf("other's pairs: %v", pairs)
	}
	if inf, err := db.Inference("o5"); err != nil || inf.Texts == nil {
		t.Errorf("other's inference: %+v %v", inf, err)
	}
	if s, _ := db.Stats(t0, t0.Add(time.Hour)); s.TotalRequests != 40 || s.Outcomes != 0 {
		t.Errorf("stats after deletion: %d requests, %d outcomes", s.TotalRequests, s.Outcomes)
	}
}

// TestScrubWithConcurrentUse scrubs while readers and writers run; the
// file stays consistent and nothing acknowledged is lost.
func TestScrubWithConcurrentUse(t *testing.T) {
	db, _ := MustOpen(t)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var appended sync.Map
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				id := fmt.Sprintf("w%d-%d", w, i)
				if err := db.AppendLog(LogEntry{Timestamp: t0.Add(time.Duration(i) * time.Millisecond), StreamName: StreamInfer,
					Subject: "s", Inference: &InferenceInfo{ID: id, CandidateChars: []int{3}}}); err != nil {
					t.Error(err)
					return
				}
				appended.Store(id, true)
				if _, err := db.Stats(t0, t0.Add(time.Hour)); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	for range 20 {
		_, err := db.PruneLogs(t0.Add(5*time.Millisecond), 10)
		Must(t, err)
		_, _, err = db.ScrubFreePages()
		Must(t, err)
	}
	close(stop)
	wg.Wait()
	Must(t, db.Check())
	appended.Range(func(k, _ any) bool {
		id := k.(string)
		var i int
		fmt.Sscanf(id[strings.Index(id, "-")+1:], "%d", &i)
		if _, err := db.Inference(id); err != nil && i >= 5 {
			t.Errorf("%s lost: %v", id, err)
		}
		return true
	})
}

func TestPruneMemory(t *testing.T) {
	db, _ := MustOpen(t)
	MustInfer(t, db, inf{at: 0, key: "k", subject: "old", id: "a", version: "1", cands: []string{"x"}, partner: "p1"})
	MustInfer(t, db, inf{at: time.Hour, key: "k", subject: "new", id: "b", version: "1", cands: []string{"y"}, partner: "p2"})
	MustInfer(t, db, inf{at: 2 * time.Hour, key: "k", subject: "new", id: "c", version: "1", cands: []string{"z"}, partner: "p3"})
	_, err := db.SetOutcome("a", spoken(1, 1, t0), "x")
	Must(t, err)
	_, err = db.SetOutcome("b", spoken(1, 1, t0), "y")
	Must(t, err)
	revNew, _ := db.MemoryRev("new")

	// Texts awaiting feedback before 1.5 h go; pairs before 30 min go.
	p, err := db.PruneMemory(t0.Add(30*time.Minute), t0.Add(90*time.Minute))
	Must(t, err)
	if p != (MemoryPrune{Pairs: 1, Pending: 2, Users: 1}) {
		t.Errorf("prune = %+v", p)
	}
	if k := userKey(t, db, "old"); k != nil {
		t.Error("an emptied user's key was kept")
	}
	if pairs, _, _ := db.MemoryPairs("new"); len(pairs) != 1 || pairs[0].Reply != "y" {
		t.Errorf("new's pairs: %+v", pairs)
	}
	if inf, _ := db.Inference("c"); inf.Texts == nil {
		t.Error("recent texts were pruned")
	}
	if inf, _ := db.Inference("b"); inf.Texts != nil {
		t.Error("old texts were kept")
	}
	if r, _ := db.MemoryRev("new"); r != revNew {
		t.Errorf("rev changed without a pair change: %d -> %d", revNew, r)
	}
	// A zero pairsBefore keeps every pair.
	p, err = db.PruneMemory(time.Time{}, t0.Add(90*time.Minute))
	Must(t, err)
	if p != (MemoryPrune{}) {
		t.Errorf("second prune = %+v", p)
	}
}

func TestOutcomesExport(t *testing.T) {
	db, _ := MustOpen(t)
	defer func(n int) { outcomePage = n }(outcomePage)
	outcomePage = 7
	n := outcomePage*2 + 5
	for i := range n {
		i := i
		e := inf{at: time.Duration(i) * time.Second, key: "k", subject: "s", id: fmt.Sprint("i", i), version: "1", cands: []string{"c"}}
		if i%2 == 0 {
			e.partner = fmt.Sprint("partner ", i)
		}
		MustInfer(t, db, e)
		if i%3 != 0 {
			_, err := db.SetOutcome(e.id, spoken(1, 1, t0), fmt.Sprint("reply ", i))
			Must(t, err)
		}
	}
	var got []OutcomeRecord
	Must(t, db.Outcomes(t0, t0.Add(time.Hour), func(r OutcomeRecord) error {
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
		if (r.Pair != nil) != (i%2 == 0) {
			t.Errorf("%s: pair %+v", r.Inference.ID, r.Pair)
		}
		if r.Pair != nil && (r.Pair.Partner != fmt.Sprint("partner ", i) || r.Pair.Reply != fmt.Sprint("reply ", i)) {
			t.Errorf("%s: pair %+v", r.Inference.ID, r.Pair)
		}
	}
	stop := errors.New("stop")
	calls := 0
	if err := db.Outcomes(t0, t0.Add(time.Hour), func(OutcomeRecord) error { calls++; return stop }); !errors.Is(err, stop) || calls != 1 {
		t.Errorf("fn's error: %v after %d calls", err, calls)
	}
}

func TestSealBindsRow(t *testing.T) {
	key, err := newUserKey()
	Must(t, err)
	s, err := seal(key, []byte("row-1"), []byte("text"))
	Must(t, err)
	if p, err := unseal(key, []byte("row-1"), s); err != nil || string(p) != "text" {
		t.Fatalf("unseal = %q, %v", p, err)
	}
	if _, err := unseal(key, []byte("row-2"), s); err == nil {
		t.Error("a ciphertext opened in another row")
	}
	other, _ := newUserKey()
	if _, err := unseal(other, []byte("row-1"), s); err == nil {
		t.Error("a ciphertext opened with another user's key")
	}
}

// TestGate: the scrub's exclusive hold waits for a backup without holding
// anyone up, then holds new transactions back until it is released.
func TestGate(t *testing.T) {
	var g gate
	g.enter(true) // a backup
	got := make(chan func())
	go func() { got <- g.exclusive() }()
	for range 5 { // short transactions still get in
		done := make(chan struct{})
		go func() { g.enter(false); g.leave(false); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("a short transaction waited behind the scrub while a backup ran")
		}
	}
	select {
	case <-got:
		t.Fatal("exclusive while a backup is open")
	case <-time.After(20 * time.Millisecond):
	}
	g.leave(true)
	release := <-got
	entered := make(chan struct{})
	go func() { g.enter(false); close(entered) }()
	select {
	case <-entered:
		t.Fatal("a transaction entered during the exclusive hold")
	case <-time.After(20 * time.Millisecond):
	}
	release()
	<-entered
	g.leave(false)

	// A transaction that stays open does not keep the others out: the
	// attempt to drain is abandoned after drainLimit and retried.
	g.enter(false)
	go func() { got <- g.exclusive() }()
	time.Sleep(10 * time.Millisecond)
	in := make(chan struct{})
	go func() { g.enter(false); close(in) }()
	select {
	case <-in:
	case <-time.After(30 * time.Second):
		t.Fatal("new transactions stay shut out behind one that does not end")
	}
	g.leave(false)
	g.leave(false)
	(<-got)()
}
