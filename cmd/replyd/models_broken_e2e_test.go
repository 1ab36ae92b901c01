package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/replyd/replyd/internal/replydproc"
)

// TestModelsActivateBrokenFile runs the real program and has the admin
// activate broken language-model files while a client keeps sending
// inferences: a GGUF cut short (its header claims tensors past the end),
// which the file check refuses before anything is unloaded, and one whose
// header and sizes are valid but whose tensor table lacks a tensor the
// architecture needs (the check passes; llama.cpp refuses it), activated
// beside the old model and by swap (the old one unloaded first, then
// loaded again). Each is 422 invalid_model saying why; the old model keeps
// answering /v1/infer (by name in the log), the listing, /healthz,
// /v1/admin/status and the admin log say which model is active and what
// failed, and the stored
// choice stays the old model, so a restart loads it.
func TestModelsActivateBrokenFile(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test starts the real binary")
	}
	const tensor, renamed = "output_norm.weight", "output_norm.wEIght"
	p := startModelsBox(t, "broken", 0xbad, func(env map[string]string, folder string) {
		env["REPLYD_MAX_WAIT_RATIO"] = "0"
		good, err := os.ReadFile(filepath.Join(folder, "candidate.gguf"))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(folder, "truncated.gguf"), good[:len(good)*2/3], 0o600); err != nil {
			t.Fatal(err)
		}
		// The same bytes with one tensor renamed (same length, so every
		// size and offset stays valid): llama.cpp finds output_norm.weight
		// missing.
		if n := bytes.Count(good, []byte(tensor)); n != 1 {
			t.Fatalf("candidate.gguf names %s %d times, want once", tensor, n)
		}
		damaged := bytes.Replace(good, []byte(tensor), []byte(renamed), 1)
		if err := os.WriteFile(filepath.Join(folder, "damaged.gguf"), damaged, 0o600); err != nil {
			t.Fatal(err)
		}
	})
	admin, apiKey := p.admin, p.apiKey

	// The listing: the truncated file is refused by its check, the
	// damaged one passes it.
	type listing struct {
		Models []struct {
			File, Kind, Check string
			Active            bool
		}
	}
	list := func() map[string]string {
		t.Helper()
		var l listing
		if err := json.Unmarshal(p.Must(replydproc.Request{Path: "/v1/admin/models", Header: admin}, 200), &l); err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, m := range l.Models {
			out[m.File] = m.Check
			if m.Active {
				out[m.File] += " (active)"
			}
		}
		return out
	}
	if l := list(); l["llm-demo.gguf"] != "ok (active)" || !strings.Contains(l["truncated.gguf"], "past the end of the file") || l["damaged.gguf"] != "ok" {
		t.Fatalf("listing before: %v", l)
	}

	// A client keeps asking throughout: every answer is a 200 or, while
	// the swap has the old model unloaded, 503 loading with a Retry-After.
	// It is answered before the switches start.
	load := p.startLoad(t, 1, 0, func(int, int) (string, []byte) {
		return `{"messages":[{"role":"speaker","content":"Shall we go out?"}]}`, nil
	})
	load.wait(t, 1)

	type apiError struct{ Error, Message string }
	activate := func(file, mode string) apiError {
		t.Helper()
		r := p.Call(replydproc.Request{Method: "POST", Path: "/v1/admin/models/" + file + "/activate", Header: admin,
			JSON: map[string]any{"mode": mode}, Timeout: 5 * time.Minute})
		var e apiError
		if err := json.Unmarshal(r.Body, &e); err != nil || r.Status != 422 || e.Error != "invalid_model" || e.Message == "" {
			t.Errorf("activate %s (%s): %d %s; want 422 invalid_model", file, mode, r.Status, r.Body)
		}
		t.Logf("activate %s (%s): %d %s", file, mode, r.Status, e.Message)
		return e
	}
	if e := activate("truncated.gguf", "swap"); !strings.Contains(e.Message, "refused") || !strings.Contains(e.Message, "past the end of the file") {
		t.Errorf("the truncated file's refusal does not say why: %q", e.Message)
	}
	for _, mode := range []string{"beside", "swap"} {
		if e := activate("damaged.gguf", mode); !strings.Contains(e.Message, "damaged.gguf") && !strings.Contains(e.Message, tensor) {
			t.Errorf("the damaged file's failure (%s) names neither the file nor what is wrong: %q", mode, e.Message)
		}
	}
	// The old model answers once the switches have failed.
	p.Must(inferRequest(apiKey, `{"messages":[{"role":"speaker","content":"Tea?"}]}`, nil), 200)
	answers := load.Stop()
	ok := 0
	for _, a := range answers {
		switch {
		case a.Status == 200:
			ok++
		case a.Status == 503 && a.Code == "loading" && a.RetryAfter != "":
		default:
			t.Errorf("a request during the failed switches got %d %s (Retry-After %q)", a.Status, a.Code, a.RetryAfter)
		}
	}
	t.Logf("%d answers during the failed switches, %d of them 200", len(answers), ok)

	// Every answer was the old model's.
	for _, e := range p.loggedInfers(t) {
		if e.Status == 200 && e.Model != "llm-demo.gguf" {
			t.Errorf("an answer was made by %q", e.Model)
		}
	}
	// The status says the old model is active and ready.
	if l := list(); l["llm-demo.gguf"] != "ok (active)" || l["damaged.gguf"] != "ok" {
		t.Errorf("listing after: %v", l)
	}
	// /healthz is ok and /v1/admin/status names the old model, loaded.
	var health struct{ Status string }
	if err := json.Unmarshal(p.Must(replydproc.Request{Path: "/healthz", Header: admin}, 200), &health); err != nil || health.Status != "ok" {
		t.Errorf("/healthz after the failed switches: %+v, %v", health, err)
	}
	var status struct {
		Engines []struct {
			Name, Model, Error string
			Ready              bool
		}
	}
	if err := json.Unmarshal(p.Must(replydproc.Request{Path: "/v1/admin/status", Header: admin}, 200), &status); err != nil {
		t.Fatal(err)
	}
	seen := false
	for _, e := range status.Engines {
		if e.Name == "llm" {
			seen = true
			if !e.Ready || e.Error != "" || filepath.Base(e.Model) != "llm-demo.gguf" {
				t.Errorf("/v1/admin/status llm after the failed switches: %+v", e)
			}
		}
	}
	if !seen {
		t.Errorf("/v1/admin/status lists no llm engine: %+v", status)
	}
	adminLog := string(p.Must(replydproc.Request{Path: "/v1/admin/logs?stream=admin&limit=100", Header: admin}, 200))
	for _, want := range []string{"model switch refused: truncated.gguf", "model switch failed: llm damaged.gguf"} {
		if !strings.Contains(adminLog, want) {
			t.Errorf("admin log lacks %q", want)
		}
	}
	// Nothing was chosen: nothing to roll back to, and a restart loads the
	// old model.
	p.Must(replydproc.Request{Method: "POST", Path: "/v1/admin/models/llm/rollback", Header: admin}, 409)
	p.Stop()
	p.Replyd = startReplyd(t, p.env)
	if l := list(); l["llm-demo.gguf"] != "ok (active)" {
		t.Errorf("listing after a restart: %v", l)
	}
	p.Must(inferRequest(apiKey, `{"messages":[{"role":"speaker","content":"Tea?"}]}`, nil), 200)
}
