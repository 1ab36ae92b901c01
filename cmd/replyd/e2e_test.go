package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/replyd/replyd/engine/llm"
	"github.com/replyd/replyd/internal/replydproc"
	"github.com/replyd/replyd/internal/secret"
	"github.com/replyd/replyd/internal/testaudio"
	"github.com/replyd/replyd/internal/testutil"
)

// TestMain lets the test binary act as replyd itself when re-executed with
// REPLYD_E2E_EXEC=1, so the end-to-end test runs the real program, main
// included (with the race detector when the tests have it), without a
// second build.
func TestMain(m *testing.M) {
	if os.Getenv("REPLYD_E2E_EXEC") == "1" {
		main()
	}
	os.Exit(m.Run())
}

// startReplyd starts the test binary as `replyd serve` with env (which
// names the data directory and the admin key) and waits until /healthz
// answers 200.
func startReplyd(t *testing.T, env map[string]string) *testutil.Replyd {
	t.Helper()
	env = maps.Clone(env)
	env["REPLYD_E2E_EXEC"] = "1"
	p := testutil.StartReplyd(t, replydproc.Options{Bin: os.Args[0], DataDir: env["REPLYD_DATA_DIR"], AdminKey: env["REPLYD_ADMIN_KEY"], Env: env})
	p.WaitReady()
	return p
}

// inferRequest is a /v1/infer request with payload and, when wav is not
// nil, a recording.
func inferRequest(apiKey, payload string, wav []byte) replydproc.Request {
	ct, body := replydproc.InferForm([]byte(payload), wav)
	return replydproc.Request{Method: "POST", Path: "/v1/infer", Header: map[string]string{"X-API-KEY": apiKey},
		Body: body, ContentType: ct, Timeout: 6 * time.Minute}
}

// testWAV returns a recording: the jfk clip of the shared data when present,
// else two seconds of a synthetic voiced sound.
func testWAV(t *testing.T) []byte {
	t.Helper()
	if d := os.Getenv("REPLYD_TESTDATA"); d != "" {
		if b, err := os.ReadFile(filepath.Join(d, "whisper", "audio", "jfk.wav")); err == nil {
			return b
		}
	}
	return testaudio.Mono16(16000, testaudio.Voiced(2, 16000))
}

// demoModelsIn runs `replyd models demo` into dir.
func demoModelsIn(t *testing.T, dir string) {
	t.Helper()
	if code := run(context.Background(), []string{"models", "demo", "--dir", dir}, os.Getenv, io.Discard, os.Stderr); code != 0 {
		t.Fatalf("models demo exited %d", code)
	}
}

// modelsFolderEnv is demoEnv with the demo models in the data directory's
// models folder (where the admin lists, times and switches models) as the
// active ones; it returns the environment and that folder.
func modelsFolderEnv(t *testing.T, adminKey string) (map[string]string, string) {
	t.Helper()
	_, env := demoEnv(t, adminKey)
	folder := modelsDir(env["REPLYD_DATA_DIR"])
	demoModelsIn(t, folder)
	env["REPLYD_LLM_MODEL"] = filepath.Join(folder, "llm-demo.gguf")
	env["REPLYD_WHISPER_MODEL"] = filepath.Join(folder, "whisper-demo.bin")
	return env, folder
}

// writeCandidate writes folder/candidate.gguf: a language model of the
// demo's shape with other random weights (seed).
func writeCandidate(t *testing.T, folder string, seed uint64) {
	t.Helper()
	cfg := llm.DemoModelConfig()
	cfg.Seed = seed
	if err := llm.WriteModel(filepath.Join(folder, "candidate.gguf"), cfg); err != nil {
		t.Fatal(err)
	}
}

// demoEnv writes the demo models into a temporary directory and returns it
// with the environment of a replyd on them: its data directory there, the
// admin key, one language-model thread and a short context.
func demoEnv(t *testing.T, adminKey string) (string, map[string]string) {
	t.Helper()
	dir := t.TempDir()
	modelDir := filepath.Join(dir, "models")
	demoModelsIn(t, modelDir)
	return dir, map[string]string{
		"REPLYD_DATA_DIR":      filepath.Join(dir, "data"),
		"REPLYD_ADMIN_KEY":     adminKey,
		"REPLYD_LLM_MODEL":     filepath.Join(modelDir, "llm-demo.gguf"),
		"REPLYD_WHISPER_MODEL": filepath.Join(modelDir, "whisper-demo.bin"),
		"REPLYD_THREADS":       "1",
		"REPLYD_LLM_CONTEXT":   "2048",
		// Functional tests, not speed tests: under the race detector on a
		// busy machine an 11 s recording can take longer than the 30 s
		// default deadline.
		"REPLYD_INFER_TIMEOUT": "5m",
	}
}

