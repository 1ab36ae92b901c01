package api

import (
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/replyd/replyd/engine"
	"github.com/replyd/replyd/models"
	"github.com/replyd/replyd/models/modelfile"
	"github.com/replyd/replyd/store"
)

func TestAdminModelSwitch(t *testing.T) {
	dir := modelsFolder(t, "a.gguf", "b.gguf")
	if err := os.WriteFile(filepath.Join(dir, "cut.gguf"), tinyGGUF("cut")[:100], 0o644); err != nil {
		t.Fatal(err)
	}
	a, b := filepath.Join(dir, "a.gguf"), filepath.Join(dir, "b.gguf")
	sw := &fakeSwitcher{fakeHealth: &fakeHealth{}, active: map[string]string{"llm": a}}
	e := newEnv(t, withModels(dir, sw, nil))
	// The plan is the models package's: the file, a quarter more and the
	// headroom, against the 1000 MiB the fake reports; the clock is fixed.
	switched := func(model, prev string) string {
		st, err := os.Stat(filepath.Join(dir, model))
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf(`{"kind":"llm","model":"%s","previous":"%s","mode":"beside","reason":"the new model needs about 64 MiB and 1000 MiB are available: it loads beside the old one",`+
			`"bytes_needed":%d,"bytes_available":%d,"load_ms":0,"node":"box-test"}`, model, prev, st.Size()+st.Size()/4+models.SwitchHeadroom, 1000<<20)
	}
	for _, c := range []struct {
		name   string
		method string
		path   string
		body   string
		before func()
		status int
		want   string
	}{
		{"rollback before any switch", "POST", "/v1/admin/models/llm/rollback", "", nil, 409,
			errJSON(CodeConflict, "this box has not switched its llm model: there is nothing to roll back to")},
		{"already active", "POST", "/v1/admin/models/a.gguf/activate", "", nil, 409, errJSON(CodeConflict, "a.gguf is already the active llm model")},
		{"missing", "POST", "/v1/admin/models/nope.gguf/activate", "", nil, 404, errJSON(CodeNotFound, "no model file nope.gguf in the models folder")},
		{"refused file", "POST", "/v1/admin/models/cut.gguf/activate", "", nil, 422, ""},
		{"wrong kind", "POST", "/v1/admin/models/b.gguf/activate", `{"kind":"whisper"}`, nil, 400, errJSON(CodeInvalidRequest, "b.gguf is a llm model, not whisper")},
		{"bad mode", "POST", "/v1/admin/models/b.gguf/activate", `{"mode":"fast"}`, nil, 400, errJSON(CodeInvalidRequest, "mode must be auto, beside or swap")},
		{"busy", "POST", "/v1/admin/models/b.gguf/activate", "", func() { sw.err = fmt.Errorf("%w: x", models.ErrBusy) }, 409,
			errJSON(CodeConflict, "another model switch is in progress: x; retry when it has finished")},
		{"no room beside", "POST", "/v1/admin/models/b.gguf/activate", `{"mode":"beside"}`, func() { sw.setMem(10 << 20) },
			409, errJSON(CodeConflict, "the new model does not fit in memory beside the old one: the new model needs about 64 MiB but only 10 MiB are available: the old model is unloaded first; switch with mode swap (requests get 503 loading meanwhile) or free memory")},
		{"engines loading", "POST", "/v1/admin/models/b.gguf/activate", "", func() { sw.setMem(0); sw.setStarting(true) }, 409,
			errJSON(CodeConflict, "another model switch is in progress: the llm model is still loading; retry when it has finished")},
		{"fails to load", "POST", "/v1/admin/models/b.gguf/activate", "", func() {
			sw.setStarting(false)
			sw.err = fmt.Errorf("%w: cannot load language model b.gguf: bad tensor", models.ErrUnusable)
		}, 422, errJSON(CodeInvalidModel, "cannot load language model b.gguf: bad tensor")},
		{"switch", "POST", "/v1/admin/models/b.gguf/activate", "", nil, 200, switched("b.gguf", "a.gguf")},
		{"rollback, bad kind", "POST", "/v1/admin/models/tts/rollback", "", nil, 400, errJSON(CodeInvalidRequest, "the kind must be llm or whisper")},
		{"rollback", "POST", "/v1/admin/models/llm/rollback", "", nil, 200, switched("a.gguf", "b.gguf")},
		{"rollback again", "POST", "/v1/admin/models/llm/rollback", "", nil, 200, switched("b.gguf", "a.gguf")},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.before != nil {
				c.before()
			}
			rec := e.do(adminReq(c.method, c.path, c.body))
			if c.want == "" {
				if rec.Code != c.status {
					t.Errorf("%d %s", rec.Code, rec.Body)
				}
				return
			}
			wantJSON(t, rec, c.status, c.want)
		})
	}
	// The choice is stored for this box, with what a roll back returns to.
	cs, err := e.st.ModelChoices()
	if err != nil || len(cs) != 1 || cs[0].Node != "box-test" || cs[0].Kind != "llm" || cs[0].Model != b || cs[0].Previous != a {
		t.Errorf("stored choices %+v, %v", cs, err)
	}
	rec := e.do(adminReq("GET", "/v1/admin/models", ""))
	var list struct {
		Node   string
		Switch bool
		Boxes  []boxModels
	}
	decode(t, rec, &list)
	if list.Node != "box-test" || !list.Switch || len(list.Boxes) != 1 || list.Boxes[0] != (boxModels{Node: "box-test", Kind: "llm", Model: "b.gguf", Previous: "a.gguf", At: "2026-01-02T03:04:05Z"}) {
		t.Errorf("list %+v", list)
	}
	logs, err := e.st.Logs(store.LogQuery{Stream: store.StreamAdmin})
	if err != nil {
		t.Fatal(err)
	}
	var msgs []string
	for i := len(logs) - 1; i >= 0; i-- {
		msgs = append(msgs, logs[i].Message)
	}
	want := []string{
		"model switch refused: cut.gguf: ",
		"model switch started: llm b.gguf (mode auto)", "model switch failed: llm b.gguf: another model switch is in progress: x; retry when it has finished",
		"model switch started: llm b.gguf (mode beside)", "model switch failed: llm b.gguf: ",
		"model switch started: llm b.gguf (mode auto)", "model switch failed: llm b.gguf: another model switch is in progress: the llm model is still loading",
		"model switch started: llm b.gguf (mode auto)", "model switch failed: llm b.gguf: cannot load language model b.gguf: bad tensor",
		"model switch started: llm b.gguf (mode auto)", "model switched: llm b.gguf (was a.gguf; beside, 0 ms)",
		"model switch started: llm a.gguf (mode auto)", "model rolled back: llm a.gguf (was b.gguf; beside, 0 ms)",
		"model switch started: llm b.gguf (mode auto)", "model rolled back: llm b.gguf (was a.gguf; beside, 0 ms)",
	}
	if len(msgs) != len(want) {
		t.Fatalf("admin log:\n%q\nwant\n%q", msgs, want)
	}
	for i := range want {
		if len(msgs[i]) < len(want[i]) || msgs[i][:len(want[i])] != want[i] {
			t.Errorf("admin log %d: %q, want %q…", i, msgs[i], want[i])
		}
	}
}

