package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"math"
	"mime/multipart"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/replyd/replyd/internal/secret"
	"github.com/replyd/replyd/internal/testutil"
)

// TestMain lets the test binary act as replyd itself when re-executed with
// REPLYD_E2E_EXEC=1, so the end-to-end test runs the real program (with the
// race detector when the tests have it) without a second build.
func TestMain(m *testing.M) {
	if os.Getenv("REPLYD_E2E_EXEC") == "1" {
		os.Exit(run(context.Background(), os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// proc is one running replyd process.
type proc struct {
	t      *testing.T
	cmd    *exec.Cmd
	url    string
	output testutil.SyncBuffer // stdout and stderr together
	done   chan struct{}
}

func (p *proc) out() string { return p.output.String() }

func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// startReplyd starts the test binary as `replyd serve` with env and waits
// until /healthz answers 200.
func startReplyd(t *testing.T, env map[string]string) *proc {
	t.Helper()
	addr := freePort(t)
	cmd := exec.Command(os.Args[0], "serve")
	cmd.Env = append(os.Environ(), "REPLYD_E2E_EXEC=1", "REPLYD_ADDR="+addr)
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	p := &proc{t: t, cmd: cmd, url: "http://" + addr, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = &p.output, &p.output
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() { p.kill() })
	deadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) {
		select {
		case <-p.done:
			t.Fatalf("replyd exited during start:\n%s", p.out())
		default:
		}
		resp, err := http.Get(p.url + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return p
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("replyd not ready after 3 minutes:\n%s", p.out())
	return nil
}

func (p *proc) kill() {
	if p.cmd.Process != nil {
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// stop sends SIGTERM and waits for a clean exit.
func (p *proc) stop() {
	p.t.Helper()
	_ = p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
	case <-time.After(60 * time.Second):
		p.t.Fatalf("replyd did not stop within 60 s of SIGINT:\n%s", p.out())
	}
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		p.t.Fatalf("replyd exited with %d after SIGINT:\n%s", code, p.out())
	}
}

func (p *proc) do(method, path string, hdr map[string]string, body io.Reader, ctype string) (int, http.Header, []byte) {
	p.t.Helper()
	req, err := http.NewRequest(method, p.url+path, body)
	if err != nil {
		p.t.Fatal(err)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		p.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

func (p *proc) json(method, path string, hdr map[string]string, in any, wantStatus int) map[string]any {
	p.t.Helper()
	var body io.Reader
	ctype := ""
	if in != nil {
		b, _ := json.Marshal(in)
		body, ctype = bytes.NewReader(b), "application/json"
	}
	st, _, b := p.do(method, path, hdr, body, ctype)
	if st != wantStatus {
		p.t.Fatalf("%s %s: status %d, want %d: %s", method, path, st, wantStatus, b)
	}
	var out map[string]any
	if len(bytes.TrimSpace(b)) > 0 {
		if err := json.Unmarshal(b, &out); err != nil {
			p.t.Fatalf("%s %s: body is not a JSON object: %s", method, path, b)
		}
	}
	return out
}

// inferBody builds a /v1/infer multipart body.
func inferBody(t *testing.T, payload string, wav []byte) (io.Reader, string) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	if err := mw.WriteField("payload", payload); err != nil {
		t.Fatal(err)
	}
	if wav != nil {
		fw, err := mw.CreateFormFile("audio", "partner.wav")
		if err != nil {
			t.Fatal(err)
		}
		fw.Write(wav)
	}
	mw.Close()
	return &buf, mw.FormDataContentType()
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
	const rate, n = 16000, 32000
	var buf bytes.Buffer
	buf.WriteString("RIFF")
	binary.Write(&buf, binary.LittleEndian, uint32(36+2*n))
	buf.WriteString("WAVEfmt ")
	for _, v := range []any{uint32(16), uint16(1), uint16(1), uint32(rate), uint32(2 * rate), uint16(2), uint16(16)} {
		binary.Write(&buf, binary.LittleEndian, v)
	}
	buf.WriteString("data")
	binary.Write(&buf, binary.LittleEndian, uint32(2*n))
	for i := 0; i < n; i++ {
		x := 0.0
		for h := 1; h <= 8; h++ {
			x += math.Sin(2*math.Pi*float64(120*h)*float64(i)/rate) / float64(h)
		}
		binary.Write(&buf, binary.LittleEndian, int16(x*6000))
	}
	return buf.Bytes()
}

// TestEndToEnd runs the real program on demo models: it creates a key, calls
// /v1/infer with and without audio, logs in by OTP through a webhook, then
// restarts the process and finds keys, prompt, sessions and logs intact.
func TestEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test starts the real binary")
	}
	dir := t.TempDir()
	modelDir := filepath.Join(dir, "models")
	if code := run(context.Background(), []string{"models", "demo", "--dir", modelDir}, os.Getenv, io.Discard, os.Stderr); code != 0 {
		t.Fatalf("models demo exited %d", code)
	}
	rcv := testutil.NewOTPInbox(t)
	const adminKey = "e2e-admin-key-0123456789abcdef"
	env := map[string]string{
		"REPLYD_DATA_DIR":        filepath.Join(dir, "data"),
		"REPLYD_ADMIN_KEY":       adminKey,
		"REPLYD_LLM_MODEL":       filepath.Join(modelDir, "llm-demo.gguf"),
		"REPLYD_WHISPER_MODEL":   filepath.Join(modelDir, "whisper-demo.bin"),
		"REPLYD_OTP_CHANNEL":     "webhook",
		"REPLYD_OTP_WEBHOOK_URL": rcv.URL,
		"REPLYD_THREADS":         "1",
		"REPLYD_LLM_CONTEXT":     "2048",
	}
	p := startReplyd(t, env)
	admin := map[string]string{"X-ADMIN-KEY": adminKey}

	h := p.json("GET", "/healthz", nil, nil, 200)
	if h["status"] != "ok" {
		t.Fatalf("healthz: %v", h)
	}
	if st, hd, b := p.do("GET", "/client.md", nil, nil, ""); st != 200 || !strings.HasPrefix(hd.Get("Content-Type"), "text/markdown") || !bytes.Contains(b, []byte("/v1/infer")) {
		t.Fatalf("client.md: %d %q", st, hd.Get("Content-Type"))
	}

	// A key, shown once.
	created := p.json("POST", "/v1/admin/keys", admin, map[string]any{"client_id": "tablet-e2e"}, 200)
	apiKey, _ := created["api_key"].(string)
	keyHash, _ := created["api_key_hash"].(string)
	if apiKey == "" || keyHash != secret.Hash(apiKey) {
		t.Fatalf("create key: %v", created)
	}

	// Infer without audio.
	body, ct := inferBody(t, `{"messages":[{"role":"speaker","content":"Would you like some tea?"}],"options":{"max_candidates":3}}`, nil)
	st, _, b := p.do("POST", "/v1/infer", map[string]string{"X-API-KEY": apiKey}, body, ct)
	if st != 200 {
		t.Fatalf("infer without audio: %d %s\n%s", st, b, p.out())
	}
	var res struct {
		Transcript *string  `json:"transcript"`
		Response   []string `json:"response"`
	}
	if err := json.Unmarshal(b, &res); err != nil || len(res.Response) == 0 || res.Transcript != nil {
		t.Fatalf("infer without audio: %s", b)
	}

	// Infer with audio.
	body, ct = inferBody(t, `{"messages":[{"role":"disabled_person","content":"Hello."},{"role":"speaker","audio":true}],"language":"en"}`, testWAV(t))
	st, _, b = p.do("POST", "/v1/infer", map[string]string{"X-API-KEY": apiKey}, body, ct)
	if st != 200 {
		t.Fatalf("infer with audio: %d %s", st, b)
	}
	res.Transcript, res.Response = nil, nil
	if err := json.Unmarshal(b, &res); err != nil || len(res.Response) == 0 || res.Transcript == nil {
		t.Fatalf("infer with audio: %s", b)
	}

	// OTP login through the webhook.
	sent := p.json("POST", "/v1/admin/otp/send", nil, nil, 200)
	if sent["sent"] != true || sent["channel"] != "webhook" {
		t.Fatalf("otp send: %v", sent)
	}
	code := rcv.Next(t, 1)
	if len(code) != 6 {
		t.Fatalf("webhook got code %q", code)
	}
	if strings.Contains(p.out(), code) {
		t.Fatalf("the OTP code appears in replyd's output")
	}
	sess := p.json("POST", "/v1/admin/otp/verify", nil, map[string]string{"code": code}, 200)
	token, _ := sess["session_token"].(string)
	if token == "" {
		t.Fatalf("otp verify: %v", sess)
	}
	session := map[string]string{"X-ADMIN-SESSION": token}

	// A new prompt version.
	p.json("POST", "/v1/admin/system-prompt", session, map[string]string{"prompt": "Reply as me, briefly and warmly."}, 200)
	logs := p.json("GET", "/v1/admin/logs?window=1h", session, nil, 200)
	nLogs := int(logs["count"].(float64))
	if nLogs < 5 { // key created, 2 infers, login ok, prompt changed
		t.Fatalf("logs before restart: %v", logs)
	}

	// Restart: everything acknowledged is still there.
	p.stop()
	p = startReplyd(t, env)
	keys := p.json("GET", "/v1/admin/keys", session, nil, 200)
	items, _ := keys["items"].([]any)
	if len(items) != 1 || items[0].(map[string]any)["APIKeyHash"] != keyHash {
		t.Fatalf("keys after restart (session must survive too): %v", keys)
	}
	pr := p.json("GET", "/v1/admin/system-prompt", admin, nil, 200)
	if pr["prompt"] != "Reply as me, briefly and warmly." || pr["version"] != "2" {
		t.Fatalf("prompt after restart: %v", pr)
	}
	logs2 := p.json("GET", "/v1/admin/logs?window=1h", admin, nil, 200)
	if int(logs2["count"].(float64)) < nLogs {
		t.Fatalf("logs after restart: %d < %d", int(logs2["count"].(float64)), nLogs)
	}
	stats := p.json("GET", "/v1/admin/stats?window=1h", admin, nil, 200)
	if stats["total_requests"] != float64(2) || stats["active_users"] != float64(1) {
		t.Fatalf("stats after restart: %v", stats)
	}
	body, ct = inferBody(t, `{"messages":[{"role":"speaker","content":"Still there?"}]}`, nil)
	if st, _, b := p.do("POST", "/v1/infer", map[string]string{"X-API-KEY": apiKey}, body, ct); st != 200 {
		t.Fatalf("infer after restart: %d %s", st, b)
	}
	p.json("DELETE", "/v1/admin/session", session, nil, 200)
	if st, _, _ := p.do("GET", "/v1/admin/keys", session, nil, ""); st != 401 {
		t.Fatalf("session after logout: %d, want 401", st)
	}

	// A hot backup while replyd holds the data file goes through the
	// running server; restore and check work once it has stopped.
	cli := func(args ...string) (int, string) {
		var out bytes.Buffer
		getenv := func(k string) string {
			if k == "REPLYD_ADDR" {
				return strings.TrimPrefix(p.url, "http://")
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
	p.stop()
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
	rk := restored.json("GET", "/v1/admin/keys", admin, nil, 200)
	if items, _ := rk["items"].([]any); len(items) != 1 || items[0].(map[string]any)["APIKeyHash"] != keyHash {
		t.Fatalf("keys in the restored data file: %v", rk)
	}
	restored.stop()

	// Nothing secret or from the dialog in the output.
	out := p.out()
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
