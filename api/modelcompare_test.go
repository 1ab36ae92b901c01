package api

import (
	"encoding/json"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/replyd/replyd/models"
)

func TestAdminModelCompare(t *testing.T) {
	dir := modelsFolder(t, "a.gguf", "b.gguf")
	a := filepath.Join(dir, "a.gguf")
	sw := &fakeSwitcher{fakeHealth: &fakeHealth{}, active: map[string]string{"llm": a}}
	// The active model speaks both recorded replies, the candidate only the
	// first: exact 1 and 0.5. The candidate answers once release is
	// closed; the active one's first replay is stopped for a request.
	release := make(chan struct{})
	lms := &fakeLMs{act: &fakeLM{path: a, cands: []string{"reply 2", "SECRET-TYPED"}, took: 80 * time.Millisecond, preempt: true},
		cand: &fakeLM{cands: []string{"reply 2"}, took: 120 * time.Millisecond, block: release}}
	e := newEnv(t, withModels(dir, sw, lms))
	e.addKey("valid", 60)

	const path = "/v1/admin/models/b.gguf/compare"
	noTurns := errJSON(CodeConflict, "there is no recorded turn to replay: a turn counts once its user, asked with remember: true, reported what they spoke (POST /v1/feedback)")
	for _, c := range []struct {
		name, path, body string
		status           int
		want             string
	}{
		{"turns zero", path, `{"turns":0}`, 400, errJSON(CodeInvalidRequest, "turns must be between 1 and 200")},
		{"turns too many", path, `{"turns":201}`, 400, errJSON(CodeInvalidRequest, "turns must be between 1 and 200")},
		{"turns a string", path, `{"turns":"20"}`, 400, errJSON(CodeInvalidRequest, "turns has the wrong type: expected an integer")},
		{"turns fractional", path, `{"turns":2.5}`, 400, errJSON(CodeInvalidRequest, "turns has the wrong type: expected an integer")},
		{"temperature", path, `{"temperature":3}`, 400, errJSON(CodeInvalidRequest, "temperature must be between 0 and 2")},
		{"not JSON", path, `{"turns":`, 400, errJSON(CodeInvalidRequest, "the request body is not valid JSON (unexpected end)")},
		{"too large", path, `{"turns":1,"pad":"` + strings.Repeat("x", 1<<20) + `"}`, 413, ""},
		{"missing", "/v1/admin/models/nope.gguf/compare", "", 404, errJSON(CodeNotFound, "no model file nope.gguf in the models folder")},
		{"bad name", "/v1/admin/models/x.txt/compare", "", 400, errJSON(CodeInvalidRequest, "the model file name must be letters, digits, '.', '_' and '-', ending in .gguf or .bin")},
		{"active", "/v1/admin/models/a.gguf/compare", "", 409, errJSON(CodeConflict, "a.gguf is the active llm model: compare another file with it")},
		{"nothing recorded", path, "", 409, noTurns},
		{"none yet", path, "GET", 404, errJSON(CodeNotFound, "no comparison of b.gguf on this box")},
	} {
		t.Run(c.name, func(t *testing.T) {
			req := adminReq("POST", c.path, c.body)
			if c.body == "GET" {
				req = adminReq("GET", c.path, "")
			}
			rec := e.do(req)
			if c.want == "" {
				if rec.Code != c.status {
					t.Errorf("%d %s", rec.Code, rec.Body)
				}
				return
			}
			wantJSON(t, rec, c.status, c.want)
		})
	}
	// Not an admin: refused before anything else.
	for _, h := range []map[string]string{{}, {HeaderAdminKey: "valid"}, {"X-API-KEY": "valid"}} {
		req := httptest.NewRequest("POST", path, nil)
		for k, v := range h {
			req.Header.Set(k, v)
		}
		if rec := e.do(req); rec.Code != 401 {
			t.Errorf("%v: %d %s", h, rec.Code, rec.Body)
		}
	}

	// Recorded turns: two remembered and reported, one reported without
	// remember (no text kept), one remembered without an outcome.
	const secret1, secret2 = "SECRET-PARTNER-ONE", "SECRET-PARTNER-TWO"
	ia := e.infer("valid", `{"remember":true,"user_id":"sam","messages":[{"role":"speaker","content":"`+secret1+`"}],"options":{"max_candidates":2}}`)
	ib := e.infer("valid", `{"remember":true,"user_id":"kim","messages":[{"role":"speaker","content":"`+secret2+`"}]}`)
	ic := e.infer("valid", `{"user_id":"lou","messages":[{"role":"speaker","content":"Walk?"}]}`)
	e.infer("valid", `{"remember":true,"user_id":"sam","messages":[{"role":"speaker","content":"No answer yet"}]}`)
	for _, fb := range []string{`{"inference_id":"` + ia + `","chosen_rank":2}`, `{"inference_id":"` + ib + `","spoken_text":"SECRET-TYPED"}`,
		`{"inference_id":"` + ic + `","spoken_text":"not kept"}`} {
		if rec := e.do(feedbackReq("valid", fb)); rec.Code != 200 {
			t.Fatalf("feedback %s: %d %s", fb, rec.Code, rec.Body)
		}
	}

	// A switch or timing in progress, or no room: 409, nothing started.
	sw.setStarting(true)
	wantJSON(t, e.do(adminReq("POST", path, "")), 409, errJSON(CodeConflict, "another model switch is in progress: the llm model is still loading; retry when it has finished"))
	sw.setStarting(false)
	sw.setMem(10 << 20)
	wantJSON(t, e.do(adminReq("POST", path, "")), 409, errJSON(CodeConflict, "the model cannot be compared: it does not fit in memory beside the active one: it needs about 64 MiB but only 10 MiB are available; a comparison never unloads the active model: free memory, or switch to it (requests get 503 loading meanwhile) and compare the other way round"))
	sw.setMem(0)

	rec := e.do(adminReq("POST", path, `{"turns":5}`))
	wantJSON(t, rec, 202, `{"kind":"llm","node":"box-test","model":"b.gguf","state":"running","turns":5,"turns_found":2,"temperature":0.7,"done":0,"total":0,"started_at":"2026-01-02T03:04:05Z","preempted":0}`)
	// One at a time.
	wantJSON(t, e.do(adminReq("POST", path, "")), 409, errJSON(CodeConflict, "a comparison of b.gguf is running; one runs at a time: retry when it has finished"))
	get := func() models.Comparison {
		t.Helper()
		rec := e.do(adminReq("GET", path, ""))
		if rec.Code != 200 {
			t.Fatalf("GET: %d %s", rec.Code, rec.Body)
		}
		if s := rec.Body.String(); strings.Contains(s, "SECRET") {
			t.Errorf("the comparison shows dialog text: %s", s)
		}
		var m models.Comparison
		if err := json.Unmarshal(rec.Body.Bytes(), &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	for m := get(); m.Done == 0; m = get() {
		time.Sleep(time.Millisecond) // the run reports its first step
	}
	if m := get(); m.State != "running" || m.Done != 1 || m.Total != 4 || m.Candidate != nil {
		t.Errorf("while running: %+v", m)
	}
	close(release)
	m := get()
	for ; m.State == "running"; m = get() {
		time.Sleep(time.Millisecond)
	}
	if m.State != "done" || m.Done != 4 || m.Preempted != 1 || m.Reason != "the model needs about 64 MiB and 1000 MiB are available: it was compared beside the active one" || m.FinishedAt == "" || m.Error != nil ||
		m.Candidate == nil || m.Candidate.Model != "b.gguf" || m.Candidate.ExactRate != 0.5 ||
		m.Active == nil || m.Active.Model != "a.gguf" || m.Active.ExactRate != 1 {
		t.Errorf("done: %+v %+v %+v", m, m.Candidate, m.Active)
	}
	// The turns replayed: the remembered and reported ones, oldest first,
	// with the live turn's candidate count and prompt (what the user spoke
	// is what the exact rates above were scored against).
	got := lms.cand.requests()
	want := []struct {
		partner string
		n       int
	}{{secret1, 2}, {secret2, 3}}
	if len(got) != len(want) {
		t.Fatalf("%d turns, want %d", len(got), len(want))
	}
	for i, w := range want {
		g := got[i]
		if len(g.Messages) != 1 || g.Messages[0].Content != w.partner || g.N != w.n || g.Temperature != 0.7 || g.SystemPrompt != DefaultSystemPrompt {
			t.Errorf("turn %d: %d messages, n %d, temperature %v, prompt of %d bytes; want %s, n %d", i, len(g.Messages), g.N, g.Temperature, len(g.SystemPrompt), w.partner, w.n)
		}
	}
	// turns bounds them to the latest.
	rec = e.do(adminReq("POST", path, `{"turns":1,"temperature":0}`))
	if rec.Code != 202 || !strings.Contains(rec.Body.String(), `"turns_found":1,"temperature":0,`) {
		t.Fatalf("turns 1: %d %s", rec.Code, rec.Body)
	}
	for m = get(); m.State == "running"; m = get() {
		time.Sleep(time.Millisecond)
	}
	got = lms.cand.requests()[len(want):]
	if len(got) != 1 || got[0].Messages[0].Content != secret2 || got[0].Temperature != 0 {
		t.Errorf("turns 1: %+v", got)
	}

	logs := e.do(adminReq("GET", "/v1/admin/logs?stream=admin", "")).Body.String()
	for _, w := range []string{"model comparison started: llm b.gguf on the latest 2 recorded turns",
		"model compared: llm b.gguf on 2 turns: spoken reply among the candidates 50% (active a.gguf: 100%), keystrokes saved ", ", 120 ms a turn (active 80 ms)",
		"model comparison refused: llm b.gguf: another model switch is in progress"} {
		if !strings.Contains(logs, w) {
			t.Errorf("admin log lacks %q", w)
		}
	}
	if strings.Contains(logs, "SECRET") {
		t.Error("the admin log shows dialog text")
	}
	var list struct {
		Compare     bool
		Comparisons map[string]models.Comparison
	}
	decode(t, e.do(adminReq("GET", "/v1/admin/models", "")), &list)
	if !list.Compare || len(list.Comparisons) != 1 || list.Comparisons["b.gguf"].State != "done" || list.Comparisons["b.gguf"].TurnsFound != 1 {
		t.Errorf("listed: compare %v, comparisons %+v", list.Compare, list.Comparisons)
	}
	// A removed file's comparison is not listed.
	if rec := e.do(adminReq("DELETE", "/v1/admin/models/b.gguf", "")); rec.Code != 204 {
		t.Fatalf("remove: %d %s", rec.Code, rec.Body)
	}
	list.Comparisons = nil
	decode(t, e.do(adminReq("GET", "/v1/admin/models", "")), &list)
	if len(list.Comparisons) != 0 {
		t.Errorf("comparisons after removing the file: %+v", list.Comparisons)
	}
}

// TestAdminModelCompareStops: Close stops a running comparison, which ends
// failed, canceled.
func TestAdminModelCompareStops(t *testing.T) {
	dir := modelsFolder(t, "a.gguf", "b.gguf")
	a := filepath.Join(dir, "a.gguf")
	sw := &fakeSwitcher{fakeHealth: &fakeHealth{}, active: map[string]string{"llm": a}}
	lms := &fakeLMs{act: &fakeLM{path: a, cands: []string{"x"}}, cand: &fakeLM{cands: []string{"x"}, block: make(chan struct{})}}
	e := newEnv(t, withModels(dir, sw, lms))
	e.addKey("valid", 60)
	id := e.infer("valid", `{"remember":true,"user_id":"sam","messages":[{"role":"speaker","content":"Tea?"}]}`)
	if rec := e.do(feedbackReq("valid", `{"inference_id":"`+id+`","chosen_rank":1}`)); rec.Code != 200 {
		t.Fatalf("feedback: %d %s", rec.Code, rec.Body)
	}
	if rec := e.do(adminReq("POST", "/v1/admin/models/b.gguf/compare", "")); rec.Code != 202 {
		t.Fatalf("compare: %d %s", rec.Code, rec.Body)
	}
	e.srv.Close()
	var m models.Comparison
	decode(t, e.do(adminReq("GET", "/v1/admin/models/b.gguf/compare", "")), &m)
	if m.State != "failed" || m.Error == nil || m.Error.Error != CodeCanceled {
		t.Errorf("after Close: %+v %+v", m, m.Error)
	}
}
