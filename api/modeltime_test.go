package api

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/replyd/replyd/models"
)

// fakeTimer is a fakeSwitcher that also times models: what the api does
// around a timing (checks, the stored figures, the error mapping) without
// engines.
type fakeTimer struct {
	*fakeSwitcher
	tmu sync.Mutex
	err error // returned by the next TimeModel
}

func (f *fakeTimer) TimeModel(_ context.Context, kind, path string) (models.Timing, error) {
	f.tmu.Lock()
	defer f.tmu.Unlock()
	if err := f.err; err != nil {
		f.err = nil
		return models.Timing{}, err
	}
	return models.Timing{Reason: "fits", BytesNeeded: 100, BytesAvailable: 1000, LoadMS: 5,
		Candidate: models.Figures{Model: path, PromptTokensPerS: 100, Candidates: 4, StepMS: 10, HistoryBudgetTokens: 400, MaxReplyTokens: 20},
		Active:    models.Figures{Model: f.ActiveModel(kind), PromptTokensPerS: 200, Candidates: 4, StepMS: 5, HistoryBudgetTokens: 800, MaxReplyTokens: 20}}, nil
}

func TestAdminModelTime(t *testing.T) {
	dir := modelsFolder(t, "a.gguf", "b.gguf")
	tm := &fakeTimer{fakeSwitcher: &fakeSwitcher{fakeHealth: &fakeHealth{}, active: map[string]string{"llm": filepath.Join(dir, "a.gguf")}}}
	e := newEnv(t, func(o *Options) { o.ModelsDir = dir; o.Health = tm })
	// TurnMS: 200 tokens at 100/s plus 20 steps of 10 ms = 2200; the
	// active: 1000 + 100.
	want := `{"kind":"llm","node":"box-test","at":"2026-01-02T03:04:05Z","reason":"fits","bytes_needed":100,"bytes_available":1000,"load_ms":5,` +
		`"candidate":{"model":"b.gguf","prompt_tokens_per_s":100,"candidates":4,"step_ms":10,"history_budget_tokens":400,"max_reply_tokens":20,"turn_ms":2200},` +
		`"active":{"model":"a.gguf","prompt_tokens_per_s":200,"candidates":4,"step_ms":5,"history_budget_tokens":800,"max_reply_tokens":20,"turn_ms":1100},"bytes":%d}`
	st, err := os.Stat(filepath.Join(dir, "b.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		path   string
		before func()
		status int
		want   string
	}{
		{"active", "/v1/admin/models/a.gguf/time", nil, 409, errJSON(CodeConflict, "a.gguf is the active llm model: its own figures are shown beside every timing")},
		{"missing", "/v1/admin/models/nope.gguf/time", nil, 404, errJSON(CodeNotFound, "no model file nope.gguf in the models folder")},
		{"bad name", "/v1/admin/models/..%2Fx.gguf/time", nil, 400, ""},
		{"no room", "/v1/admin/models/b.gguf/time", func() {
			tm.err = fmt.Errorf("%w: it needs about 900 MiB but only 10 MiB are available", models.ErrTimeNoRoom)
		}, 409, errJSON(CodeConflict, "the model cannot be timed: it does not fit in memory beside the active one: it needs about 900 MiB but only 10 MiB are available; timing never unloads the active model: free memory, or switch to it (requests get 503 loading meanwhile) and read its figures")},
		{"busy", "/v1/admin/models/b.gguf/time", func() { tm.err = models.ErrBusy }, 409,
			errJSON(CodeConflict, "another model switch is in progress; retry when it has finished")},
		{"timed", "/v1/admin/models/b.gguf/time", nil, 200, fmt.Sprintf(want, st.Size())},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.before != nil {
				c.before()
			}
			rec := e.do(adminReq("POST", c.path, ""))
			if c.want == "" {
				if rec.Code != c.status {
					t.Errorf("%d %s", rec.Code, rec.Body)
				}
				return
			}
			wantJSON(t, rec, c.status, c.want)
		})
	}
	listed := func() map[string]*models.Timing {
		var list struct {
			Time    bool
			Timings map[string]*models.Timing
		}
		decode(t, e.do(adminReq("GET", "/v1/admin/models", "")), &list)
		if !list.Time {
			t.Error("time is false with a models.Timer")
		}
		return list.Timings
	}
	if ts := listed(); len(ts) != 1 || ts["b.gguf"] == nil || ts["b.gguf"].Candidate.TurnMS != 2200 {
		t.Errorf("listed timings %+v", ts)
	}
	// A file changed since its timing has none.
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(filepath.Join(dir, "b.gguf"), later, later); err != nil {
		t.Fatal(err)
	}
	if ts := listed(); len(ts) != 0 {
		t.Errorf("timings of a changed file: %+v", ts)
	}
	// Removing the file removes its timing.
	if rec := e.do(adminReq("POST", "/v1/admin/models/b.gguf/time", "")); rec.Code != 200 {
		t.Fatalf("time again: %d %s", rec.Code, rec.Body)
	}
	if rec := e.do(adminReq("DELETE", "/v1/admin/models/b.gguf", "")); rec.Code != 204 {
		t.Fatalf("remove: %d %s", rec.Code, rec.Body)
	}
	if _, err := os.Stat(filepath.Join(dir, ".timings", "b.gguf.json")); !os.IsNotExist(err) {
		t.Errorf("the timing outlived its file: %v", err)
	}
}