// TestEndToEnd runs the real program on demo models: it creates a key, calls
// /v1/infer with and without audio, logs in by OTP through a webhook, then
// restarts the process and finds keys, prompt, sessions and logs intact.
func TestEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test starts the real binary")
	}
	rcv := testutil.NewOTPInbox(t)
	const adminKey = "e2e-admin-key-0123456789abcdef"
	dir, env := demoEnv(t, adminKey)
	env["REPLYD_OTP_CHANNEL"] = "webhook"
	env["REPLYD_OTP_WEBHOOK_URL"] = rcv.URL
	p := startReplyd(t, env)
	admin := map[string]string{"X-ADMIN-KEY": adminKey}

	h := p.JSON("GET", "/healthz", nil, nil, 200)
	if h["status"] != "ok" {
		t.Fatalf("healthz: %v", h)
	}
	if r := p.Call(replydproc.Request{Method: "GET", Path: "/client.md"}); r.Status != 200 || !strings.HasPrefix(r.Header.Get("Content-Type"), "text/markdown") || !bytes.Contains(r.Body, []byte("/v1/infer")) {
		t.Fatalf("client.md: %d %q", r.Status, r.Header.Get("Content-Type"))
	} else if budget := fmt.Sprintf("%d tokens", llm.PromptBudget(2048, llm.DefaultMaxReplyTokens)); !bytes.Contains(r.Body, []byte(budget)) {
		t.Errorf("client.md does not state the prompt budget of this configuration (%s)", budget)
	}
	if r := p.Call(replydproc.Request{Method: "HEAD", Path: "/healthz"}); r.Status != 200 || len(r.Body) != 0 {
		t.Fatalf("HEAD /healthz: %d, %d bytes", r.Status, len(r.Body))
	}

	// A key, shown once.
	created := p.JSON("POST", "/v1/admin/keys", admin, map[string]any{"client_id": "tablet-e2e"}, 200)
	apiKey, _ := created["api_key"].(string)
	keyHash, _ := created["api_key_hash"].(string)
	if apiKey == "" || keyHash != secret.Hash(apiKey) {
		t.Fatalf("create key: %v", created)
	}

	// Infer without audio.
	r := p.Call(inferRequest(apiKey, `{"messages":[{"role":"speaker","content":"Would you like some tea?"}],"options":{"max_candidates":3}}`, nil))
	if r.Status != 200 {
		t.Fatalf("infer without audio: %d %s\n%s", r.Status, r.Body, p.Output())
	}
	var res struct {
		Transcript *string  `json:"transcript"`
		Response   []string `json:"response"`
	}
	if err := json.Unmarshal(r.Body, &res); err != nil || len(res.Response) == 0 || res.Transcript != nil {
		t.Fatalf("infer without audio: %s", r.Body)
	}

	// Infer with audio.
	r = p.Call(inferRequest(apiKey, `{"messages":[{"role":"disabled_person","content":"Hello."},{"role":"speaker","audio":true}],"language":"en"}`, testWAV(t)))
	if r.Status != 200 {
		t.Fatalf("infer with audio: %d %s", r.Status, r.Body)
	}
	res.Transcript, res.Response = nil, nil
	if err := json.Unmarshal(r.Body, &res); err != nil || len(res.Response) == 0 || res.Transcript == nil {
		t.Fatalf("infer with audio: %s", r.Body)
	}

	// OTP login through the webhook.
	sent := p.JSON("POST", "/v1/admin/otp/send", nil, nil, 200)
	if sent["sent"] != true || sent["channel"] != "webhook" {
		t.Fatalf("otp send: %v", sent)
	}
	code := rcv.Next(t, 1)
	if len(code) != 8 {
		t.Fatalf("webhook got code %q, want 8 digits", code)
	}
	if strings.Contains(p.Output(), code) {
		t.Fatalf("the OTP code appears in replyd's output")
	}
	sess := p.JSON("POST", "/v1/admin/otp/verify", nil, map[string]string{"code": code}, 200)
	token, _ := sess["session_token"].(string)
	if token == "" {
		t.Fatalf("otp verify: %v", sess)
	}
	session := map[string]string{"X-ADMIN-SESSION": token}

	// The built-in prompt is version "1", as the OpenAPI file says.
	if pr := p.JSON("GET", "/v1/admin/system-prompt", session, nil, 200); pr["version"] != "1" {
		t.Fatalf("built-in prompt: %v", pr)
	}
	if r := p.Call(replydproc.Request{Path: "/openapi.yaml"}); !bytes.Contains(r.Body, []byte(`built-in prompt as version "1"`)) {
		t.Errorf("openapi.yaml does not say the built-in prompt is version \"1\"")
	}

	// Fields each within their limit but together too long for the model:
	// a permanent 400 naming them, not a 502 to retry.
	long := strings.Repeat("Retired teacher who loves gardening. ", 200)[:7000]
	payload, _ := json.Marshal(map[string]any{"disabled_person_biography": long, "persona": long, "user_profile": long,
		"messages": []map[string]string{{"role": "speaker", "content": "Tea?"}}})
	if r := p.Call(inferRequest(apiKey, string(payload), nil)); r.Status != 400 || !bytes.Contains(r.Body, []byte(`"error":"prompt_too_long"`)) ||
		!bytes.Contains(r.Body, []byte("persona")) || bytes.Contains(r.Body, []byte("gardening")) {
		t.Fatalf("texts over the combined budget: %d %s", r.Status, r.Body)
	}

	// A new prompt version.
	p.JSON("POST", "/v1/admin/system-prompt", session, map[string]string{"prompt": "Reply as me, briefly and warmly."}, 200)
	logs := p.JSON("GET", "/v1/admin/logs?window=1h", session, nil, 200)
	nLogs := int(logs["count"].(float64))
	if nLogs < 6 { // key created, 3 infers, login ok, prompt changed
		t.Fatalf("logs before restart: %v", logs)
	}

	// Restart: everything acknowledged is still there.
	p.Stop()
	p = startReplyd(t, env)
	keys := p.JSON("GET", "/v1/admin/keys", session, nil, 200)
	items, _ := keys["items"].([]any)
	if len(items) != 1 || items[0].(map[string]any)["APIKeyHash"] != keyHash {
		t.Fatalf("keys after restart (session must survive too): %v", keys)
	}
	pr := p.JSON("GET", "/v1/admin/system-prompt", admin, nil, 200)
	if pr["prompt"] != "Reply as me, briefly and warmly." || pr["version"] != "2" {
		t.Fatalf("prompt after restart: %v", pr)
	}
	logs2 := p.JSON("GET", "/v1/admin/logs?window=1h", admin, nil, 200)
	if int(logs2["count"].(float64)) < nLogs {
		t.Fatalf("logs after restart: %d < %d", int(logs2["count"].(float64)), nLogs)
	}
	stats := p.JSON("GET", "/v1/admin/stats?window=1h", admin, nil, 200)
	if stats["total_requests"] != float64(3) || stats["active_users"] != float64(1) {
		t.Fatalf("stats after restart: %v", stats)
	}
	if r := p.Call(inferRequest(apiKey, `{"messages":[{"role":"speaker","content":"Still there?"}]}`, nil)); r.Status != 200 {
		t.Fatalf("infer after restart: %d %s", r.Status, r.Body)
	}
	p.JSON("DELETE", "/v1/admin/session", session, nil, 200)
	if r := p.Call(replydproc.Request{Method: "GET", Path: "/v1/admin/keys", Header: session}); r.Status != 401 {
		t.Fatalf("session after logout: %d, want 401", r.Status)
	}

	// A hot backup while replyd holds the data file goes through the
	// running server; restore and check work once it has stopped.
	cli := func(args ...string) (int, string) {
		var out bytes.Buffer
		getenv := func(k string) string {
			if k == "REPLYD_ADDR" {
				return p.Addr
			}
			return env[k]
		}
		code := run(context.Background(), args, getenv, &out, &out)
		return code, out.String()
	}
	backup := filepath.Join(dir, "backup.db")
	if code, out := cli("backup", "--out", backup); code != 0 || !strings.Contains(out, "backup: wrote") {
		t.Fatalf("hot backup: %d %s", code, out)
	}
	if code, out := cli("restore", backup); code != 1 || !strings.Contains(out, "stop it first") {
		t.Fatalf("restore while running: %d %s", code, out)
	}
	p.Stop()
	if code, out := cli("check"); code != 0 || !strings.Contains(out, "is consistent") {
		t.Fatalf("check: %d %s", code, out)
	}
	env2 := map[string]string{"REPLYD_DATA_DIR": filepath.Join(dir, "restored")}
	var rout bytes.Buffer
	if code := run(context.Background(), []string{"restore", backup}, func(k string) string { return env2[k] }, &rout, &rout); code != 0 {
		t.Fatalf("restore: %s", rout.String())
	}
	restored := startReplyd(t, map[string]string{
		"REPLYD_DATA_DIR": env2["REPLYD_DATA_DIR"], "REPLYD_ADMIN_KEY": adminKey,
		"REPLYD_LLM_MODEL": env["REPLYD_LLM_MODEL"], "REPLYD_WHISPER_MODEL": env["REPLYD_WHISPER_MODEL"],
		"REPLYD_THREADS": "1", "REPLYD_LLM_CONTEXT": "2048",
	})
	rk := restored.JSON("GET", "/v1/admin/keys", admin, nil, 200)
	if items, _ := rk["items"].([]any); len(items) != 1 || items[0].(map[string]any)["APIKeyHash"] != keyHash {
		t.Fatalf("keys in the restored data file: %v", rk)
	}
	restored.Stop()

	// Nothing secret or from the dialog in the output.
	out := p.Output()
	for _, s := range []string{apiKey, token, adminKey, "Would you like some tea?", "Still there?"} {
		if strings.Contains(out, s) {
			t.Errorf("replyd's output contains a secret or dialog text: %q", s)
		}
	}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if strings.Contains(sc.Text(), "panic") {
			t.Errorf("panic in output: %s", sc.Text())
		}
	}
}
