package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/replyd/replyd/internal/localca"
	"github.com/replyd/replyd/internal/replydproc"
	"github.com/replyd/replyd/internal/testutil"
)

// TestTLSAutoEndToEnd runs the real program with REPLYD_TLS=auto on a data
// directory that holds an older replyd's self-signed certificate: it starts,
// keeps the old certificate aside, serves HTTPS that a client trusting only
// GET /tls/ca.pem accepts, and shows the root's fingerprint in the start-up
// log and on the admin status. ffmpeg is kept off its PATH: the log warns
// that M4A is refused and the status says so.
func TestTLSAutoEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test starts the real binary")
	}
	const adminKey = "e2e-admin-key-0123456789abcdef"
	_, env := demoEnv(t, adminKey)
	data := env["REPLYD_DATA_DIR"]
	oldPEM := testutil.WriteSelfSigned(t, filepath.Join(data, "tls", "cert.pem"), filepath.Join(data, "tls", "key.pem"))
	env["REPLYD_E2E_EXEC"] = "1"
	env["REPLYD_TLS"] = "auto"
	env["PATH"] = t.TempDir() // no ffmpeg
	p := testutil.StartReplyd(t, replydproc.Options{Bin: os.Args[0], DataDir: data, AdminKey: adminKey, Env: maps.Clone(env)})
	base := strings.Replace(p.URL, "http://", "https://", 1)

	// A tablet that installed the root, and nothing else.
	var root *x509.CertPool
	var rootDER []byte
	deadline := time.Now().Add(2 * time.Minute)
	for root == nil {
		if b, err := os.ReadFile(filepath.Join(data, "tls", localca.CACertFile)); err == nil {
			if blk, _ := pem.Decode(b); blk != nil {
				root, rootDER = x509.NewCertPool(), blk.Bytes
				root.AppendCertsFromPEM(b)
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no ca.pem after 2 minutes:\n%s", p.Tail(40))
		}
		time.Sleep(50 * time.Millisecond)
	}
	tablet := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: root, MinVersion: tls.VersionTLS12}}}
	get := func(path string, header map[string]string) (*http.Response, []byte) {
		t.Helper()
		for {
			req, _ := http.NewRequest("GET", base+path, nil)
			for k, v := range header {
				req.Header.Set(k, v)
			}
			resp, err := tablet.Do(req)
			if err == nil {
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				return resp, body
			}
			if time.Now().After(deadline) {
				t.Fatalf("GET %s over HTTPS trusting only the root: %v\n%s", path, err, p.Tail(40))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	resp, body := get("/tls/ca.pem", nil)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/x-x509-ca-cert" {
		t.Fatalf("GET /tls/ca.pem: %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if blk, _ := pem.Decode(body); blk == nil || string(blk.Bytes) != string(rootDER) {
		t.Error("/tls/ca.pem differs from the root in the data directory")
	}
	if leaf := resp.TLS.PeerCertificates[0]; leaf.NotAfter.Sub(leaf.NotBefore) > 825*24*time.Hour || leaf.IsCA {
		t.Errorf("server certificate valid %v (CA %v)", leaf.NotAfter.Sub(leaf.NotBefore), leaf.IsCA)
	}
	fp := localca.Fingerprint(rootDER)
	resp, body = get("/v1/admin/status", map[string]string{"X-ADMIN-KEY": adminKey})
	var st struct {
		TLS   bool   `json:"tls"`
		CAFP  string `json:"tls_ca_fingerprint"`
		M4A   *bool  `json:"m4a"`
		Error string `json:"error"`
	}
	if err := json.Unmarshal(body, &st); err != nil || resp.StatusCode != 200 {
		t.Fatalf("status: %d %s", resp.StatusCode, body)
	}
	if !st.TLS || st.CAFP != fp || st.M4A == nil || *st.M4A {
		t.Errorf("status: tls %v, fingerprint %q (want %q), m4a %v", st.TLS, st.CAFP, fp, st.M4A)
	}
	out := p.Output()
	if !strings.Contains(out, fp) {
		t.Errorf("the start-up log lacks the root's fingerprint %s", fp)
	}
	if !strings.Contains(out, "ffmpeg is not installed: M4A/AAC recordings (what iOS records) are refused") {
		t.Error("the start-up log does not warn that M4A cannot be decoded")
	}
	if !strings.Contains(out, "must install the root from /tls/ca.pem") {
		t.Error("the start-up log does not say what the migration means for tablets")
	}
	kept, err := os.ReadFile(filepath.Join(data, "tls", localca.LeafCertFile+localca.OldSelfSignedSuffix))
	if err != nil || string(kept) != string(oldPEM) {
		t.Errorf("the old self-signed certificate was not kept aside: %v", err)
	}
}
