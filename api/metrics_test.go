package api

import (
	"bytes"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/replyd/replyd/engine"
	"github.com/replyd/replyd/internal/testutil"
)

// metricsEnv is a server whose engines are: speech-to-text ready (a demo
// model, two recordings in its queue), the language model still loading.
func metricsEnv(t *testing.T) *env {
	e := newEnv(t)
	e.health.set(
		engine.EngineStatus{Name: "stt", Model: "/srv/models/whisper-demo.bin", Ready: true, Demo: true, QueueSize: 2,
			WindowShortened: 5, WindowRetries: 1},
		engine.EngineStatus{Name: "llm", Model: "/srv/models/qwen2.5-1.5b-instruct-q4_k_m.gguf"},
	)
	return e
}

// TestMetricsEnginesAndBuildInfo: /metrics shows each engine's readiness,
// the speech queue's depth and a build_info series with the version, the
// model file names and the demo flag.
func TestMetricsEnginesAndBuildInfo(t *testing.T) {
	e := metricsEnv(t)
	rec := e.do(adminReq("GET", "/metrics", ""))
	if rec.Code != 200 {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	m := rec.Body.String()
	for _, want := range []string{
		`replyd_engine_ready{engine="stt"} 1`,
		`replyd_engine_ready{engine="llm"} 0`,
		`replyd_speech_queue_depth 2`,
		`replyd_whisper_windows_total{kind="shortened"} 5`,
		`replyd_whisper_windows_total{kind="retried"} 1`,
		`replyd_build_info{demo="true",llm_model="qwen2.5-1.5b-instruct-q4_k_m.gguf",version="1.2.3",whisper_model="whisper-demo.bin"} 1`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if strings.Contains(m, "/srv/models") {
		t.Error("metrics show model paths; names are enough")
	}
}

// TestMetricsBearer: Prometheus' standard scrape authentication,
// Authorization: Bearer <admin key>, is accepted on /metrics; a wrong token
// or an API key is not.
func TestMetricsBearer(t *testing.T) {
	e := metricsEnv(t)
	apiKey := e.addKey("tablet", 60)
	for token, want := range map[string]int{testAdminKey: 200, "guess": 401, apiKey: 401} {
		req := httptest.NewRequest("GET", "/metrics", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		if rec := e.do(req); rec.Code != want {
			t.Errorf("Bearer %.8s…: %d, want %d", token, rec.Code, want)
		}
	}
	// Only on /metrics: the admin API keeps its own headers.
	req := httptest.NewRequest("GET", "/v1/admin/keys", nil)
	req.Header.Set("Authorization", "Bearer "+testAdminKey)
	if rec := e.do(req); rec.Code != 401 {
		t.Errorf("Bearer on /v1/admin/keys: %d, want 401", rec.Code)
	}
}

// TestMetricsLint checks the exposition with client_golang's linter
// (promlint, what promtool uses) and, when it is installed, with promtool
// itself (Debian's prometheus package; scripts/deps.sh test extracts it to
// tests/.tools).
func TestMetricsLint(t *testing.T) {
	e := metricsEnv(t)
	e.addKey("valid", 60)
	e.do(inferReq(t, "valid", payloadPart(simplePayload), audioPart([]byte("RIFF"))))
	problems, err := promtest.GatherAndLint(e.srv.reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}

	local, _ := filepath.Abs("../tests/.tools/promtool")
	promtool := testutil.Tool(t, "promtool", "the exposition beyond promlint", local)
	body := e.do(adminReq("GET", "/metrics", "")).Body.Bytes()
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = bytes.NewReader(body)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}
