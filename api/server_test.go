package api

import (
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"path"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/replyd/replyd/api/web"
	"github.com/replyd/replyd/engine"
	"github.com/replyd/replyd/internal/secret"
	"github.com/replyd/replyd/store"
)

func TestHealthz(t *testing.T) {
	e := newEnv(t)
	rec := e.do(adminReq("GET", "/healthz", ""))
	wantJSON(t, rec, 200, `{"status":"ok","node":"box-test","demo_models":false,"engines":[{"name":"llm","ready":true,"demo":false},{"name":"stt","ready":true,"demo":false}],"m4a":false,"storage":{"writable":true}}`)

	e.health.set(engine.EngineStatus{Name: "llm", Ready: true, Demo: true}, engine.EngineStatus{Name: "stt", Ready: true})
	wantJSON(t, e.do(adminReq("GET", "/healthz", "")), 200, `{"status":"ok","node":"box-test","demo_models":true,"engines":[{"name":"llm","ready":true,"demo":true},{"name":"stt","ready":true,"demo":false}],"m4a":false,"storage":{"writable":true}}`)

	e.health.set(engine.EngineStatus{Name: "llm", Model: "/m/llm.gguf"}, engine.EngineStatus{Name: "stt", Ready: true})
	rec = e.do(adminReq("GET", "/healthz", ""))
	wantJSON(t, rec, 503, `{"status":"loading","reason":"the models are loading","node":"box-test","demo_models":false,"engines":[{"name":"llm","ready":false,"demo":false},{"name":"stt","ready":true,"demo":false}],"m4a":false,"storage":{"writable":true}}`)
	if rec.Header().Get("Retry-After") != "5" {
		t.Errorf("Retry-After = %q", rec.Header().Get("Retry-After"))
	}

	e.health.set(engine.EngineStatus{Name: "llm", Error: "bad magic"}, engine.EngineStatus{Name: "stt"})
	wantJSON(t, e.do(adminReq("GET", "/healthz", "")), 503, `{"status":"error","reason":"a model failed to load","node":"box-test","demo_models":false,"engines":[{"name":"llm","ready":false,"demo":false},{"name":"stt","ready":false,"demo":false}],"m4a":false,"storage":{"writable":true}}`)

	e2 := newEnv(t, func(o *Options) { o.Health = nil })
	wantJSON(t, e2.do(adminReq("GET", "/healthz", "")), 200, `{"status":"ok","node":"box-test","demo_models":false,"engines":[],"m4a":false,"storage":{"writable":true}}`)

	// Voice activity detection is reported as "vad": on, or off when its
	// model is missing; off never makes the service unhealthy.
	stt, llm := engine.EngineStatus{Name: "stt", Ready: true}, engine.EngineStatus{Name: "llm", Ready: true}
	e.health.set(stt, llm)
	e.health.mu.Lock()
	e.health.vad = engine.EngineStatus{Name: "vad", Ready: true}
	e.health.mu.Unlock()
	wantJSON(t, e.do(adminReq("GET", "/healthz", "")), 200, `{"status":"ok","node":"box-test","demo_models":false,"engines":[{"name":"stt","ready":true,"demo":false},{"name":"llm","ready":true,"demo":false}],"m4a":false,"vad":"on","storage":{"writable":true}}`)
	e.health.mu.Lock()
	e.health.vad = engine.EngineStatus{Name: "vad", Error: "open models/silero_vad_v5.onnx: no such file"}
	e.health.mu.Unlock()
	wantJSON(t, e.do(adminReq("GET", "/healthz", "")), 200, `{"status":"ok","node":"box-test","demo_models":false,"engines":[{"name":"stt","ready":true,"demo":false},{"name":"llm","ready":true,"demo":false}],"m4a":false,"vad":"off","storage":{"writable":true}}`)
}

