package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/replyd/replyd/internal/replydproc"
	"github.com/replyd/replyd/internal/testutil"
)

// feedback posts one outcome report and returns the answer.
func feedback(t *testing.T, p *testutil.Replyd, apiKey string, body map[string]any) map[string]any {
	t.Helper()
	return p.JSON("POST", "/v1/feedback", map[string]string{"X-API-KEY": apiKey}, body, 200)
}

// inferID makes one text inference and returns its inference_id.
func inferID(t *testing.T, p *testutil.Replyd, apiKey, payload string) string {
	t.Helper()
	r := p.Call(inferRequest(apiKey, payload, nil))
	var out struct {
		InferenceID string `json:"inference_id"`
	}
	if r.Status != 200 || json.Unmarshal(r.Body, &out) != nil || out.InferenceID == "" {
		t.Fatalf("infer: %d %s\n%s", r.Status, r.Body, p.Tail(40))
	}
	return out.InferenceID
}

// memoryLines returns the debug lines "remembered replies in the prompt"
// of the process's JSON log, oldest first.
func memoryLines(t *testing.T, out string) []map[string]any {
	t.Helper()
	var lines []map[string]any
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil && m["msg"] == "remembered replies in the prompt" {
			lines = append(lines, m)
		}
	}
	return lines
}

// TestEndToEndOutcomes runs the outcome loop on the real program with the
// demo models: inferences, feedback, the acceptance rate in the stats per
// prompt version across a prompt change, a remembering user whose second
// inference gets the remembered pair into its prompt within the token
// budget (the debug log counts it, never shows it), and the user's deletion,
// after which no byte of the marker text is in the data file or a backup.
func TestEndToEndOutcomes(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test starts the real binary")
	}
	const adminKey = "e2e-outcomes-admin-key-0123456789"
	_, env := demoEnv(t, adminKey)
	env["REPLYD_LOG_LEVEL"], env["REPLYD_LOG_FORMAT"] = "debug", "json"
	dataDir := env["REPLYD_DATA_DIR"]
	p := startReplyd(t, env)
	admin := map[string]string{"X-ADMIN-KEY": adminKey}
	key := p.CreateKey("tablet-outcomes")
	const tea = `{"messages":[{"role":"speaker","content":"Would you like some tea?"}],"options":{"max_candidates":2}}`

	// Version 1 (the seeded default prompt): one accepted, one none_fit.
	a := inferID(t, p, key.APIKey, tea)
	if fb := feedback(t, p, key.APIKey, map[string]any{"inference_id": a, "chosen_rank": 1, "time_to_choice_ms": 2400}); fb["outcome"] != "spoken" {
		t.Fatalf("feedback: %v", fb)
	}
	b := inferID(t, p, key.APIKey, tea)
	feedback(t, p, key.APIKey, map[string]any{"inference_id": b, "none_fit": true})

	// Version 2: one accepted.
	p.JSON("POST", "/v1/admin/system-prompt", admin, map[string]string{"prompt": "Reply as me, briefly."}, 200)
	c := inferID(t, p, key.APIKey, tea)
	feedback(t, p, key.APIKey, map[string]any{"inference_id": c, "chosen_rank": 2})

	stats := p.JSON("GET", "/v1/admin/stats?window=1h&bucket=1h", admin, nil, 200)
	if stats["outcomes"] != 3.0 || stats["accepted"] != 2.0 || stats["acceptance_rate"] != 0.6667 {
		t.Fatalf("stats: %v", stats)
	}
	versions, _ := stats["by_prompt_version"].([]any)
	want := []string{`{"acceptance_rate":0.5,"accepted":1,"inferences":2,"outcomes":2,"version":"1"}`, `{"acceptance_rate":1,"accepted":1,"inferences":1,"outcomes":1,"version":"2"}`}
	if len(versions) != 2 {
		t.Fatalf("by_prompt_version: %v", stats["by_prompt_version"])
	}
	for i, v := range versions {
		if got, _ := json.Marshal(v); string(got) != want[i] {
			t.Errorf("by_prompt_version[%d] = %s, want %s", i, got, want[i])
		}
	}
	if byKey, _ := stats["by_key"].([]any); len(byKey) != 1 || byKey[0].(map[string]any)["client_id"] != "tablet-outcomes" || byKey[0].(map[string]any)["acceptance_rate"] != 0.6667 {
		t.Errorf("by_key: %v", stats["by_key"])
	}
	if r := p.Call(replydproc.Request{Method: "GET", Path: "/metrics", Header: admin}); !bytes.Contains(r.Body, []byte(`replyd_outcomes_total{outcome="spoken",prompt_version="1"} 1`)) {
		t.Errorf("/metrics lacks the outcome counter")
	}

	// A remembering user: the second inference has the pair in its prompt.
	const marker = "MARKER-e2e-5c1f"
	mem := fmt.Sprintf(`{"user_id":"ward3/bed7","remember":true,"messages":[{"role":"speaker","content":"Fancy a cup of tea, %s?"}],"options":{"max_candidates":2}}`, marker)
	d := inferID(t, p, key.APIKey, mem)
	if fb := feedback(t, p, key.APIKey, map[string]any{"inference_id": d, "spoken_text": "Go on then " + marker + " with honey"}); fb["remembered"] != true {
		t.Fatalf("feedback of a remembering user: %v", fb)
	}
	inferID(t, p, key.APIKey, mem)
	lines := memoryLines(t, p.Output())
	if len(lines) != 2 {
		t.Fatalf("%d debug lines about remembered replies, want 2:\n%s", len(lines), p.Tail(40))
	}
	first, second := lines[0], lines[1]
	grown := second["prompt_tokens"].(float64) - first["prompt_tokens"].(float64)
	if first["examples"] != 0.0 || second["examples"] != 1.0 || grown <= 0 || grown > 64 || second["example_tokens"].(float64) > 64 {
		t.Errorf("first %v, second %v: the prompt grew by %v tokens (budget 64)", first, second, grown)
	}
	if strings.Contains(p.Output(), marker) {
		t.Error("the marker text is in replyd's log")
	}
	users := p.JSON("GET", "/v1/admin/users", admin, nil, 200)
	items, _ := users["items"].([]any)
	if len(items) != 1 || items[0].(map[string]any)["pairs"] != 1.0 {
		t.Fatalf("users: %v", users)
	}
	pseudo := items[0].(map[string]any)["user"].(string)
	pairs := p.Must(replydproc.Request{Method: "GET", Path: "/v1/admin/users/" + pseudo + "/pairs?format=jsonl", Header: admin}, 200)
	if !bytes.Contains(pairs, []byte(marker)) {
		t.Errorf("the export lacks the pair: %s", pairs)
	}

	// Deletion leaves no byte of the marker anywhere.
	del := p.JSON("DELETE", "/v1/admin/users/ward3%2Fbed7", admin, nil, 200)
	if del["user"] != pseudo || del["key_destroyed"] != true || del["pairs"] != 1.0 {
		t.Fatalf("delete: %v", del)
	}
	file, err := os.ReadFile(filepath.Join(dataDir, "replyd.db"))
	if err != nil {
		t.Fatal(err)
	}
	backup := p.Must(replydproc.Request{Method: "GET", Path: "/v1/admin/backup", Header: admin}, 200)
	for name, b := range map[string][]byte{"data file": file, "backup": backup} {
		if bytes.Contains(b, []byte("MARKER")) {
			t.Errorf("the marker is in the %s after deletion", name)
		}
	}
	logs := p.Must(replydproc.Request{Method: "GET", Path: "/v1/admin/logs?stream=admin", Header: admin}, 200)
	if !bytes.Contains(logs, []byte("deleted user "+pseudo)) || !bytes.Contains(logs, []byte("exported 1 remembered pairs")) || bytes.Contains(logs, []byte("MARKER")) {
		t.Errorf("admin log: %s", logs)
	}
}

