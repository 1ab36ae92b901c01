package api

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/replyd/replyd/models"
)

func TestAdminModelTime(t *testing.T) {
	dir := modelsFolder(t, "a.gguf", "b.gguf")
	a := filepath.Join(dir, "a.gguf")
	sw := &fakeSwitcher{fakeHealth: &fakeHealth{}, active: map[string]string{"llm": a}}
	e := newEnv(t, withModels(dir, sw, timingLMs(a)))
	// TurnMS: 200 tokens at 100/s plus 20 steps of 10 ms = 2200; the
	// active: 1000 + 100. The plan is the models package's, against the
	// 1000 MiB the fake reports; the clock is fixed.
	want := `{"kind":"llm","node":"box-test","at":"2026-01-02T03:04:05Z","reason":"the model needs about 64 MiB and 1000 MiB are available: it was timed beside the active one",` +
		`"bytes_needed":%d,"bytes_available":1048576000,"load_ms":0,` +
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
		{"no room", "/v1/admin/models/b.gguf/time", func() { sw.setMem(10 << 20) },
			409, errJSON(CodeConflict, "the model cannot be timed: it does not fit in memory beside the active one: it needs about 64 MiB but only 10 MiB are available; timing never unloads the active model: free memory, or switch to it (requests get 503 loading meanwhile) and read its figures")},
		{"busy", "/v1/admin/models/b.gguf/time", func() { sw.setMem(0); sw.setStarting(true) }, 409,
			errJSON(CodeConflict, "another model switch is in progress: the llm model is still loading; retry when it has finished")},
		{"timed", "/v1/admin/models/b.gguf/time", func() { sw.setStarting(false) }, 200, fmt.Sprintf(want, st.Size()+st.Size()/4+models.SwitchHeadroom, st.Size())},
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
			t.Error("time is false with engines that time")
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