// TestHealthzAnonymous: without a credential /healthz answers the status
// alone (whatever it is); a tablet's key or an admin credential gets the
// details; an invalid credential gets the anonymous answer and counts as a
// failed authentication.
func TestHealthzAnonymous(t *testing.T) {
	e := newEnv(t)
	e.health.set(engine.EngineStatus{Name: "llm", Ready: true, Demo: true}, engine.EngineStatus{Name: "stt", Ready: true})
	wantJSON(t, e.do(httptest.NewRequest("GET", "/healthz", nil)), 200, `{"status":"ok"}`)
	full := `{"status":"ok","node":"box-test","demo_models":true,"engines":[{"name":"llm","ready":true,"demo":true},{"name":"stt","ready":true,"demo":false}],"m4a":false,"storage":{"writable":true}}`
	wantJSON(t, e.do(adminReq("GET", "/healthz", "")), 200, full)
	key := e.addKey("tablet-key-healthz", 60)
	req := httptest.NewRequest("GET", "/healthz", nil)
	req.Header.Set(HeaderAPIKey, key)
	wantJSON(t, e.do(req), 200, full)
	for _, h := range []string{HeaderAPIKey, HeaderAdminKey, HeaderAdminSession} {
		req := httptest.NewRequest("GET", "/healthz", nil)
		req.Header.Set(h, "not-a-credential")
		wantJSON(t, e.do(req), 200, `{"status":"ok"}`)
	}
	e.health.set(engine.EngineStatus{Name: "llm"}, engine.EngineStatus{Name: "stt", Ready: true})
	rec := e.do(httptest.NewRequest("GET", "/healthz", nil))
	wantJSON(t, rec, 503, `{"status":"loading"}`)
	if rec.Header().Get("Retry-After") == "" {
		t.Error("no Retry-After while loading")
	}
}

// TestHealthzDegraded: failing writes or a nearly full data disk make
// /healthz and the Status view say "degraded" (still 200: inference works)
// with the reason; a write that succeeds again clears it.
func TestHealthzDegraded(t *testing.T) {
	free := int64(600 << 20)
	e := newEnv(t, func(o *Options) {
		o.DiskFree = func() (int64, error) { return free, nil }
		o.Limits.MinFreeBytes = 512 << 20
	})
	wantJSON(t, e.do(adminReq("GET", "/healthz", "")), 200, `{"status":"ok","node":"box-test","demo_models":false,"engines":[{"name":"llm","ready":true,"demo":false},{"name":"stt","ready":true,"demo":false}],"m4a":false,"storage":{"writable":true,"free_bytes":629145600}}`)
	free = 100 << 20
	wantJSON(t, e.do(adminReq("GET", "/healthz", "")), 200, `{"status":"degraded","reason":"only 100.0 MiB free on the data disk (warning below 512.0 MiB)","node":"box-test","demo_models":false,"engines":[{"name":"llm","ready":true,"demo":false},{"name":"stt","ready":true,"demo":false}],"m4a":false,
	  "storage":{"writable":true,"free_bytes":104857600,"problem":"only 100.0 MiB free on the data disk (warning below 512.0 MiB)"}}`)
	free = 0
	e.st.fail(fmt.Errorf("store x: %w: no space left on device", store.ErrNoSpace), "Ping")
	wantJSON(t, e.do(adminReq("GET", "/healthz", "")), 200, `{"status":"degraded","reason":"writes fail: the data disk is full; only 0 bytes free on the data disk (warning below 512.0 MiB)","node":"box-test","demo_models":false,"engines":[{"name":"llm","ready":true,"demo":false},{"name":"stt","ready":true,"demo":false}],"m4a":false,
	  "storage":{"writable":false,"free_bytes":0,"problem":"writes fail: the data disk is full; only 0 bytes free on the data disk (warning below 512.0 MiB)"}}`)
	rec := e.do(adminReq("GET", "/v1/admin/status", ""))
	if !strings.Contains(rec.Body.String(), `"status":"degraded","storage":{"writable":false,"free_bytes":0,"problem":"writes fail: the data disk is full`) {
		t.Errorf("status view: %s", rec.Body)
	}
	// Loading still wins over degraded.
	e.health.set(engine.EngineStatus{Name: "llm"}, engine.EngineStatus{Name: "stt", Ready: true})
	if rec := e.do(adminReq("GET", "/healthz", "")); rec.Code != 503 || !strings.Contains(rec.Body.String(), `"status":"loading"`) {
		t.Errorf("loading and degraded: %d %s", rec.Code, rec.Body)
	}
}

