package api

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/textproto"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/replyd/replyd/engine"
	"github.com/replyd/replyd/internal/secret"
	"github.com/replyd/replyd/store"
)

// t0 is the fixed start of every test clock.
var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

const testAdminKey = "admin-secret-for-tests"

// env is one Server wired to a fake engine and the real store (testStore).
type env struct {
	t        testing.TB
	srv      *Server
	h        http.Handler
	st       *testStore
	inf      *fakeInferer
	notifier *fakeNotifier
	health   *fakeHealth
	clock    *fakeClock
}

// newEnv builds a Server on fakes; mod may adjust the options.
func newEnv(t testing.TB, mod ...func(*Options)) *env {
	t.Helper()
	clock := &fakeClock{t: t0}
	e := &env{
		t:        t,
		st:       newTestStore(t, clock.Now),
		inf:      &fakeInferer{fn: echoInferer},
		notifier: &fakeNotifier{},
		health:   &fakeHealth{engines: []engine.EngineStatus{{Name: "llm", Ready: true}, {Name: "stt", Ready: true}}},
		clock:    clock,
	}
	if err := e.st.SetAdminKeyHash(secret.Hash(testAdminKey)); err != nil {
		t.Fatal(err)
	}
	o := Options{
		Store:    e.st,
		Inferer:  e.inf,
		Notifier: e.notifier,
		Health:   e.health,
		Now:      e.clock.Now,
		Version:  "1.2.3",
		DataFile: "/var/lib/replyd/replyd.db",
		Rand:     &countingReader{},
		Node:     "box-test",
	}
	for _, m := range mod {
		m(&o)
	}
	e.srv = New(o)
	e.h = e.srv.Handler()
	return e
}

// do serves req and returns the recorder.
func (e *env) do(req *http.Request) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	e.h.ServeHTTP(rec, req)
	return rec
}

// admin builds an admin request authenticated with the admin key.
func adminReq(method, target, body string) *http.Request {
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, target, r)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set(HeaderAdminKey, testAdminKey)
	return req
}

// addKey stores an API key directly and returns its secret.
func (e *env) addKey(key string, limit int, scopes ...string) string {
	e.t.Helper()
	if scopes == nil {
		scopes = []string{ScopeInfer}
	}
	err := e.st.CreateKey(store.APIKey{
		Hash: secret.Hash(key), ClientID: "tablet-" + key, Status: store.StatusActive,
		Scopes: scopes, RateLimitPerMinute: limit, CreatedAt: e.clock.Now(),
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return key
}

// newEnvWithKeys is newEnv with each of keys stored (addKey: scope infer,
// limit requests a minute, 0 for none).
func newEnvWithKeys(t testing.TB, limit int, keys ...string) *env {
	t.Helper()
	e := newEnv(t)
	for _, k := range keys {
		e.addKey(k, limit)
	}
	return e
}

// createdKey is what POST /v1/admin/keys answers about the new key.
type createdKey struct {
	APIKey     string `json:"api_key"`
	APIKeyHash string `json:"api_key_hash"`
}

// createKey creates a key through the admin API with the JSON body and
// returns the answer and the key it names.
func (e *env) createKey(body string) (*httptest.ResponseRecorder, createdKey) {
	e.t.Helper()
	rec := e.do(adminReq("POST", "/v1/admin/keys", body))
	var k createdKey
	decode(e.t, rec, &k)
	return rec, k
}

// part is one multipart part of an inference body.
type part struct {
	name     string
	filename string // "" makes a plain form field
	ctype    string // "" sends no Content-Type header
	data     []byte
}

// payloadPart is the payload as a file part with application/json.
func payloadPart(js string) part {
	return part{name: "payload", filename: "payload.json", ctype: "application/json", data: []byte(js)}
}

func audioPart(data []byte) part {
	return part{name: "audio", filename: "a.wav", ctype: "audio/wav", data: data}
}

// multipartBody encodes parts and returns the body and its Content-Type.
func multipartBody(t testing.TB, parts ...part) (*bytes.Buffer, string) {
	t.Helper()
	var b bytes.Buffer
	w := multipart.NewWriter(&b)
	for _, p := range parts {
		h := textproto.MIMEHeader{}
		cd := `form-data; name="` + p.name + `"`
		if p.filename != "" {
			cd += `; filename="` + p.filename + `"`
		}
		h.Set("Content-Disposition", cd)
		if p.ctype != "" {
			h.Set("Content-Type", p.ctype)
		}
		pw, err := w.CreatePart(h)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pw.Write(p.data); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return &b, w.FormDataContentType()
}

// inferReq builds POST /v1/infer with key ("" sends no header) and parts.
func inferReq(t testing.TB, key string, parts ...part) *http.Request {
	t.Helper()
	body, ct := multipartBody(t, parts...)
	req := httptest.NewRequest(http.MethodPost, "/v1/infer", body)
	req.Header.Set("Content-Type", ct)
	if key != "" {
		req.Header.Set(HeaderAPIKey, key)
	}
	return req
}

// compact returns js compacted, failing the test when it is not JSON.
func compact(t testing.TB, js string) string {
	t.Helper()
	var b bytes.Buffer
	if err := json.Compact(&b, []byte(js)); err != nil {
		t.Fatalf("expected JSON is invalid: %v\n%s", err, js)
	}
	return b.String()
}

// wantJSON asserts the status and the exact JSON body (key order included).
func wantJSON(t testing.TB, rec *httptest.ResponseRecorder, status int, body string) {
	t.Helper()
	if rec.Code != status {
		t.Errorf("status = %d, want %d; body: %s", rec.Code, status, rec.Body.String())
	}
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("Content-Type = %q, want application/json", ct)
	}
	got := strings.TrimSuffix(rec.Body.String(), "\n")
	if want := compact(t, body); got != want {
		t.Errorf("body:\n got %s\nwant %s", got, want)
	}
}

// errJSON is the body of an error response.
func errJSON(code, msg string) string {
	b, _ := json.Marshal(errorBody{Error: code, Message: msg})
	return string(b)
}

// decode decodes a JSON response into v.
func decode(t testing.TB, rec *httptest.ResponseRecorder, v any) {
	t.Helper()
	if err := json.Unmarshal(rec.Body.Bytes(), v); err != nil {
		t.Fatalf("decoding %q: %v", rec.Body.String(), err)
	}
}

// countingReader is a deterministic Options.Rand: read number n (from 1)
// of 16 bytes is n big-endian, so the n-th inference id is testID(n).
type countingReader struct {
	mu sync.Mutex
	n  uint64
}

func (r *countingReader) Read(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.n++
	clear(p)
	binary.BigEndian.PutUint64(p[len(p)-8:], r.n)
	return len(p), nil
}

// testID is the n-th inference id a Server with a countingReader makes.
func testID(n uint64) string {
	id, _ := newInferenceID(&countingReader{n: n - 1})
	return id
}
