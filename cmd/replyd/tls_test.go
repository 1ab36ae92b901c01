package main

import (
	"bytes"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/replyd/replyd/internal/localca"
	"github.com/replyd/replyd/internal/testutil"
)

// The certificate authority itself is tested in internal/localca; these
// tests check what cmd/replyd wires: where the CA lives, what the log says
// and how the CLI trusts it.

func TestLoadTLSAutoKeepsTheCAInTheDataDirectory(t *testing.T) {
	dir := t.TempDir()
	cfg := &Config{DataDir: dir, TLS: "auto"}
	var log bytes.Buffer
	setup, err := loadTLS(cfg, testutil.Logger(&log))
	if err != nil {
		t.Fatal(err)
	}
	if setup.ca == nil || setup.certs != setup.ca.Certs() {
		t.Fatal("REPLYD_TLS=auto must keep the CA to renew from and serve its certificates")
	}
	rootPEM, err := os.ReadFile(filepath.Join(dir, "tls", localca.CACertFile))
	if err != nil || !bytes.Equal(rootPEM, setup.certs.CACertPEM()) {
		t.Fatalf("the root in the data directory differs from the one served: %v", err)
	}
	fp := setup.certs.CAFingerprint()
	if len(fp) != 95 || !strings.Contains(log.String(), fp) {
		t.Errorf("the start-up log lacks the root's fingerprint %q:\n%s", fp, log.String())
	}

	// The CLI reaches the server trusting the root in the data directory.
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	srv.TLS = setup.config
	srv.StartTLS()
	defer srv.Close()
	client := &http.Client{Transport: localTransport(cfg)}
	defer client.CloseIdleConnections()
	resp, err := client.Get(strings.Replace(srv.URL, "127.0.0.1", "localhost", 1))
	if err != nil {
		t.Fatalf("the CLI's transport does not trust replyd's own root: %v", err)
	}
	resp.Body.Close()
}

// TestLoadTLSErrors: loadTLS refuses to start on a CA it cannot use (which
// CA files localca refuses, and how it says so, is localca's
// TestLocalCAErrors) and on a configured certificate that is missing.
func TestLoadTLSErrors(t *testing.T) {
	dir := t.TempDir()
	caDir := tlsDir(&Config{DataDir: dir})
	if err := os.MkdirAll(caDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(caDir, localca.CACertFile), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := loadTLS(&Config{DataDir: dir, TLS: "auto"}, testutil.Logger(&bytes.Buffer{})); err == nil {
		t.Error("loadTLS started on an empty ca.pem")
	}
	_, err := loadTLS(&Config{TLS: "on", TLSCert: filepath.Join(dir, "missing.pem"), TLSKey: filepath.Join(dir, "k.pem")}, testutil.Logger(&bytes.Buffer{}))
	if err == nil || !strings.Contains(err.Error(), "missing.pem") {
		t.Errorf("missing configured certificate: %v", err)
	}
}

// TestLoadTLSServesTheConfiguredCertificate: REPLYD_TLS_CERT is what is
// served, with replyd's suites, no CA to renew from, and its fingerprint
// in the log (what localca.NewCerts makes of it is localca's test).
func TestLoadTLSServesTheConfiguredCertificate(t *testing.T) {
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem")
	certPEM := testutil.WriteSelfSigned(t, cert, key)
	var log bytes.Buffer
	setup, err := loadTLS(&Config{TLS: "on", TLSCert: cert, TLSKey: key}, testutil.Logger(&log))
	if err != nil {
		t.Fatal(err)
	}
	if setup.ca != nil {
		t.Error("a configured certificate must not be renewed from a CA")
	}
	if !bytes.Equal(setup.certs.ServerCertPEM(), certPEM) {
		t.Error("/tls/cert.pem differs from the configured certificate")
	}
	block, _ := pem.Decode(certPEM)
	if fp := localca.Fingerprint(block.Bytes); !strings.Contains(log.String(), fp) {
		t.Errorf("the log lacks the configured certificate's fingerprint %s:\n%s", fp, log.String())
	}
	if len(setup.config.CipherSuites) == 0 {
		t.Error("the configured certificate is served without replyd's suite list")
	}
}