// TestInsufficientStorage: a write that fails for lack of space is 507
// insufficient_storage with a message that names the cause.
func TestInsufficientStorage(t *testing.T) {
	e := newEnv(t)
	e.st.fail(fmt.Errorf("store /d/replyd.db: %w: write /d/replyd.db: no space left on device", store.ErrNoSpace))
	wantJSON(t, e.do(adminReq("POST", "/v1/admin/keys", `{"client_id":"c"}`)), 507, errJSON("insufficient_storage", insufficientStorageMessage))
}

func TestStatus(t *testing.T) {
	e := newEnv(t)
	size, err := e.st.Size()
	if err != nil {
		t.Fatal(err)
	}
	e.health.set(engine.EngineStatus{Name: "llm", Model: "/models/demo/llm-demo.gguf", Ready: true, Demo: true, Backend: "cpu"},
		engine.EngineStatus{Name: "stt", Model: "/models/w.bin", Error: "no such file"})
	e.health.depth = 2
	e.clock.Advance(90 * time.Second)
	wantJSON(t, e.do(adminReq("GET", "/v1/admin/status", "")), 200, `{"status":"ok","storage":{"writable":true},"version":"1.2.3","node":"box-test","uptime_seconds":90,
	  "engines":[{"name":"llm","model":"/models/demo/llm-demo.gguf","ready":true,"demo":true,"backend":"cpu","loaded_at":"0001-01-01T00:00:00Z"},
	             {"name":"stt","model":"/models/w.bin","ready":false,"demo":false,"error":"no such file","loaded_at":"0001-01-01T00:00:00Z"}],
	  "queue_depth":2,"data_file":"/var/lib/replyd/replyd.db","data_file_bytes":`+strconv.FormatInt(size, 10)+`,"otp_channel":"console","totp_enrolled":false,"tls":false,
	  "tls_ca_fingerprint":"","m4a":false,"cors_origins":[],"live":"no_vad",
	  "limits":{"max_body_bytes":26214400,"max_payload_bytes":1048576,"max_audio_seconds":120,"max_messages":200,"max_content_chars":4000,
	            "max_candidates":8,"default_candidates":3,"infer_timeout_seconds":30,"session_ttl_seconds":43200}}`)
}

func TestClientMD(t *testing.T) {
	e := newEnv(t)
	rec := e.do(httptest.NewRequest("GET", "/client.md", nil))
	if rec.Code != 200 || rec.Header().Get("Content-Type") != "text/markdown; charset=utf-8" {
		t.Fatalf("%d %q", rec.Code, rec.Header().Get("Content-Type"))
	}
	md := rec.Body.String()
	l := DefaultLimits()
	for _, want := range []string{
		"X-API-KEY", "curl", "-F 'audio=@", "Example without audio", "Example with audio", "Retry-After",
		"`invalid_request`", "`unauthorized`", "`forbidden`", "`payload_too_large`", "`unsupported_media_type`",
		"`rate_limited`", "`stt_failed`", "`llm_failed`", "`overloaded`", "`not_ready`", "`timeout`", "`internal`",
		"WAV", "Ogg/Opus", "MP3", "FLAC",
		"`disabled_person_biography`", "`persona`", "`user_profile`", "`language`", "`user_id`", "`dialog_id`", "`step_id`", "`time_window_sec`",
		"`options.max_candidates`", "`options.temperature`",
		fmt.Sprintf("| Request body | 25 MiB (%d bytes) |", l.MaxBodyBytes),
		fmt.Sprintf("| `payload` part | 1 MiB (%d bytes) |", l.MaxPayloadBytes),
		fmt.Sprintf("| Audio duration | %d s |", int(l.MaxAudio/time.Second)),
		fmt.Sprintf("| Messages | %d |", l.MaxMessages),
		fmt.Sprintf("| Characters per message | %d |", l.MaxContentChars),
		fmt.Sprintf("| `max_candidates` | 1 to %d, default %d |", l.MaxCandidates, l.DefaultCandidates),
		fmt.Sprintf("| `temperature` | 0 to %g, default %g |", l.MaxTemperature, l.DefaultTemperature),
		fmt.Sprintf("(default %d, at most", l.DefaultRateLimit),
	} {
		if !strings.Contains(md, want) {
			t.Errorf("client.md lacks %q", want)
		}
	}
	if strings.Contains(md, "{{") {
		t.Error("client.md has an unrendered template action")
	}
}

