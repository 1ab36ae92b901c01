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
