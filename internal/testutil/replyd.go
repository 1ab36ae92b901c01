package testutil

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/replyd/replyd/internal/replydproc"
)

// Replyd is a replyd process (replydproc.Proc) bound to a test: its
// helpers fail the test instead of returning errors, the process is killed
// at the end of the test if it still runs, and a failed test logs the
// process's last output lines.
type Replyd struct {
	*replydproc.Proc
	t testing.TB
}

// StartReplyd starts replyd with o (see replydproc.Start) without waiting
// for readiness (see WaitReady).
func StartReplyd(t testing.TB, o replydproc.Options) *Replyd {
	t.Helper()
	p, err := replydproc.Start(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			t.Logf("replyd output (%s):\n%s", p.Addr, p.Tail(60))
		}
	})
	return &Replyd{Proc: p, t: t}
}

// WaitReady waits (three minutes at most) for /healthz to answer 200.
func (p *Replyd) WaitReady() {
	p.t.Helper()
	if err := p.Proc.WaitReady(context.Background(), 3*time.Minute); err != nil {
		p.t.Fatal(err)
	}
}

// WaitExit waits up to limit for the process to exit and returns its exit
// code; it fails the test when the process still runs.
func (p *Replyd) WaitExit(limit time.Duration) int {
	p.t.Helper()
	code, err := p.Proc.WaitExit(limit)
	if err != nil {
		p.t.Fatal(err)
	}
	return code
}

// Stop sends SIGTERM and fails the test unless the process exits 0 within
// a minute.
func (p *Replyd) Stop() {
	p.t.Helper()
	if err := p.Proc.Stop(time.Minute); err != nil {
		p.t.Fatal(err)
	}
}

// Call sends r and fails the test on a transport error.
func (p *Replyd) Call(r replydproc.Request) replydproc.Response {
	p.t.Helper()
	resp, err := p.Do(context.Background(), r)
	if err != nil {
		p.t.Fatalf("%s %s: %v", r.Method, r.Path, err)
	}
	return resp
}

// Must sends r, fails the test unless the status is want, and returns the
// body.
func (p *Replyd) Must(r replydproc.Request, want int) []byte {
	p.t.Helper()
	resp := p.Call(r)
	if resp.Status != want {
		p.t.Fatalf("%s %s: status %d, want %d: %s", r.Method, r.Path, resp.Status, want, resp.Body)
	}
	return resp.Body
}

// JSON sends in (nil: no body) as JSON, fails the test unless the status is
// want, and decodes the answer (an empty body gives nil).
func (p *Replyd) JSON(method, path string, header map[string]string, in any, want int) map[string]any {
	p.t.Helper()
	b := p.Must(replydproc.Request{Method: method, Path: path, Header: header, JSON: in}, want)
	var out map[string]any
	if len(b) > 0 {
		if err := json.Unmarshal(b, &out); err != nil {
			p.t.Fatalf("%s %s: body is not a JSON object: %s", method, path, b)
		}
	}
	return out
}

// CreatedKey is the part of POST /v1/admin/keys' answer the tests use.
type CreatedKey struct {
	APIKey     string `json:"api_key"`
	APIKeyHash string `json:"api_key_hash"`
}

// CreateKey makes an API key (rate limit 100000 a minute) through the
// admin API.
func (p *Replyd) CreateKey(clientID string) CreatedKey {
	p.t.Helper()
	body := p.Must(replydproc.Request{Method: http.MethodPost, Path: "/v1/admin/keys", Header: p.AdminHeader(),
		JSON: map[string]any{"client_id": clientID, "rate_limit_per_minute": 100000}}, http.StatusOK)
	var k CreatedKey
	if err := json.Unmarshal(body, &k); err != nil || k.APIKey == "" || k.APIKeyHash == "" {
		p.t.Fatalf("create key: %v: %s", err, body)
	}
	return k
}

// InferText sends a text-only /v1/infer with one speaker line (two
// candidates asked). A transport error is returned, not fatal.
func (p *Replyd) InferText(ctx context.Context, apiKey, line string) (replydproc.Response, error) {
	payload, err := json.Marshal(map[string]any{
		"messages": []map[string]any{{"role": "speaker", "content": line}},
		"options":  map[string]any{"max_candidates": 2},
	})
	if err != nil {
		return replydproc.Response{}, err
	}
	ct, body := replydproc.InferForm(payload, nil)
	return p.Do(ctx, replydproc.Request{Method: http.MethodPost, Path: "/v1/infer",
		Header: map[string]string{"X-API-KEY": apiKey}, Body: body, ContentType: ct, Timeout: 2 * time.Minute})
}