// TestEvalBuiltinAndMalformed runs `replyd eval` on the built-in dialogs with
// the demo model (the table, exit 0), then on a file with a malformed line
// (the line and the field, a non-zero exit).
func TestEvalBuiltinAndMalformed(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the language model")
	}
	dir := t.TempDir()
	demoModelsIn(t, dir)
	model := filepath.Join(dir, "llm-demo.gguf")
	eval := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := run(context.Background(), append([]string{"eval", "--llm-model", model, "--threads", "1"}, args...), func(string) string { return "" }, &out, &errOut)
		return code, out.String(), errOut.String()
	}
	code, out, errOut := eval("-n", "2")
	if code != 0 || !strings.Contains(out, "36 dialogs from built-in dialogs") || !strings.Contains(out, "built-in") ||
		!strings.Contains(out, "top-2") || !strings.Contains(out, "keystrokes saved") || !strings.Contains(out, "demo model") {
		t.Fatalf("eval: exit %d\n%s\n%s", code, out, errOut)
	}

	code, out, _ = eval("-n", "1", "--json", "--dialogs", writeFile(t, dir, "ok.jsonl",
		`{"messages":[{"role":"speaker","content":"Tea?"}],"reply":"Yes please.","inference_id":"inf_x","user":"p_1"}`+"\n\n"+
			`{"inference_id":"inf_y","outcome":"typed","at":"2026-01-02T03:04:05Z"}`+"\n"))
	var js struct {
		Skipped int `json:"skipped_lines"`
		Prompts []struct {
			Dialogs int `json:"dialogs"`
		} `json:"prompts"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &js) != nil || js.Skipped != 1 || len(js.Prompts) != 1 || js.Prompts[0].Dialogs != 1 {
		t.Errorf("eval of an export: exit %d, %s", code, out)
	}

	for _, tc := range []struct{ content, want string }{
		{`{"messages":[{"role":"speaker","content":"Tea?"}],"reply":"Yes"}` + "\n" + `{"messages":[{"role":"robot","content":"x"}],"reply":"y"}`, `line 2: messages[0].role must be "speaker" or "disabled_person"`},
		{`{"messages":[{"role":"speaker","content":"Tea?"}]}`, "line 1: reply is required"},
		{`{"messages":[{"role":"speaker","content":"Tea?"}],"reply":7}`, "line 1: reply has the wrong type: expected a string"},
		{"\n\n" + `{"messages":[`, "line 3: not a JSON object"},
		{`{"reply":"yes"}`, "line 1: messages is required"},
	} {
		code, _, errOut := eval("--dialogs", writeFile(t, dir, "bad.jsonl", tc.content))
		if code == 0 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%q: exit %d, stderr %q; want non-zero and %q", tc.content, code, errOut, tc.want)
		}
	}
}

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
