package main

import (
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSelfSignedCertificateIsMadeOnceAndKept(t *testing.T) {
	dir := t.TempDir()
	cfg := &Config{DataDir: dir, TLS: "auto"}
	var out bytes.Buffer
	tc, err := loadTLS(cfg, &out)
	if err != nil {
		t.Fatal(err)
	}
	fp := sha256.Sum256(tc.Certificates[0].Certificate[0])
	if !strings.Contains(out.String(), fingerprint(fp[:])) || !strings.Contains(out.String(), "made a self-signed") {
		t.Fatalf("output: %s", out.String())
	}
	st, err := os.Stat(filepath.Join(dir, "tls", "key.pem"))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode: %v %v", st.Mode(), err)
	}
	out.Reset()
	tc2, err := loadTLS(cfg, &out)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(tc2.Certificates[0].Certificate[0], tc.Certificates[0].Certificate[0]) || strings.Contains(out.String(), "made a") {
		t.Fatal("the certificate must be kept across starts")
	}
	if _, err := loadTLS(&Config{TLSCert: filepath.Join(dir, "missing.pem"), TLSKey: filepath.Join(dir, "k.pem")}, &out); err == nil || !strings.Contains(err.Error(), "missing.pem") {
		t.Fatalf("missing cert: %v", err)
	}
}

func TestFingerprintFormat(t *testing.T) {
	if got := fingerprint([]byte{0xab, 0x01, 0xff}); got != "AB:01:FF" {
		t.Fatal(got)
	}
}

// TestTLSOffersOnlyAEADSuites: every TLS 1.2 suite offered is an AEAD suite
// with forward secrecy.
func TestTLSOffersOnlyAEADSuites(t *testing.T) {
	tc, err := loadTLS(&Config{DataDir: t.TempDir(), TLS: "auto"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(tc.CipherSuites) == 0 {
		t.Fatal("no suite list: Go's defaults include CBC suites")
	}
	for _, id := range tc.CipherSuites {
		name := tls.CipherSuiteName(id)
		if !(strings.Contains(name, "_GCM_") || strings.Contains(name, "CHACHA20_POLY1305")) || !strings.HasPrefix(name, "TLS_ECDHE_") {
			t.Errorf("suite %s is not ECDHE with an AEAD cipher", name)
		}
	}
}