// TestModelSwitchWithoutSwitcher: a models.Service without engines makes
// activate and rollback 501.
func TestModelSwitchWithoutSwitcher(t *testing.T) {
	dir := t.TempDir()
	e := newEnv(t, withModels(dir, nil, nil))
	wantJSON(t, e.do(adminReq("POST", "/v1/admin/models/a.gguf/activate", "")), 501, errJSON(CodeNotSupported, "this server cannot switch models while it runs"))
	wantJSON(t, e.do(adminReq("POST", "/v1/admin/models/llm/rollback", "")), 501, errJSON(CodeNotSupported, "this server cannot switch models while it runs"))
}

// TestModelRemoveDuringActivation: a removal while the file is being
// activated (the engine loading it) is 409 naming the activation, and
// leaves the file, which goes live; the active file then cannot be
// removed either. The switch is held in its load by a hook, so the race
// is the same every run. A file removed before its activation starts is
// 404.
func TestModelRemoveDuringActivation(t *testing.T) {
	dir := modelsFolder(t, "a.gguf", "b.gguf", "c.gguf")
	a, b := filepath.Join(dir, "a.gguf"), filepath.Join(dir, "b.gguf")
	sw := &fakeSwitcher{fakeHealth: &fakeHealth{}, active: map[string]string{"llm": a}}
	loading, proceed := make(chan struct{}), make(chan struct{})
	sw.loading = func(models.SwitchRequest) {
		loading <- struct{}{}
		<-proceed
	}
	e := newEnv(t, withModels(dir, sw, timingLMs(a)))
	done := make(chan *httptest.ResponseRecorder)
	go func() { done <- e.do(adminReq("POST", "/v1/admin/models/b.gguf/activate", "")) }()
	<-loading
	wantJSON(t, e.do(adminReq("DELETE", "/v1/admin/models/b.gguf", "")), 409,
		errJSON(CodeConflict, "b.gguf is being activated: it cannot be removed until that has finished"))
	wantJSON(t, e.do(adminReq("POST", "/v1/admin/models/b.gguf/time", "")), 409,
		errJSON(CodeConflict, "b.gguf is being activated: retry when that has finished"))
	close(proceed)
	if rec := <-done; rec.Code != 200 {
		t.Fatalf("activate: %d %s", rec.Code, rec.Body)
	}
	if _, err := os.Stat(b); err != nil {
		t.Fatalf("the activated file: %v", err)
	}
	if got := sw.ActiveModel("llm"); got != b {
		t.Fatalf("active %q, want %q", got, b)
	}
	// The active file is the engine's now: removing it is refused too.
	sw.fakeHealth.mu.Lock()
	sw.fakeHealth.engines = []engine.EngineStatus{{Name: "llm", Ready: true, Model: b}}
	sw.fakeHealth.mu.Unlock()
	wantJSON(t, e.do(adminReq("DELETE", "/v1/admin/models/b.gguf", "")), 409,
		errJSON(CodeConflict, "the model is in use: b.gguf: switch to another model before removing it"))

	// A file removed before its activation starts is not there: 404.
	sw.loading = nil
	if rec := e.do(adminReq("DELETE", "/v1/admin/models/c.gguf", "")); rec.Code != 204 {
		t.Fatalf("remove c.gguf: %d %s", rec.Code, rec.Body)
	}
	wantJSON(t, e.do(adminReq("POST", "/v1/admin/models/c.gguf/activate", "")), 404,
		errJSON(CodeNotFound, "no model file c.gguf in the models folder"))
	// The engines' own check of the file, when it went between the
	// folder's and theirs, is 404 too.
	sw.err = fmt.Errorf("%w: a.gguf", modelfile.ErrNotFound)
	wantJSON(t, e.do(adminReq("POST", "/v1/admin/models/a.gguf/activate", "")), 404,
		errJSON(CodeNotFound, "no such model file: a.gguf"))
}
