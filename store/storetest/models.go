package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/replyd/replyd/store"
)

// modelChoicesPerBox: each box keeps its own choice per engine; a new
// choice replaces only that box's choice of that engine; a zero At is the
// clock's; an incomplete choice is ErrInvalid and stores nothing.
func modelChoicesPerBox(t *testing.T, e Env) {
	s := e.S
	if got, err := s.ModelChoices(); err != nil || got == nil || len(got) != 0 {
		t.Fatalf("ModelChoices on an empty store = %v, %v; want [], nil", got, err)
	}
	Must(t, s.SetModelChoice(store.ModelChoice{Node: "box-b", Kind: "llm", Model: "/data/b/models/q.gguf", At: T0}))
	Must(t, s.SetModelChoice(store.ModelChoice{Node: "box-a", Kind: "whisper", Model: "/data/a/models/base.bin", At: T0.Add(time.Second)}))
	Must(t, s.SetModelChoice(store.ModelChoice{Node: "box-a", Kind: "llm", Model: "/data/a/models/one.gguf", At: T0.Add(2 * time.Second)}))
	e.Clock.Add(time.Minute)
	Must(t, s.SetModelChoice(store.ModelChoice{Node: "box-a", Kind: "llm", Model: "/data/a/models/two.gguf", Previous: "/data/a/models/one.gguf"}))
	for _, bad := range []store.ModelChoice{
		{Kind: "llm", Model: "x.gguf"},
		{Node: "box-a", Model: "x.gguf"},
		{Node: "box-a", Kind: "llm"},
	} {
		if err := s.SetModelChoice(bad); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("SetModelChoice(%+v) = %v, want ErrInvalid", bad, err)
		}
	}
	got, err := s.ModelChoices()
	Must(t, err)
	want := []store.ModelChoice{
		{Node: "box-a", Kind: "llm", Model: "/data/a/models/two.gguf", Previous: "/data/a/models/one.gguf", At: T0.Add(time.Minute)},
		{Node: "box-a", Kind: "whisper", Model: "/data/a/models/base.bin", At: T0.Add(time.Second)},
		{Node: "box-b", Kind: "llm", Model: "/data/b/models/q.gguf", At: T0},
	}
	if d := cmp.Diff(want, got, cmp.Comparer(func(a, b time.Time) bool { return a.Equal(b) })); d != "" {
		t.Errorf("ModelChoices (-want +got):\n%s", d)
	}
}

// modelRecordsPerBox: a box's timing, comparison and window declaration of
// each file are kept apart from other boxes' and replace only the same
// record; they come back by file then kind, bodies byte for byte; deleting
// a file's records deletes every kind of them and leaves the others; an incomplete record is ErrInvalid and stores nothing.
func modelRecordsPerBox(t *testing.T, e Env) {
	s := e.S
	if got, err := s.ModelRecords("box-a"); err != nil || got == nil || len(got) != 0 {
		t.Fatalf("ModelRecords on an empty store = %v, %v; want [], nil", got, err)
	}
	mt := T0.Add(-time.Hour)
	rec := func(node, file, what, body string, at time.Time) store.ModelRecord {
		return store.ModelRecord{Node: node, File: file, What: what, Bytes: int64(len(file)), ModTime: mt, At: at, Body: []byte(body)}
	}
	Must(t, s.PutModelRecord(rec("box-a", "b.gguf", store.ModelTiming, `{"t":1}`, T0)))
	Must(t, s.PutModelRecord(rec("box-a", "b.gguf", store.ModelComparison, `{"c":1}`, T0)))
	Must(t, s.PutModelRecord(rec("box-a", "b.gguf", store.ModelWindow, `{"short_window":true}`, T0)))
	Must(t, s.PutModelRecord(rec("box-a", "a.gguf", store.ModelWindow, `{"short_window":false}`, T0)))
	Must(t, s.PutModelRecord(rec("box-a", "a.gguf", store.ModelTiming, `{"t":2}`, T0)))
	Must(t, s.PutModelRecord(rec("box-b", "b.gguf", store.ModelTiming, `{"other box":true}`, T0)))
	e.Clock.Add(time.Minute)
	// A new timing of b.gguf replaces the old one; a zero At is the clock's.
	Must(t, s.PutModelRecord(rec("box-a", "b.gguf", store.ModelTiming, `{"t":3}`, time.Time{})))
	for _, bad := range []store.ModelRecord{
		rec("", "x.gguf", store.ModelTiming, "{}", T0),
		rec("box-a", "", store.ModelTiming, "{}", T0),
		rec("box-a", "x.gguf", "guess", "{}", T0),
		rec("box-a", "x.gguf", store.ModelTiming, "", T0),
	} {
		if err := s.PutModelRecord(bad); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("PutModelRecord(%+v) = %v, want ErrInvalid", bad, err)
		}
	}
	eq := cmp.Comparer(func(a, b time.Time) bool { return a.Equal(b) })
	got, err := s.ModelRecords("box-a")
	Must(t, err)
	want := []store.ModelRecord{
		rec("box-a", "a.gguf", store.ModelTiming, `{"t":2}`, T0),
		rec("box-a", "a.gguf", store.ModelWindow, `{"short_window":false}`, T0),
		rec("box-a", "b.gguf", store.ModelComparison, `{"c":1}`, T0),
		rec("box-a", "b.gguf", store.ModelTiming, `{"t":3}`, T0.Add(time.Minute)),
		rec("box-a", "b.gguf", store.ModelWindow, `{"short_window":true}`, T0),
	}
	if d := cmp.Diff(want, got, eq); d != "" {
		t.Errorf("ModelRecords(box-a) (-want +got):\n%s", d)
	}
	Must(t, s.DeleteModelRecords("box-a", "b.gguf"))
	Must(t, s.DeleteModelRecords("box-a", "never.gguf"))
	got, err = s.ModelRecords("box-a")
	Must(t, err)
	if d := cmp.Diff(want[:2], got, eq); d != "" {
		t.Errorf("after deleting b.gguf's, every kind (-want +got):\n%s", d)
	}
	got, err = s.ModelRecords("box-b")
	Must(t, err)
	if len(got) != 1 || string(got[0].Body) != `{"other box":true}` {
		t.Errorf("box-b's records: %+v", got)
	}
}
