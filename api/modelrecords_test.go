package api

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/replyd/replyd/models"
)

// TestModelRecordsKeptOverRestart: timings kept as files by an earlier
// replyd move into the store at the first start (the files go; an
// unreadable one stays, with a warning); a timing and a finished
// comparison are in the store, so a new server on the same store (a
// restart) lists them, and serves the comparison; a file replaced since
// has neither.
func TestModelRecordsKeptOverRestart(t *testing.T) {
	dir := modelsFolder(t, "a.gguf", "b.gguf", "c.gguf")
	st, err := os.Stat(filepath.Join(dir, "c.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	legacy := filepath.Join(dir, ".timings")
	if err := os.MkdirAll(legacy, 0o755); err != nil {
		t.Fatal(err)
	}
	old := fmt.Sprintf(`{"kind":"llm","node":"box-test","at":"2025-12-01T10:00:00Z","reason":"fits","bytes_needed":1,"bytes_available":2,"load_ms":3,`+
		`"candidate":{"model":"c.gguf","turn_ms":40},"active":{"model":"a.gguf","turn_ms":50},"bytes":%d,"mod_time":%q}`,
		st.Size(), st.ModTime().Format(time.RFC3339Nano))
	for n, body := range map[string]string{"c.gguf.json": old, "broken.gguf.json": "{"} {
		if err := os.WriteFile(filepath.Join(legacy, n), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	a := filepath.Join(dir, "a.gguf")
	// Both models speak the one recorded reply.
	lms := timingLMs(a)
	lms.cand.cands, lms.act.cands = []string{"reply 1"}, []string{"reply 1"}
	opts := func() func(*Options) {
		return withModels(dir, &fakeSwitcher{fakeHealth: &fakeHealth{}, active: map[string]string{"llm": a}}, lms)
	}
	e := newEnv(t, opts())
	if _, err := os.Stat(filepath.Join(legacy, "c.gguf.json")); !os.IsNotExist(err) {
		t.Errorf("the migrated timing file is still there: %v", err)
	}
	if _, err := os.Stat(filepath.Join(legacy, "broken.gguf.json")); err != nil {
		t.Errorf("the unreadable timing file went: %v", err)
	}
	type listing struct {
		Timings     map[string]json.RawMessage
		Comparisons map[string]models.Comparison
	}
	list := func(e *env) listing {
		t.Helper()
		var l listing
		decode(t, e.do(adminReq("GET", "/v1/admin/models", "")), &l)
		return l
	}
	if l := list(e); len(l.Timings) != 1 || string(l.Timings["c.gguf"]) != fmt.Sprintf(`{"kind":"llm","node":"box-test","at":"2025-12-01T10:00:00Z","reason":"fits","bytes_needed":1,"bytes_available":2,"load_ms":3,`+
		`"candidate":{"model":"c.gguf","turn_ms":40},"active":{"model":"a.gguf","turn_ms":50},"bytes":%d}`, st.Size()) {
		t.Errorf("migrated timings %s", l.Timings)
	}
	// A timing of b.gguf, and a comparison of it on a recorded turn.
	if rec := e.do(adminReq("POST", "/v1/admin/models/b.gguf/time", "")); rec.Code != 200 {
		t.Fatalf("time: %d %s", rec.Code, rec.Body)
	}
	e.addKey("valid", 60)
	id := e.infer("valid", `{"remember":true,"user_id":"sam","messages":[{"role":"speaker","content":"Tea?"}]}`)
	if rec := e.do(feedbackReq("valid", `{"inference_id":"`+id+`","chosen_rank":1}`)); rec.Code != 200 {
		t.Fatalf("feedback: %d %s", rec.Code, rec.Body)
	}
	if rec := e.do(adminReq("POST", "/v1/admin/models/b.gguf/compare", "")); rec.Code != 202 {
		t.Fatalf("compare: %d %s", rec.Code, rec.Body)
	}
	for {
		var m models.Comparison
		decode(t, e.do(adminReq("GET", "/v1/admin/models/b.gguf/compare", "")), &m)
		if m.State != "running" {
			break
		}
		time.Sleep(time.Millisecond)
	}
	before := list(e)
	if len(before.Timings) != 2 || before.Comparisons["b.gguf"].State != "done" {
		t.Fatalf("before the restart: %+v", before)
	}

	// The restart: a new server on the same store and folder.
	e2 := newEnv(t, func(o *Options) { o.Store = e.st }, opts())
	after := list(e2)
	if fmt.Sprint(after.Timings) != fmt.Sprint(before.Timings) {
		t.Errorf("timings after the restart %s, before %s", after.Timings, before.Timings)
	}
	if a, b := jsonOf(t, after.Comparisons), jsonOf(t, before.Comparisons); a != b {
		t.Errorf("comparisons after the restart %s, before %s", a, b)
	}
	rec := e2.do(adminReq("GET", "/v1/admin/models/b.gguf/compare", ""))
	var got models.Comparison
	decode(t, rec, &got)
	if rec.Code != 200 || got.State != "done" || got.Candidate == nil || got.Candidate.ExactRate != 1 {
		t.Errorf("GET compare after the restart: %d %s", rec.Code, rec.Body)
	}
	// A file replaced since its timing and comparison has neither.
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(filepath.Join(dir, "b.gguf"), later, later); err != nil {
		t.Fatal(err)
	}
	if l := list(e2); len(l.Timings) != 1 || l.Comparisons != nil {
		t.Errorf("after b.gguf changed: %+v", l)
	}
	wantJSON(t, e2.do(adminReq("GET", "/v1/admin/models/b.gguf/compare", "")), 404, errJSON(CodeNotFound, "no comparison of b.gguf on this box"))
	// Removing a file deletes its records.
	if rec := e2.do(adminReq("DELETE", "/v1/admin/models/c.gguf", "")); rec.Code != 204 {
		t.Fatalf("remove: %d %s", rec.Code, rec.Body)
	}
	if recs, err := e.st.ModelRecords("box-test"); err != nil || len(recs) != 2 || recs[0].File != "b.gguf" {
		t.Errorf("records after removing c.gguf: %+v, %v", recs, err)
	}
}

func jsonOf(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
