package storetest

import (
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/replyd/replyd/store"
)

// Fill puts some of everything into s: keys (active, revoked, touched,
// created in one nanosecond), the admin key, prompt versions, sessions, an
// OTP code with one wrong try, a pending and a used pairing, a model
// choice, two boxes' timings and a comparison of their model files
// (FilledModelRecords), and infer and admin log entries. The
// cross-store migration tests use it too.
func Fill(t testing.TB, s store.Store) {
	t.Helper()
	Must(t, s.SetAdminKeyHash("admin-hash"))
	_, err := s.InstallationSecret(store.SecretPseudonym)
	Must(t, err)
	Must(t, s.SetSecret(store.SecretTOTP, []byte("totp secret")))
	MustCreateKey(t, s, "k1", T0)
	MustCreateKey(t, s, "k2", T0) // same nanosecond: listed before k1
	Must(t, s.CreateKey(store.APIKey{Hash: "k3", ClientID: "ward 3", Scopes: []string{"infer"}, RateLimitPerMinute: 5, CreatedAt: T0.Add(time.Minute)}))
	Must(t, s.TouchKey("k1", T0.Add(2*time.Minute)))
	Must(t, s.SetLiveOff("k3", true))
	Must(t, s.SetModelChoice(store.ModelChoice{Node: "box-a", Kind: "llm", Model: "/m/two.gguf", Previous: "/m/one.gguf", At: T0}))
	for _, r := range FilledModelRecords() {
		Must(t, s.PutModelRecord(r))
	}
	_, err = s.RevokeKey("k2", T0.Add(3*time.Minute))
	Must(t, err)
	Must(t, s.SavePrompt(store.PromptVersion{Prompt: "first", Version: "1", CreatedAt: T0}))
	Must(t, s.SavePrompt(store.PromptVersion{Prompt: "second\nline", Version: "beta", CreatedAt: T0.Add(time.Minute)}))
	Must(t, s.CreateSession("sess-live", T0.Add(time.Hour)))
	Must(t, s.CreateSession("sess-dead", T0.Add(-time.Hour)))
	mustSaveOTP(t, s, "10.0.0.1", "code-a", T0, T0.Add(5*time.Minute))
	mustSaveOTP(t, s, "10.0.0.2", "code-b", T0, T0.Add(5*time.Minute))
	if ok, err := s.UseTOTPStep(100); err != nil || !ok {
		t.Fatalf("UseTOTPStep = %v, %v", ok, err)
	}
	rule := store.OTPLockRule{Every: 2, Base: time.Minute, Max: time.Hour, Decay: time.Hour}
	for range 3 {
		if _, err := s.OTPFailed("", "10.0.0.1", T0, rule); err != nil {
			t.Fatal(err)
		}
	}
	rule.Sources = 2
	if _, err := s.OTPFailed("addr:10.0.0.7", "10.0.0.7", T0, rule); err != nil {
		t.Fatal(err)
	}
	Must(t, s.CreatePairing(PairingFor("pair-pending", "ward 4"), 10, T0))
	Must(t, s.CreatePairing(PairingFor("pair-used", "ward 5"), 10, T0))
	if _, err := s.RedeemPairing("pair-used", "k-paired", T0.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	for i := range 30 {
		stream := store.StreamInfer
		if i%5 == 0 {
			stream = store.StreamAdmin
		}
		MustAppend(t, s, store.LogEntry{Timestamp: T0.Add(time.Duration(i%10) * time.Second), Level: store.LevelInfo, Message: fmt.Sprint(i),
			ResourceType: store.ResourceAPIKey, ResourceID: "k1", StreamName: stream, Subject: fmt.Sprint("u", i%4), Status: 200, LatencyMS: int64(i), Node: "box-a"})
	}
	// Outcomes and a remembering user: a pair, texts awaiting feedback, and
	// an outcome of a user without memory.
	MustInfer(t, s, Inf{At: 20 * time.Second, Key: "k1", Subject: "mem", ID: "inf-m1", Version: "1", Cands: []string{"Yes.", "No."}, Partner: "Tea?", Tag: "tag-mem"})
	MustInfer(t, s, Inf{At: 21 * time.Second, Key: "k1", Subject: "mem", ID: "inf-m2", Version: "beta", Cands: []string{"Later."}, Partner: "Walk?", Tag: "tag-mem"})
	Must(t, s.LinkMemory("k3", "mem"))
	MustInfer(t, s, Inf{At: 22 * time.Second, Key: "k3", Subject: "plain", ID: "inf-p1", Version: "beta", Cands: []string{"Fine."}})
	MustInfer(t, s, Inf{At: 23 * time.Second, Key: "k3", Subject: "plain", Status: 502, Code: "llm_failed"})
	_, err = s.SetOutcome("inf-m1", Spoken(1, 4, T0.Add(time.Minute)), "Yes.")
	Must(t, err)
	_, err = s.SetOutcome("inf-p1", store.Outcome{Kind: store.OutcomeTyped, SpokenChars: 9, TimeToChoiceMS: 2500, FirstAt: T0, At: T0}, "")
	Must(t, err)
}

// FilledModelRecords are the model records Fill stores, as ModelRecords
// returns them: by node, file, then what.
func FilledModelRecords() []store.ModelRecord {
	mt := T0.Add(-24 * time.Hour)
	return []store.ModelRecord{
		{Node: "box-a", File: "one.gguf", What: store.ModelComparison, Bytes: 1 << 20, ModTime: mt, At: T0.Add(time.Minute), Body: []byte(`{"turns":5,"wins":3}`)},
		{Node: "box-a", File: "one.gguf", What: store.ModelTiming, Bytes: 1 << 20, ModTime: mt, At: T0, Body: []byte(`{"first_token_ms":41}`)},
		{Node: "box-a", File: "two.gguf", What: store.ModelTiming, Bytes: 2 << 20, ModTime: mt.Add(time.Nanosecond), At: T0, Body: []byte(`{"first_token_ms":77}`)},
		{Node: "box-b", File: "one.gguf", What: store.ModelTiming, Bytes: 1 << 20, ModTime: mt, At: T0.Add(2 * time.Minute), Body: []byte("{\"first_token_ms\":39,\"raw\":\"\\u0000\"}")},
	}
}

// flat is a Snapshot with its logs read out, for comparing.
type flat struct {
	Snap store.Snapshot
	Logs []store.LogEntry
}

// Flatten reads s's Snapshot, logs included.
func Flatten(t testing.TB, s store.Store) flat {
	t.Helper()
	var f flat
	Must(t, s.Snapshot(func(snap store.Snapshot) error {
		f.Logs = []store.LogEntry{}
		for e, err := range snap.Logs {
			if err != nil {
				return err
			}
			f.Logs = append(f.Logs, e)
		}
		snap.Logs = nil
		f.Snap = snap
		return nil
	}))
	return f
}

// SameData fails t unless a and b hold the same data, as their Snapshots
// and as the Store methods answer.
func SameData(t testing.TB, a, b store.Store) {
	t.Helper()
	if diff := cmp.Diff(Flatten(t, a), Flatten(t, b)); diff != "" {
		t.Errorf("snapshots differ (-first +second):\n%s", diff)
	}
	if same, why, err := store.SameData(a, b); err != nil || !same {
		t.Errorf("store.SameData = %v, %q, %v; want true", same, why, err)
	}
	for _, check := range []struct {
		name string
		get  func(s store.Store) (any, error)
	}{
		{"ListKeys", func(s store.Store) (any, error) { return s.ListKeys(0, true) }},
		{"PromptHistory", func(s store.Store) (any, error) { return s.PromptHistory(0) }},
		{"Logs", func(s store.Store) (any, error) { return s.Logs(store.LogQuery{}) }},
		{"Stats", func(s store.Store) (any, error) { return s.Stats(T0.Add(-time.Hour), T0.Add(time.Hour)) }},
		{"StatsSeries", func(s store.Store) (any, error) { return s.StatsSeries(T0, T0.Add(10*time.Second), 3*time.Second) }},
		{"AdminKeyHash", func(s store.Store) (any, error) { return s.AdminKeyHash() }},
		{"NextPromptVersion", func(s store.Store) (any, error) { return s.NextPromptVersion() }},
		{"SessionValid", func(s store.Store) (any, error) { return s.SessionValid("sess-live", T0) }},
		{"pseudonym key", func(s store.Store) (any, error) { v, _, err := s.Secret(store.SecretPseudonym); return v, err }},
		{"TOTP secret", func(s store.Store) (any, error) { v, _, err := s.Secret(store.SecretTOTP); return v, err }},
		{"Inference(inf-m1)", func(s store.Store) (any, error) { return inferenceOrNone(s, "inf-m1") }},
		{"Inference(inf-m2)", func(s store.Store) (any, error) { return inferenceOrNone(s, "inf-m2") }},
		{"Inference(inf-p1)", func(s store.Store) (any, error) { return inferenceOrNone(s, "inf-p1") }},
		{"MemoryUsers", func(s store.Store) (any, error) { return s.MemoryUsers() }},
		{"ModelChoices", func(s store.Store) (any, error) { return s.ModelChoices() }},
		{"ModelRecords(box-a)", func(s store.Store) (any, error) { return s.ModelRecords("box-a") }},
		{"ModelRecords(box-b)", func(s store.Store) (any, error) { return s.ModelRecords("box-b") }},
		{"MemoryPairs(mem)", func(s store.Store) (any, error) { p, rev, err := s.MemoryPairs("mem"); return fmt.Sprint(p, rev), err }},
		{"Outcomes", func(s store.Store) (any, error) {
			var out []store.OutcomeRecord
			err := s.Outcomes(T0.Add(-time.Hour), T0.Add(time.Hour), func(r store.OutcomeRecord) error { out = append(out, r); return nil })
			return out, err
		}},
	} {
		va, erra := check.get(a)
		vb, errb := check.get(b)
		Must(t, erra)
		Must(t, errb)
		if diff := cmp.Diff(va, vb); diff != "" {
			t.Errorf("%s differs (-first +second):\n%s", check.name, diff)
		}
	}
}

// inferenceOrNone is Inference with ErrNotFound as a value to compare.
func inferenceOrNone(s store.Store, id string) (any, error) {
	inf, err := s.Inference(id)
	if errors.Is(err, store.ErrNotFound) {
		return "not found", nil
	}
	return inf, err
}

func snapshotRoundTrip(t *testing.T, e Env) {
	Fill(t, e.S)
	b := e.Open()
	Must(t, e.S.Snapshot(func(snap store.Snapshot) error { return b.Import(snap, false) }))
	SameData(t, e.S, b)
	// The copy behaves like the original: each address's code works from
	// that address, the TOTP step used stays used; the key order carried.
	for _, s := range []store.Store{e.S, b} {
		if ok, _ := s.UseOTP("10.0.0.2", "code-a", T0); ok {
			t.Error("a code worked from another address")
		}
		if ok, _ := s.UseOTP("10.0.0.1", "code-a", T0); !ok {
			t.Error("the copied code does not work")
		}
		if ok, _ := s.UseTOTPStep(100); ok {
			t.Error("a used TOTP step was accepted again")
		}
		if u, _ := s.OTPLock("", T0); !u.Equal(T0.Add(time.Minute)) {
			t.Errorf("the pause did not carry: %v", u)
		}
		if ks := listKeys(t, s, 0, true); fmt.Sprint(ks) != "[k3 k-paired k2 k1]" {
			t.Errorf("ListKeys = %v", ks)
		}
		// The pairings carried: the pending code still pairs, the used one
		// says so.
		_, err := s.RedeemPairing("pair-used", "k-again", T0.Add(2*time.Second))
		wantErr(t, "the used pairing after the copy", err, store.ErrUsed)
		_, err = s.RedeemPairing("pair-pending", "k-new", T0.Add(3*time.Second))
		Must(t, err)
		// The model records carried, every box's, bodies byte for byte.
		var got []store.ModelRecord
		for _, node := range []string{"box-a", "box-b"} {
			rs, err := s.ModelRecords(node)
			Must(t, err)
			got = append(got, rs...)
		}
		if d := cmp.Diff(FilledModelRecords(), got, cmp.Comparer(func(a, b time.Time) bool { return a.Equal(b) })); d != "" {
			t.Errorf("model records after the copy (-want +got):\n%s", d)
		}
	}
	// An empty store's snapshot is empty and imports as empty.
	c, d := e.Open(), e.Open()
	Must(t, c.Snapshot(func(snap store.Snapshot) error { return d.Import(snap, false) }))
	SameData(t, c, d)
	if f := Flatten(t, d); len(f.Logs) != 0 || len(f.Snap.Keys) != 0 || len(f.Snap.OTPCodes) != 0 || f.Snap.TOTPLastStep != 0 || !reflect.DeepEqual(f.Snap.OTPGuard, store.OTPGuard{}) || len(f.Snap.OTPGuards) != 0 || len(f.Snap.ModelRecords) != 0 {
		t.Errorf("empty store's snapshot: %+v", f)
	}
}

func snapshotImportRefusesOrReplaces(t *testing.T, e Env) {
	Fill(t, e.S)
	b := e.Open()
	MustCreateKey(t, b, "already-here", T0)
	err := e.S.Snapshot(func(snap store.Snapshot) error { return b.Import(snap, false) })
	wantErr(t, "Import into a store holding data", err, store.ErrExists)
	if ks := listKeys(t, b, 0, true); fmt.Sprint(ks) != "[already-here]" {
		t.Errorf("a refused Import changed the target: %v", ks)
	}
	// replace: the target's own data is gone, the copy is whole; doing it
	// again changes nothing.
	for range 2 {
		Must(t, e.S.Snapshot(func(snap store.Snapshot) error { return b.Import(snap, true) }))
		SameData(t, e.S, b)
	}
	if _, err := b.GetKey("already-here"); err == nil {
		t.Error("replace kept the target's own key")
	}
	// SameData sees a difference in the logs and in the rest.
	MustAppend(t, b, store.LogEntry{Timestamp: T0, Message: "one more"})
	if same, why, err := store.SameData(e.S, b); same || err != nil || why == "" {
		t.Errorf("SameData after an extra log entry = %v, %q, %v", same, why, err)
	}
	Must(t, e.S.Snapshot(func(snap store.Snapshot) error { return b.Import(snap, true) }))
	Must(t, b.SetAdminKeyHash("other"))
	if same, _, _ := store.SameData(e.S, b); same {
		t.Error("SameData after changing the admin key = true")
	}
	// A snapshot that repeats a key is refused whole.
	c := e.Open()
	err = c.Import(store.Snapshot{Keys: []store.APIKey{{Hash: "x", CreatedAt: T0}, {Hash: "x", CreatedAt: T0}}}, false)
	wantErr(t, "Import of a repeated key", err, store.ErrInvalid)
	if ks := listKeys(t, c, 0, true); len(ks) != 0 {
		t.Errorf("a failed Import left keys: %v", ks)
	}
	// So is one with a record without a body, and nothing of it stays.
	bad := store.Snapshot{Keys: []store.APIKey{{Hash: "y", CreatedAt: T0}}, ModelRecords: FilledModelRecords()}
	bad.ModelRecords[1].Body = nil
	wantErr(t, "Import of a model record without a body", c.Import(bad, false), store.ErrInvalid)
	if ks, rs := listKeys(t, c, 0, true), mustModelRecords(t, c, "box-a"); len(ks) != 0 || len(rs) != 0 {
		t.Errorf("a failed Import left keys %v and model records %v", ks, rs)
	}
	// A store that holds only a model record holds data: refused, then
	// replaced.
	Must(t, c.PutModelRecord(store.ModelRecord{Node: "box-c", File: "x.gguf", What: store.ModelTiming, Body: []byte("{}")}))
	err = e.S.Snapshot(func(snap store.Snapshot) error { return c.Import(snap, false) })
	wantErr(t, "Import into a store holding a model record", err, store.ErrExists)
	Must(t, e.S.Snapshot(func(snap store.Snapshot) error { return c.Import(snap, true) }))
	SameData(t, e.S, c)
	if rs := mustModelRecords(t, c, "box-c"); len(rs) != 0 {
		t.Errorf("replace kept the target's own model record: %+v", rs)
	}
}

func mustModelRecords(t testing.TB, s store.Store, node string) []store.ModelRecord {
	t.Helper()
	rs, err := s.ModelRecords(node)
	Must(t, err)
	return rs
}
