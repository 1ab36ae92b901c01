package api

import (
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseCORSOrigins(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
		err  string
	}{
		{in: "", want: nil},
		{in: " , ", want: nil},
		{in: "https://Cboard.example.org, http://192.168.1.20:8000,https://cboard.example.org/", want: []string{"https://cboard.example.org", "http://192.168.1.20:8000"}},
		{in: "*", err: `"*" is not allowed`},
		{in: "https://a.example,*", err: `"*" is not allowed`},
		{in: "https://*.example.org", err: `"*" is not allowed`},
		{in: "https://a.example/app", err: `"https://a.example/app" is not an origin`},
		{in: "cboard.example.org", err: `"cboard.example.org" is not an origin`},
		{in: "ftp://a.example", err: `"ftp://a.example" is not an origin`},
		{in: "https://user:pw@a.example", err: "is not an origin"},
		{in: "https://a.example?x=1", err: "is not an origin"},
	} {
		got, err := ParseCORSOrigins(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseCORSOrigins(%q): err = %v, want one containing %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseCORSOrigins(%q): %v", tc.in, err)
		}
		if d := cmp.Diff(tc.want, got); d != "" {
			t.Errorf("ParseCORSOrigins(%q) (-want +got):\n%s", tc.in, d)
		}
	}
}

const allowedOrigin = "https://aac.example.org"

func corsEnv(t *testing.T) *env {
	return newEnv(t, func(o *Options) { o.CORSOrigins = []string{allowedOrigin, "http://127.0.0.1:9000"} })
}

// corsHeaders returns the response's Access-Control-* headers.
func corsHeaders(h http.Header) map[string]string {
	out := map[string]string{}
	for k := range h {
		if strings.HasPrefix(k, "Access-Control-") {
			out[k] = h.Get(k)
		}
	}
	return out
}

func preflight(path, origin string, pna bool) *http.Request {
	req := httptest.NewRequest(http.MethodOptions, path, nil)
	req.Header.Set("Origin", origin)
	req.Header.Set("Access-Control-Request-Method", "POST")
	req.Header.Set("Access-Control-Request-Headers", "x-api-key,x-request-id")
	if pna {
		req.Header.Set("Access-Control-Request-Private-Network", "true")
	}
	return req
}

func TestCORSPreflight(t *testing.T) {
	e := corsEnv(t)
	want := map[string]string{
		"Access-Control-Allow-Origin":  allowedOrigin,
		"Access-Control-Allow-Methods": "POST",
		"Access-Control-Allow-Headers": "X-API-KEY, Content-Type, X-Request-Id",
		"Access-Control-Max-Age":       "600",
	}
	for _, path := range []string{"/v1/infer", "/v1/pair", "/v1/feedback"} {
		rec := e.do(preflight(path, allowedOrigin, false))
		if rec.Code != http.StatusNoContent {
			t.Errorf("%s preflight: %d %s", path, rec.Code, rec.Body.String())
		}
		w := maps.Clone(want)
		if path == "/v1/pair" {
			w["Access-Control-Allow-Methods"] = "POST, DELETE" // pair and unpair
		}
		if d := cmp.Diff(w, corsHeaders(rec.Header())); d != "" {
			t.Errorf("%s preflight headers (-want +got):\n%s", path, d)
		}
		if v := rec.Header().Values("Vary"); !strings.Contains(strings.Join(v, ","), "Origin") {
			t.Errorf("%s preflight Vary = %v", path, v)
		}
	}
	// Chromium's Private Network Access preflight (a public page calling a
	// box on the LAN) gets its answer.
	rec := e.do(preflight("/v1/infer", allowedOrigin, true))
	if rec.Code != http.StatusNoContent || rec.Header().Get("Access-Control-Allow-Private-Network") != "true" {
		t.Errorf("PNA preflight: %d %v", rec.Code, corsHeaders(rec.Header()))
	}

	// An origin not listed gets no CORS headers, and a clear error.
	rec = e.do(preflight("/v1/infer", "https://evil.example", true))
	wantJSON(t, rec, 403, errJSON("forbidden", `cross-origin requests from "https://evil.example" are not allowed: the administrator lists allowed origins in REPLYD_CORS_ORIGINS`))
	if h := corsHeaders(rec.Header()); len(h) != 0 {
		t.Errorf("refused preflight has CORS headers %v", h)
	}
}

func TestCORSRequests(t *testing.T) {
	e := corsEnv(t)
	e.addKey("valid", 0)

	req := inferReq(t, "valid", payloadPart(simplePayload))
	req.Header.Set("Origin", allowedOrigin)
	rec := e.do(req)
	wantJSON(t, rec, 200, okTextOnly)
	if d := cmp.Diff(map[string]string{
		"Access-Control-Allow-Origin":   allowedOrigin,
		"Access-Control-Expose-Headers": "Retry-After, X-Request-Id",
	}, corsHeaders(rec.Header())); d != "" {
		t.Errorf("allowed request headers (-want +got):\n%s", d)
	}

	n := e.inf.count()
	req = inferReq(t, "valid", payloadPart(simplePayload))
	req.Header.Set("Origin", "https://evil.example")
	rec = e.do(req)
	if rec.Code != 403 || len(corsHeaders(rec.Header())) != 0 || e.inf.count() != n {
		t.Errorf("request from an unlisted origin: %d %v, inferences %d -> %d", rec.Code, corsHeaders(rec.Header()), n, e.inf.count())
	}

	// The page under /app/ calls its own server: same origin, no CORS.
	req = inferReq(t, "valid", payloadPart(simplePayload))
	req.Host = "replyd.local:8080"
	req.Header.Set("Origin", "https://replyd.local:8080")
	rec = e.do(req)
	if rec.Code != 200 || len(corsHeaders(rec.Header())) != 0 {
		t.Errorf("same-origin request: %d %v", rec.Code, corsHeaders(rec.Header()))
	}

	// Without any listed origin, every cross-origin request is refused.
	e2 := newEnv(t)
	e2.addKey("valid", 0)
	req = inferReq(t, "valid", payloadPart(simplePayload))
	req.Header.Set("Origin", allowedOrigin)
	if rec := e2.do(req); rec.Code != 403 {
		t.Errorf("cross-origin request with no origins configured: %d", rec.Code)
	}
	if rec := e2.do(preflight("/v1/pair", allowedOrigin, false)); rec.Code != 403 || len(corsHeaders(rec.Header())) != 0 {
		t.Errorf("preflight with no origins configured: %d %v", rec.Code, corsHeaders(rec.Header()))
	}
}

func TestCORSNeverOnAdminRoutes(t *testing.T) {
	e := corsEnv(t)
	for _, path := range []string{"/v1/admin/keys", "/v1/admin/pairings", "/v1/admin/status", "/v1/admin/otp/verify", "/healthz", "/admin/"} {
		rec := e.do(preflight(path, allowedOrigin, true))
		if h := corsHeaders(rec.Header()); len(h) != 0 {
			t.Errorf("OPTIONS %s: CORS headers %v", path, h)
		}
		req := adminReq(http.MethodGet, path, "")
		req.Header.Set("Origin", allowedOrigin)
		rec = e.do(req)
		if h := corsHeaders(rec.Header()); len(h) != 0 {
			t.Errorf("GET %s from an allowed origin: CORS headers %v", path, h)
		}
	}
}
