package api

import (
	"io/fs"
	"net/http/httptest"
	"path"
	"strings"
	"testing"

	"github.com/replyd/replyd/api/web"
)

// TestAppPage: the conversation page is served under /app/ with the same
// self-only CSP as the admin page, each file with the type browsers need
// (a service worker must be JavaScript, the manifest a web app manifest).
func TestAppPage(t *testing.T) {
	e := newEnv(t)
	rec := e.do(httptest.NewRequest("GET", "/app/", nil))
	if rec.Code != 200 || !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/html") {
		t.Fatalf("GET /app/: %d %q", rec.Code, rec.Header().Get("Content-Type"))
	}
	csp := rec.Header().Get("Content-Security-Policy")
	if !strings.Contains(csp, "default-src 'self'") || strings.Contains(csp, "unsafe-inline") {
		t.Errorf("CSP = %q", csp)
	}
	if rec.Header().Get("Cache-Control") != "no-cache" || rec.Header().Get("ETag") == "" {
		t.Errorf("headers = %v", rec.Header())
	}
	for _, want := range []string{`<html lang="en"`, `rel="manifest" href="manifest.webmanifest"`, `src="main.js"`} {
		if !strings.Contains(rec.Body.String(), want) {
			t.Errorf("index.html lacks %q", want)
		}
	}

	types := map[string]string{".js": "text/javascript", ".css": "text/css", ".html": "text/html", ".svg": "image/svg+xml", ".webmanifest": "application/manifest+json", ".png": "image/png", ".json": "application/json", ".md": "text/markdown"}
	n := 0
	err := fs.WalkDir(web.AppFS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		n++
		rec := e.do(httptest.NewRequest("GET", "/app/"+p, nil))
		ct := rec.Header().Get("Content-Type")
		want, known := types[path.Ext(p)]
		if rec.Code != 200 || !known || !strings.HasPrefix(ct, want) {
			t.Errorf("/app/%s: %d %q", p, rec.Code, ct)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"index.html", "main.js", "sw.js", "manifest.webmanifest", "app.css", "icon.svg"} {
		if _, err := fs.Stat(web.AppFS(), f); err != nil {
			t.Errorf("the conversation page lacks %s", f)
		}
	}
	if n < 6 {
		t.Errorf("%d files under /app/", n)
	}
	// The admin page's files are not served under /app/ nor the reverse.
	if rec := e.do(httptest.NewRequest("GET", "/app/keys.js", nil)); rec.Code != 404 {
		t.Errorf("/app/keys.js: %d", rec.Code)
	}
	if rec := e.do(httptest.NewRequest("GET", "/admin/sw.js", nil)); rec.Code != 404 {
		t.Errorf("/admin/sw.js: %d", rec.Code)
	}
	for _, p := range []string{"/app/../go.mod", "/app/..%2fgo.mod", "/app/%2e%2e/api/server.go", "/app/nope.js"} {
		if rec := e.do(httptest.NewRequest("GET", p, nil)); rec.Code != 404 {
			t.Errorf("GET %s: %d", p, rec.Code)
		}
	}
	rec = e.do(httptest.NewRequest("GET", "/app?x=1", nil))
	if rec.Code != 302 || rec.Header().Get("Location") != "/app/?x=1" {
		t.Errorf("GET /app: %d %q", rec.Code, rec.Header().Get("Location"))
	}
}

// fakeCerts is a CertSource with fixed PEM.
type fakeCerts struct{ ca, leaf []byte }

func (f fakeCerts) CACertPEM() []byte { return f.ca }
func (f fakeCerts) CAFingerprint() string {
	if f.ca == nil {
		return ""
	}
	return "AB:CD"
}
func (f fakeCerts) ServerCertPEM() []byte { return f.leaf }

func TestTLSFiles(t *testing.T) {
	off := newEnv(t)
	wantJSON(t, off.do(httptest.NewRequest("GET", "/tls/ca.pem", nil)), 404,
		errJSON("not_found", "replyd runs no certificate authority of its own: it does with REPLYD_TLS=auto"))
	wantJSON(t, off.do(httptest.NewRequest("GET", "/tls/cert.pem", nil)), 404,
		errJSON("not_found", "TLS is off: replyd serves plain HTTP and has no certificate"))

	auto := newEnv(t, func(o *Options) { o.TLS = true; o.Certs = fakeCerts{ca: []byte("CA PEM"), leaf: []byte("LEAF PEM")} })
	for p, want := range map[string][2]string{"/tls/ca.pem": {"application/x-x509-ca-cert", "CA PEM"}, "/tls/cert.pem": {"application/x-pem-file", "LEAF PEM"}} {
		rec := auto.do(httptest.NewRequest("GET", p, nil)) // no credential: public
		if rec.Code != 200 || rec.Header().Get("Content-Type") != want[0] || rec.Body.String() != want[1] {
			t.Errorf("GET %s: %d %q %q", p, rec.Code, rec.Header().Get("Content-Type"), rec.Body.String())
		}
	}
	rec := auto.do(adminReq("GET", "/v1/admin/status", ""))
	if !strings.Contains(rec.Body.String(), `"tls":true,"tls_ca_fingerprint":"AB:CD"`) {
		t.Errorf("status: %s", rec.Body.String())
	}

	own := newEnv(t, func(o *Options) { o.TLS = true; o.Certs = fakeCerts{leaf: []byte("LEAF PEM")} })
	if rec := own.do(httptest.NewRequest("GET", "/tls/ca.pem", nil)); rec.Code != 404 {
		t.Errorf("ca.pem with a configured certificate: %d", rec.Code)
	}
}

func TestM4AAvailability(t *testing.T) {
	avail := false
	e := newEnv(t, func(o *Options) { o.M4A = func() bool { return avail } })
	if rec := e.do(adminReq("GET", "/healthz", "")); !strings.Contains(rec.Body.String(), `"m4a":false`) {
		t.Errorf("healthz without ffmpeg: %s", rec.Body.String())
	}
	avail = true
	if rec := e.do(adminReq("GET", "/healthz", "")); !strings.Contains(rec.Body.String(), `"m4a":true`) {
		t.Errorf("healthz with ffmpeg: %s", rec.Body.String())
	}
	if rec := e.do(adminReq("GET", "/v1/admin/status", "")); !strings.Contains(rec.Body.String(), `"m4a":true`) {
		t.Errorf("status with ffmpeg: %s", rec.Body.String())
	}
}