// TestClientMDFollowsLimits renders the guide with other limits: the numbers
// it states move with the limits the server enforces.
func TestClientMDFollowsLimits(t *testing.T) {
	e := newEnv(t, func(o *Options) {
		o.Limits = Limits{MaxBodyBytes: 10 << 20, MaxPayloadBytes: 256 << 10, MaxAudio: 90 * time.Second, MaxMessages: 50,
			MaxContentChars: 1000, MaxCandidates: 6, DefaultCandidates: 2, DefaultRateLimit: 30}
	})
	md := e.do(httptest.NewRequest("GET", "/client.md", nil)).Body.String()
	for _, want := range []string{
		"| Request body | 10 MiB (10485760 bytes) |", "| `payload` part | 256 KiB (262144 bytes) |", "| Audio duration | 90 s |",
		"| Messages | 50 |", "| Characters per message | 1000 |", "| `max_candidates` | 1 to 6, default 2 |", "(default 30, at most",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("client.md lacks %q", want)
		}
	}
	// And the server enforces them.
	e.addKey("valid", 0)
	wantJSON(t, e.do(inferReq(t, "valid", payloadPart(`{"messages":[{"role":"speaker"}],"options":{"max_candidates":7}}`))), 400,
		errJSON("invalid_request", "options.max_candidates must be between 1 and 6"))
}

func TestOpenAPI(t *testing.T) {
	e := newEnv(t)
	rec := e.do(httptest.NewRequest("GET", "/openapi.yaml", nil))
	if rec.Code != 200 || rec.Header().Get("Content-Type") != "application/yaml; charset=utf-8" {
		t.Fatalf("%d %q", rec.Code, rec.Header().Get("Content-Type"))
	}
	var doc struct {
		OpenAPI string `yaml:"openapi"`
		Info    struct {
			Description string `yaml:"description"`
		} `yaml:"info"`
		Paths      map[string]map[string]map[string]any `yaml:"paths"`
		Components struct {
			Schemas map[string]map[string]any `yaml:"schemas"`
		} `yaml:"components"`
	}
	if err := yaml.Unmarshal(rec.Body.Bytes(), &doc); err != nil {
		t.Fatalf("openapi.yaml is not YAML: %v", err)
	}
	if !strings.Contains(doc.Info.Description, "Every GET operation also answers HEAD") || !strings.Contains(doc.Info.Description, "405 `method_not_allowed` with an `Allow` header") {
		t.Errorf("the info description does not state HEAD and 405 with Allow: %s", doc.Info.Description)
	}
	if doc.OpenAPI != "3.1.0" {
		t.Errorf("openapi = %q", doc.OpenAPI)
	}
	param := regexp.MustCompile(`:([a-z_]+)`)
	routed := map[string]bool{}
	for _, r := range e.srv.e.Routes() {
		if r.Method == "echo_route_not_found" {
			continue
		}
		p := param.ReplaceAllString(r.Path, "{$1}")
		p = strings.Replace(p, "/*", "/{path}", 1)
		if r.Method == "HEAD" {
			// Every GET route answers HEAD too; the info description says
			// so once instead of 14 head operations.
			if _, ok := doc.Paths[p]["get"]; !ok {
				t.Errorf("route HEAD %s has no documented GET", p)
			}
			continue
		}
		routed[strings.ToLower(r.Method)+" "+p] = true
		if _, ok := doc.Paths[p][strings.ToLower(r.Method)]; !ok {
			t.Errorf("route %s %s is not in openapi.yaml", r.Method, p)
		}
	}
	for p, ops := range doc.Paths {
		for m := range ops {
			if !routed[m+" "+p] {
				t.Errorf("openapi.yaml documents %s %s, which the router lacks", m, p)
			}
		}
	}
	// Numbers come from the limits.
	l := DefaultLimits()
	opts := doc.Components.Schemas["InferOptions"]["properties"].(map[string]any)
	mc := opts["max_candidates"].(map[string]any)
	if mc["maximum"] != l.MaxCandidates || mc["default"] != l.DefaultCandidates {
		t.Errorf("max_candidates schema %v, want maximum %d default %d", mc, l.MaxCandidates, l.DefaultCandidates)
	}
	msgs := doc.Components.Schemas["InferPayload"]["properties"].(map[string]any)["messages"].(map[string]any)
	if msgs["maxItems"] != l.MaxMessages {
		t.Errorf("messages maxItems %v, want %d", msgs["maxItems"], l.MaxMessages)
	}
	for _, name := range []string{"AnswerCandidate", "APIKeyRecord", "AdminLogsResponse", "AdminStatsResponse", "Error", "InferResponse"} {
		if doc.Components.Schemas[name] == nil {
			t.Errorf("schema %s missing", name)
		}
	}
}

