package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/replyd/replyd/engine/whisper"
	"github.com/replyd/replyd/internal/replydproc"
)

// TestModelsSwitchEndToEnd runs the real program and, while clients keep
// sending inferences, switches its language model to another real model
// beside the old one, rolls back with the old one unloaded first (swap),
// and switches again. No request gets a 5xx other than 503 loading (with a
// Retry-After), every request is answered exactly once, and every answer's
// log entry names the model that made it, each of the two models by some.
// The Whisper model is switched too. After a restart the box loads the
// models it chose, not REPLYD_LLM_MODEL's, and lists the choice with what a
// roll back returns to.
func TestModelsSwitchEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test starts the real binary")
	}
	// Functional, not a speed test: only the queue bounds the wait. The
	// candidates: a language model of the demo's shape with other random
	// weights, and a second Whisper file.
	p := startModelsBox(t, "switch", 0xca4d, func(env map[string]string, folder string) {
		env["REPLYD_NODE_NAME"] = "box-e2e"
		env["REPLYD_MAX_WAIT_RATIO"] = "0"
		if err := whisper.WriteDemoModel(filepath.Join(folder, "whisper-two.bin")); err != nil {
			t.Fatal(err)
		}
	})
	admin, apiKey := p.admin, p.apiKey
	load := p.startLoad(t, 2, 0, func(w, i int) (string, []byte) {
		return fmt.Sprintf(`{"messages":[{"role":"speaker","content":"Would you like some tea, %d %d?"}]}`, w, i), nil
	})
	type switched struct {
		Kind, Model, Previous, Mode, Reason, Node string
		LoadMS                                    int64 `json:"load_ms"`
	}
	doSwitch := func(path string, body map[string]any) switched {
		t.Helper()
		var out switched
		b := p.Must(replydproc.Request{Method: "POST", Path: path, Header: admin, JSON: body, Timeout: 5 * time.Minute}, 200)
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %+v", path, out)
		return out
	}

	load.wait(t, 3)
	if s := doSwitch("/v1/admin/models/candidate.gguf/activate", map[string]any{"mode": "beside"}); s.Mode != "beside" || s.Model != "candidate.gguf" || s.Previous != "llm-demo.gguf" || s.Node != "box-e2e" {
		t.Errorf("switch beside: %+v", s)
	}
	load.wait(t, 3)
	if s := doSwitch("/v1/admin/models/llm/rollback", map[string]any{"mode": "swap"}); s.Mode != "swap" || s.Model != "llm-demo.gguf" || s.Previous != "candidate.gguf" {
		t.Errorf("roll back by swap: %+v", s)
	}
	load.wait(t, 3)
	if s := doSwitch("/v1/admin/models/candidate.gguf/activate", nil); s.Model != "candidate.gguf" || s.Previous != "llm-demo.gguf" {
		t.Errorf("switch again: %+v", s)
	}
	load.wait(t, 3)
	answers := load.Stop()

	if len(answers) > 1000 {
		t.Fatalf("%d requests: more than one page of the log (1000) holds", len(answers))
	}
	ok, loading := 0, 0
	ids := map[string]bool{}
	for _, a := range answers {
		switch {
		case a.Status == 200:
			ok++
			if a.ID == "" || ids[a.ID] {
				t.Errorf("answer without an id or answered twice: %q", a.ID)
			}
			ids[a.ID] = true
		case a.Status == 503 && a.Code == "loading":
			loading++
			if a.RetryAfter == "" {
				t.Error("503 loading without Retry-After")
			}
		default:
			t.Errorf("a request got %d %s", a.Status, a.Code)
		}
	}
	t.Logf("%d answers, %d refused with 503 loading during the swap", ok, loading)

	// Every answer is logged once, naming its model; both models answered.
	byModel := map[string]int{}
	logged200, logged503 := 0, 0
	for _, e := range p.loggedInfers(t) {
		switch e.Status {
		case 200:
			logged200++
			byModel[e.Model]++
		case 503:
			logged503++
		}
	}
	if logged200 != ok || logged503 != loading || byModel["llm-demo.gguf"] == 0 || byModel["candidate.gguf"] == 0 || byModel["llm-demo.gguf"]+byModel["candidate.gguf"] != ok {
		t.Errorf("log: %d answered (by model %v), %d loading; the clients saw %d and %d", logged200, byModel, logged503, ok, loading)
	}

	// The statistics count the answers per model.
	var stats struct {
		ByModel []struct {
			Model      string
			Inferences int
		} `json:"by_model"`
	}
	if err := json.Unmarshal(p.Must(replydproc.Request{Path: "/v1/admin/stats", Header: admin}, 200), &stats); err != nil {
		t.Fatal(err)
	}
	perModel := map[string]int{}
	for _, m := range stats.ByModel {
		perModel[m.Model] = m.Inferences
	}
	if len(stats.ByModel) != 2 || perModel["llm-demo.gguf"] != byModel["llm-demo.gguf"] || perModel["candidate.gguf"] != byModel["candidate.gguf"] {
		t.Errorf("stats by model %+v, the log counted %v", stats.ByModel, byModel)
	}

	// Whisper too; an answer to a recording names both models.
	if s := doSwitch("/v1/admin/models/whisper-two.bin/activate", nil); s.Kind != "whisper" || s.Model != "whisper-two.bin" || s.Previous != "whisper-demo.bin" {
		t.Errorf("whisper switch: %+v", s)
	}
	p.Must(inferRequest(apiKey, `{"messages":[{"role":"speaker","audio":true}]}`, testWAV(t)), 200)
	adminLog := string(p.Must(replydproc.Request{Path: "/v1/admin/logs?stream=admin&limit=100", Header: admin}, 200))
	for _, want := range []string{"model switched: llm candidate.gguf (was llm-demo.gguf; beside", "model rolled back: llm llm-demo.gguf (was candidate.gguf; swap",
		"model switched: whisper whisper-two.bin (was whisper-demo.bin"} {
		if !strings.Contains(adminLog, want) {
			t.Errorf("admin log lacks %q", want)
		}
	}

	// A restart keeps the choice: REPLYD_*_MODEL was the first start's only.
	p.Stop()
	p.Replyd = startReplyd(t, p.env)
	var list struct {
		Node   string
		Switch bool
		Models []struct {
			File   string
			Active bool
		}
		Boxes []struct{ Node, Kind, Model, Previous string }
	}
	if err := json.Unmarshal(p.Must(replydproc.Request{Path: "/v1/admin/models", Header: admin}, 200), &list); err != nil {
		t.Fatal(err)
	}
	active := map[string]bool{}
	for _, m := range list.Models {
		active[m.File] = m.Active
	}
	if !active["candidate.gguf"] || active["llm-demo.gguf"] || !active["whisper-two.bin"] || active["whisper-demo.bin"] || !list.Switch || list.Node != "box-e2e" {
		t.Errorf("after the restart: %+v", list)
	}
	if len(list.Boxes) != 2 || list.Boxes[0] != (struct{ Node, Kind, Model, Previous string }{"box-e2e", "llm", "candidate.gguf", "llm-demo.gguf"}) ||
		list.Boxes[1] != (struct{ Node, Kind, Model, Previous string }{"box-e2e", "whisper", "whisper-two.bin", "whisper-demo.bin"}) {
		t.Errorf("boxes after the restart: %+v", list.Boxes)
	}
	p.Must(inferRequest(apiKey, `{"messages":[{"role":"speaker","content":"Tea?"}]}`, nil), 200)
	var last struct {
		Items []struct {
			Model       string
			SpeechModel string `json:"speech_model"`
		}
	}
	if err := json.Unmarshal(p.Must(replydproc.Request{Path: "/v1/admin/logs?stream=infer&limit=2", Header: admin}, 200), &last); err != nil {
		t.Fatal(err)
	}
	// Newest first: the text turn after the restart, then the recording.
	if len(last.Items) != 2 || last.Items[0].Model != "candidate.gguf" || last.Items[1].Model != "candidate.gguf" || last.Items[1].SpeechModel != "whisper-two.bin" {
		t.Errorf("the last answers' log entries: %+v", last.Items)
	}
}
