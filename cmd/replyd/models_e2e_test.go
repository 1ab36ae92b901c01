package main

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/replyd/replyd/internal/replydproc"
)

// TestModelsUploadEndToEnd runs the real program with its models in the
// data directory's models/ folder and, through the admin API: lists them
// (checked, active), uploads a demo model under a new name, refuses a file
// cut in the middle of a tensor and a 2 GB sparse file of zeros (streamed
// from disk, refused on its first bytes), refuses to remove the active
// model and removes the uploaded one. Nothing refused is left behind.
func TestModelsUploadEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test starts the real binary")
	}
	const adminKey = "e2e-admin-key-models-0123456789"
	dir, env := demoEnv(t, adminKey)
	folder := modelsDir(env["REPLYD_DATA_DIR"])
	demoModelsIn(t, folder)
	env["REPLYD_LLM_MODEL"] = filepath.Join(folder, "llm-demo.gguf")
	env["REPLYD_WHISPER_MODEL"] = filepath.Join(folder, "whisper-demo.bin")
	p := startReplyd(t, env)
	admin := map[string]string{"X-ADMIN-KEY": adminKey}

	type entry struct {
		File, Kind, SHA256, Manifest, Check string
		Bytes                               int64
		Active                              bool
	}
	list := func() []entry {
		var out struct{ Models []entry }
		if err := json.Unmarshal(p.Must(replydproc.Request{Path: "/v1/admin/models", Header: admin}, 200), &out); err != nil {
			t.Fatal(err)
		}
		return out.Models
	}
	got := list()
	if len(got) != 2 || got[0].File != "llm-demo.gguf" || got[0].Kind != "llm" || !got[0].Active || got[0].Check != "ok" ||
		got[1].File != "whisper-demo.bin" || got[1].Kind != "whisper" || !got[1].Active || got[1].Manifest != "not in the manifest" {
		t.Fatalf("list %+v", got)
	}

	src := filepath.Join(dir, "models", "llm-demo.gguf")
	file, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	upload := func(name string, body []byte) replydproc.Response {
		return p.Call(replydproc.Request{Method: "POST", Path: "/v1/admin/models?name=" + name, Header: admin, Body: body,
			ContentType: "application/octet-stream", Timeout: 5 * time.Minute})
	}
	if r := upload("candidate.gguf", file); r.Status != 201 || !strings.Contains(string(r.Body), `"check":"ok"`) {
		t.Fatalf("upload: %d %s", r.Status, r.Body)
	}
	w, err := os.ReadFile(filepath.Join(dir, "models", "whisper-demo.bin"))
	if err != nil {
		t.Fatal(err)
	}
	r := upload("cut.bin", w[:len(w)-4096])
	if r.Status != 422 || !strings.Contains(string(r.Body), `"error":"invalid_model"`) || !strings.Contains(string(r.Body), "truncated: tensor") {
		t.Errorf("cut file: %d %s", r.Status, r.Body)
	}

	zeros := filepath.Join(t.TempDir(), "zeros.gguf")
	f, err := os.Create(zeros)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(2 << 30); err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	req, _ := http.NewRequest("POST", p.URL+"/v1/admin/models?name=zeros.gguf", f)
	req.ContentLength = 2 << 30
	req.Header.Set("X-ADMIN-KEY", adminKey)
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := (&http.Client{Timeout: 5 * time.Minute}).Do(req)
	if err != nil {
		t.Fatalf("2 GB upload: %v", err)
	}
	var body struct{ Error, Message string }
	json.NewDecoder(resp.Body).Decode(&body)
	resp.Body.Close()
	t.Logf("2 GB of zeros: %d %s", resp.StatusCode, body.Error)
	// 507 when this machine's disk could not hold 2 GB: refused either way,
	// before a byte was read.
	if !(resp.StatusCode == 422 && body.Error == "invalid_model" && strings.Contains(body.Message, "not a GGUF or whisper.cpp ggml file")) &&
		!(resp.StatusCode == 507 && body.Error == "insufficient_storage") {
		t.Errorf("2 GB of zeros: %d %+v", resp.StatusCode, body)
	}

	if r := p.Call(replydproc.Request{Method: "DELETE", Path: "/v1/admin/models/llm-demo.gguf", Header: admin}); r.Status != 409 {
		t.Errorf("remove the active model: %d %s", r.Status, r.Body)
	}
	p.Must(replydproc.Request{Method: "DELETE", Path: "/v1/admin/models/candidate.gguf", Header: admin}, 204)
	got = list()
	if len(got) != 2 || got[0].File != "llm-demo.gguf" || got[1].File != "whisper-demo.bin" {
		t.Errorf("list after: %+v", got)
	}
	des, _ := os.ReadDir(folder)
	if len(des) != 2 {
		t.Errorf("the folder holds %d files, want the 2 models", len(des))
	}
	logs := string(p.Must(replydproc.Request{Path: "/v1/admin/logs?stream=admin", Header: admin}, 200))
	for _, want := range []string{"model uploaded: candidate.gguf", "model upload refused: cut.bin", "model upload refused: zeros.gguf", "model removed: candidate.gguf"} {
		if !strings.Contains(logs, want) {
			t.Errorf("admin log lacks %q", want)
		}
	}
}