func TestAdminPage(t *testing.T) {
	e := newEnv(t)
	rec := e.do(httptest.NewRequest("GET", "/admin/", nil))
	if rec.Code != 200 || !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/html") {
		t.Fatalf("GET /admin/: %d %q", rec.Code, rec.Header().Get("Content-Type"))
	}
	h := rec.Header()
	csp := h.Get("Content-Security-Policy")
	if !strings.Contains(csp, "default-src 'self'") || !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe-inline") || !strings.Contains(csp, "frame-ancestors 'none'") || !strings.Contains(csp, "media-src 'self' blob:") {
		t.Errorf("CSP = %q", csp)
	}
	if h.Get("X-Content-Type-Options") != "nosniff" || h.Get("X-Frame-Options") != "DENY" || h.Get("Cache-Control") != "no-cache" || h.Get("ETag") == "" {
		t.Errorf("headers = %v", h)
	}
	if h.Get("Set-Cookie") != "" {
		t.Error("the admin page sets a cookie")
	}
	if !strings.Contains(strings.ToLower(rec.Body.String()), "<title") {
		t.Errorf("index.html not served: %q", rec.Body.String())
	}

	// Revalidation.
	req := httptest.NewRequest("GET", "/admin/index.html", nil)
	req.Header.Set("If-None-Match", h.Get("ETag"))
	if rec := e.do(req); rec.Code != http.StatusNotModified {
		t.Errorf("If-None-Match: %d", rec.Code)
	}

	// Every embedded file is served with a type nosniff accepts.
	err := fs.WalkDir(web.AdminFS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rec := e.do(httptest.NewRequest("GET", "/admin/"+p, nil))
		ct := rec.Header().Get("Content-Type")
		want := map[string]string{".js": "text/javascript", ".css": "text/css", ".html": "text/html", ".svg": "image/svg+xml"}[path.Ext(p)]
		if rec.Code != 200 || ct == "" || (want != "" && !strings.HasPrefix(ct, want)) {
			t.Errorf("/admin/%s: %d %q", p, rec.Code, ct)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	for _, p := range []string{"/", "/admin"} {
		rec := e.do(httptest.NewRequest("GET", p, nil))
		if rec.Code != 302 || rec.Header().Get("Location") != "/admin/" {
			t.Errorf("GET %s: %d %q", p, rec.Code, rec.Header().Get("Location"))
		}
	}
}

func TestAdminPageNoTraversal(t *testing.T) {
	e := newEnv(t)
	for _, p := range []string{
		"/admin/../go.mod", "/admin/..%2fgo.mod", "/admin/%2e%2e/go.mod", "/admin/%2e%2e%2fgo.mod", "/admin/..%2f..%2fgo.mod",
		"/admin/static/../../go.mod", "/admin/..%5cgo.mod", "/admin//etc/passwd", "/admin/%2fetc%2fpasswd", "/admin/./index.html",
		"/admin/nope.js", "/admin/../api/server.go", "/admin/%00",
	} {
		// httptest.NewRequest parses p as a request line does: dot
		// segments and escapes reach the router untouched.
		req := httptest.NewRequest("GET", p, nil)
		if req.URL.EscapedPath() != p {
			t.Fatalf("request path %q was rewritten to %q", p, req.URL.EscapedPath())
		}
		rec := e.do(req)
		body := rec.Body.String()
		if rec.Code != 404 || strings.Contains(body, "module ") || strings.Contains(body, "root:") || strings.Contains(body, "package api") {
			t.Errorf("GET %s: %d %.80q", p, rec.Code, body)
			continue
		}
		if got := strings.TrimSpace(body); got != errJSON("not_found", "no such file") && got != errJSON("not_found", "no such route") {
			t.Errorf("GET %s: body %s", p, got)
		}
	}
}

func TestSecurityHeadersEverywhere(t *testing.T) {
	e := newEnv(t)
	for _, p := range []string{"/healthz", "/client.md", "/v1/admin/keys", "/nope"} {
		rec := e.do(httptest.NewRequest("GET", p, nil))
		if rec.Header().Get("X-Content-Type-Options") != "nosniff" || rec.Header().Get("X-Frame-Options") != "DENY" {
			t.Errorf("%s: %v", p, rec.Header())
		}
	}
}

func TestUnknownRouteAndMethod(t *testing.T) {
	e := newEnv(t)
	wantJSON(t, e.do(httptest.NewRequest("GET", "/v2/infer", nil)), 404, errJSON("not_found", "no such route"))
	wantJSON(t, e.do(httptest.NewRequest("PUT", "/v1/infer", nil)), 405, errJSON("method_not_allowed", "this method is not allowed on this route"))
}

func TestRequestID(t *testing.T) {
	e := newEnv(t)
	req := adminReq("GET", "/healthz", "")
	req.Header.Set("X-Request-ID", "tablet-7.abc")
	if got := e.do(req).Header().Get("X-Request-ID"); got != "tablet-7.abc" {
		t.Errorf("X-Request-ID = %q", got)
	}
	req = adminReq("GET", "/healthz", "")
	req.Header.Set("X-Request-ID", "bad id\nwith newline")
	if got := e.do(req).Header().Get("X-Request-ID"); !regexp.MustCompile(`^[0-9a-f]{24}$`).MatchString(got) {
		t.Errorf("generated X-Request-ID = %q", got)
	}
}

func TestMetrics(t *testing.T) {
	e := newEnv(t)
	e.addKey("valid", 1)
	e.do(inferReq(t, "valid", payloadPart(simplePayload), audioPart([]byte("RIFF"))))
	e.do(inferReq(t, "valid", payloadPart(simplePayload)))
	wantJSON(t, e.do(httptest.NewRequest("GET", "/metrics", nil)), 401, errJSON("unauthorized", msgNoAdminCred))
	rec := e.do(adminReq("GET", "/metrics", ""))
	if rec.Code != 200 {
		t.Fatalf("%d", rec.Code)
	}
	m := rec.Body.String()
	for _, want := range []string{
		`replyd_http_requests_total{method="POST",route="/v1/infer",status="200"} 1`,
		`replyd_http_requests_total{method="POST",route="/v1/infer",status="429"} 1`,
		`replyd_rate_limited_total 1`,
		`replyd_inference_stage_seconds_count{stage="stt"} 1`,
		`replyd_inference_stage_seconds_count{stage="generation"} 1`,
		`replyd_inferences_total{outcome="rate_limited"} 1`,
		`replyd_inference_queue_depth 0`,
		`replyd_llm_tokens_total{kind="prompt"} 50`,
		`replyd_llm_tokens_total{kind="cached"} 10`,
		`replyd_llm_tokens_total{kind="generated"} 6`,
		`replyd_llm_tokens_per_second_count{phase="prompt"} 1`,
		`replyd_llm_tokens_per_second_sum{phase="prompt"} 10000`,
		`replyd_llm_tokens_per_second_sum{phase="generation"} 300`,
		`replyd_http_request_duration_seconds_bucket`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %q", want)
		}
	}

	pub := newEnv(t, func(o *Options) { o.MetricsPublic = true })
	wantJSON(t, pub.do(adminReq("GET", "/metrics", "")), 404, errJSON("not_found", "no such route"))
	rec = httptest.NewRecorder()
	pub.srv.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), "replyd_rate_limited_total 0") {
		t.Errorf("MetricsHandler: %d", rec.Code)
	}
}

