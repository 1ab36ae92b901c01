package api

import (
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// routeSamples returns a concrete path for every route template with its
// methods.
func routeSamples(t *testing.T, e *env) map[string][]string {
	t.Helper()
	param := regexp.MustCompile(`:[a-z_]+`)
	out := map[string][]string{}
	for _, r := range e.srv.e.Routes() {
		if strings.HasPrefix(r.Method, "echo_") || r.Method == "RouteNotFound" {
			continue
		}
		p := param.ReplaceAllString(r.Path, strings.Repeat("a", 64))
		p = strings.Replace(p, "/*", "/index.html", 1)
		out[p] = append(out[p], r.Method)
	}
	return out
}

// TestWrongMethodIs405WithAllow: every route answers a method it does not
// serve with 405 method_not_allowed and an Allow header naming the methods
// it serves, admin routes included (with or without credentials).
func TestWrongMethodIs405WithAllow(t *testing.T) {
	e := newEnv(t)
	for path, methods := range routeSamples(t, e) {
		for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch} {
			if slices.Contains(methods, m) {
				continue
			}
			for _, admin := range []bool{false, true} {
				req := httptest.NewRequest(m, path, nil)
				if admin {
					req = adminReq(m, path, "")
				}
				rec := e.do(req)
				if rec.Code != 405 {
					t.Errorf("%s %s (admin credential %v): %d %s, want 405", m, path, admin, rec.Code, rec.Body)
					continue
				}
				wantJSON(t, rec, 405, errJSON("method_not_allowed", "this method is not allowed on this route"))
				allow := rec.Header().Get("Allow")
				for _, want := range methods {
					if !strings.Contains(allow, want) {
						t.Errorf("%s %s: Allow %q lacks %s", m, path, allow, want)
					}
				}
			}
		}
	}
}

// TestHeadOnEveryGetRoute: every GET route also answers HEAD (uptime
// checkers use it) with the GET's status and headers and no body.
func TestHeadOnEveryGetRoute(t *testing.T) {
	e := newEnv(t)
	for path, methods := range routeSamples(t, e) {
		if !slices.Contains(methods, http.MethodGet) {
			continue
		}
		if !slices.Contains(methods, http.MethodHead) {
			t.Errorf("GET %s has no HEAD route", path)
		}
	}
	for _, path := range []string{"/healthz", "/client.md", "/openapi.yaml", "/admin/", "/v1/admin/status"} {
		get := e.do(adminReq("GET", path, ""))
		srv := httptest.NewServer(e.h)
		req, _ := http.NewRequest(http.MethodHead, srv.URL+path, nil)
		req.Header.Set(HeaderAdminKey, testAdminKey)
		resp, err := http.DefaultClient.Do(req)
		srv.Close()
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != get.Code || resp.Header.Get("Content-Type") != get.Header().Get("Content-Type") {
			t.Errorf("HEAD %s: %d %q; GET: %d %q", path, resp.StatusCode, resp.Header.Get("Content-Type"), get.Code, get.Header().Get("Content-Type"))
		}
	}
}

// TestHeadBackupCopiesNothing: HEAD /v1/admin/backup answers the GET's
// headers without copying the data file or logging a download.
func TestHeadBackupCopiesNothing(t *testing.T) {
	e := newEnv(t)
	rec := e.do(adminReq("HEAD", "/v1/admin/backup", ""))
	if rec.Code != 200 || !strings.HasPrefix(rec.Header().Get("Content-Disposition"), "attachment; filename=") || rec.Body.Len() != 0 {
		t.Errorf("HEAD: %d %q, %d bytes", rec.Code, rec.Header().Get("Content-Disposition"), rec.Body.Len())
	}
	if logs := e.st.logsCopy(); len(logs) != 0 {
		t.Errorf("HEAD logged %+v", logs)
	}
	// Nor is a HEAD of an export logged as an export.
	if rec := e.do(adminReq("HEAD", "/v1/admin/outcomes?format=jsonl", "")); rec.Code != 200 || rec.Body.Len() != 0 {
		t.Errorf("HEAD outcomes export: %d, %d bytes", rec.Code, rec.Body.Len())
	}
	if logs := e.st.logsCopy(); len(logs) != 0 {
		t.Errorf("HEAD of the outcomes export logged %+v", logs)
	}
}