func TestBackup(t *testing.T) {
	e := newEnv(t)
	size, err := e.st.Size()
	if err != nil {
		t.Fatal(err)
	}
	rec := e.do(adminReq("GET", "/v1/admin/backup", ""))
	if rec.Code != 200 || int64(rec.Body.Len()) != size ||
		rec.Header().Get("Content-Type") != "application/octet-stream" ||
		rec.Header().Get("Content-Disposition") != `attachment; filename="replyd-backup-20260102T030405Z.db"` {
		t.Errorf("%d, %d bytes of %d, %v", rec.Code, rec.Body.Len(), size, rec.Header())
	}
	e.st.fail(errors.New("read error"), "Backup")
	rec = e.do(adminReq("GET", "/v1/admin/backup", ""))
	wantJSON(t, rec, 500, errJSON("internal", "Internal error."))
	if rec.Header().Get("Content-Disposition") != "" {
		t.Error("a failed backup is still an attachment")
	}
}

func TestTry(t *testing.T) {
	e := newEnv(t)
	e.addKey("valid", 1)
	hash := secret.Hash("valid")
	tryReq := func(query string, parts ...part) *http.Request {
		body, ct := multipartBody(t, parts...)
		req := httptest.NewRequest("POST", "/v1/admin/try"+query, body)
		req.Header.Set("Content-Type", ct)
		req.Header.Set(HeaderAdminKey, testAdminKey)
		return req
	}
	hashField := part{name: "api_key_hash", data: []byte(hash)}
	wantJSON(t, e.do(tryReq("", hashField, payloadPart(simplePayload))), 200, okTextOnly)
	// The key's rate limit applies.
	wantJSON(t, e.do(tryReq("?api_key_hash="+hash, payloadPart(simplePayload))), 429, errJSON("rate_limited", "rate limit of 1 requests per minute exceeded for this API key; retry in 60 s"))
	wantJSON(t, e.do(tryReq("", payloadPart(simplePayload))), 400, errJSON("invalid_request", "api_key_hash is required (query parameter or form field)"))
	wantJSON(t, e.do(tryReq("?api_key_hash=abc", payloadPart(simplePayload))), 400, errJSON("invalid_request", "api_key_hash must be 64 lowercase hex characters"))
	wantJSON(t, e.do(tryReq("?api_key_hash="+secret.Hash("other"), payloadPart(simplePayload))), 404, errJSON("not_found", "no API key has this api_key_hash"))
	e.do(adminReq("DELETE", "/v1/admin/keys/"+hash, ""))
	wantJSON(t, e.do(tryReq("", hashField, payloadPart(simplePayload))), 403, errJSON("forbidden", "the API key is revoked; /v1/infer would answer 401"))

	var msgs []string
	for _, l := range e.st.logsCopy() {
		if l.StreamName == "infer" {
			msgs = append(msgs, l.Level+" "+l.ResourceID[:min(8, len(l.ResourceID))]+" "+l.Message)
		}
	}
	h8 := hash[:8]
	want := []string{
		"info " + h8 + " infer (admin try) ok: 3 candidates in 0 ms",
		"warn " + h8 + " infer (admin try) failed: rate_limited",
		"warn  infer (admin try) failed: invalid_request",
		"warn  infer (admin try) failed: invalid_request",
		"warn " + secret.Hash("other")[:8] + " infer (admin try) failed: not_found",
		"warn " + h8 + " infer (admin try) failed: forbidden",
	}
	if strings.Join(msgs, "\n") != strings.Join(want, "\n") {
		t.Errorf("infer log:\n%s\nwant\n%s", strings.Join(msgs, "\n"), strings.Join(want, "\n"))
	}
}

func TestHTTPServer(t *testing.T) {
	e := newEnv(t)
	hs := e.srv.HTTPServer(":0")
	if hs.MaxHeaderBytes != 64<<10 || hs.ReadHeaderTimeout <= 0 || hs.ReadTimeout <= 0 || hs.IdleTimeout <= 0 || hs.Handler == nil {
		t.Errorf("HTTPServer = %+v", hs)
	}
	if hs.WriteTimeout <= e.srv.Limits().InferTimeout {
		t.Errorf("WriteTimeout %v does not cover the inference timeout", hs.WriteTimeout)
	}
}
