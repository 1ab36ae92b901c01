package main

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func testLogger(buf *bytes.Buffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(buf, nil))
}

// rootPool reads dir/tls/ca.pem into a pool, as a tablet installs it.
func rootPool(t *testing.T, dir string) *x509.CertPool {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "tls", caCertFile))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		t.Fatal("ca.pem holds no certificate")
	}
	return pool
}

func TestLocalCAIsMadeOnceAndSignsTheServerCertificate(t *testing.T) {
	dir := t.TempDir()
	cfg := &Config{DataDir: dir, TLS: "auto"}
	var log bytes.Buffer
	setup, err := loadTLS(cfg, testLogger(&log))
	if err != nil {
		t.Fatal(err)
	}
	for name, mode := range map[string]os.FileMode{caCertFile: 0o644, caKeyFile: 0o600, leafCertFile: 0o644, leafKeyFile: 0o600} {
		st, err := os.Stat(filepath.Join(dir, "tls", name))
		if err != nil || st.Mode().Perm() != mode {
			t.Errorf("%s: mode %v, %v; want %v", name, st.Mode().Perm(), err, mode)
		}
	}
	fp := setup.certs.CAFingerprint()
	if len(fp) != 95 || !strings.Contains(log.String(), fp) || !strings.Contains(log.String(), "made replyd's certificate authority") {
		t.Errorf("fingerprint %q; log:\n%s", fp, log.String())
	}

	root := rootPool(t, dir)
	block, _ := pem.Decode(setup.certs.CACertPEM())
	ca, err := x509.ParseCertificate(block.Bytes)
	if err != nil || !ca.IsCA || ca.MaxPathLen != 0 || !ca.MaxPathLenZero {
		t.Fatalf("root: %v IsCA=%v MaxPathLen=%d", err, ca.IsCA, ca.MaxPathLen)
	}
	leaf := setup.certs.current().Leaf
	if days := leaf.NotAfter.Sub(leaf.NotBefore).Hours() / 24; days > 825 {
		t.Errorf("server certificate valid %.0f days; iOS accepts at most 825", days)
	}
	for _, name := range []string{"localhost", "127.0.0.1", "::1"} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: root, DNSName: name}); err != nil {
			t.Errorf("the server certificate does not verify for %s against the root: %v", name, err)
		}
	}
	if host, _ := os.Hostname(); host != "" {
		if err := leaf.VerifyHostname(host); err != nil {
			t.Errorf("host name %s: %v", host, err)
		}
	}
	if !bytes.Contains(setup.certs.ServerCertPEM(), setup.certs.CACertPEM()[len("-----BEGIN CERTIFICATE-----\n"):100]) {
		t.Error("/tls/cert.pem does not carry the chain up to the root")
	}

	// A second start keeps both.
	log.Reset()
	again, err := loadTLS(cfg, testLogger(&log))
	if err != nil {
		t.Fatal(err)
	}
	if again.certs.CAFingerprint() != fp || !bytes.Equal(again.certs.current().Certificate[0], setup.certs.current().Certificate[0]) {
		t.Error("the root and the server certificate must be kept across starts")
	}
	if strings.Contains(log.String(), "made replyd's") || strings.Contains(log.String(), "issued a new") {
		t.Errorf("second start made something:\n%s", log.String())
	}
}

func TestServerCertificateIsRenewed(t *testing.T) {
	dir := t.TempDir()
	var log bytes.Buffer
	setup, err := loadTLS(&Config{DataDir: dir, TLS: "auto"}, testLogger(&log))
	if err != nil {
		t.Fatal(err)
	}
	ca := setup.ca
	first := setup.certs.current().Leaf

	// A TLS client that trusts only the root.
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	srv.TLS = setup.config
	srv.StartTLS()
	defer srv.Close()
	// served connects as a tablet trusting only the root whose clock reads at.
	served := func(at time.Time) *x509.Certificate {
		t.Helper()
		client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: rootPool(t, dir), Time: func() time.Time { return at }}}}
		defer client.CloseIdleConnections()
		resp, err := client.Get(strings.Replace(srv.URL, "127.0.0.1", "localhost", 1))
		if err != nil {
			t.Fatalf("TLS request trusting only the root: %v", err)
		}
		resp.Body.Close()
		return resp.TLS.PeerCertificates[0]
	}
	if served(time.Now()).SerialNumber.Cmp(first.SerialNumber) != 0 {
		t.Fatal("the listener does not serve the issued certificate")
	}

	if renewed, err := ca.renew(time.Now().Add(leafValidity - leafRenewBefore - 24*time.Hour)); err != nil || renewed {
		t.Errorf("renewed %v, %v more than %s before expiry", renewed, err, leafRenewBefore)
	}
	nearExpiry := first.NotAfter.Add(-leafRenewBefore + time.Hour)
	renewed, err := ca.renew(nearExpiry)
	if err != nil || !renewed || !strings.Contains(log.String(), "reason=\"expires soon\"") {
		t.Fatalf("renewal near expiry: %v, %v\n%s", renewed, err, log.String())
	}
	second := served(nearExpiry)
	if second.SerialNumber.Cmp(first.SerialNumber) == 0 {
		t.Error("the listener still serves the old certificate after renewal")
	}

	// A new address of the box gets a new certificate too.
	names := ca.names
	ca.names = func() ([]string, []net.IP) {
		dns, ips := names()
		return dns, append(ips, net.IPv4(192, 0, 2, 44))
	}
	if renewed, err := ca.renew(time.Now()); err != nil || !renewed {
		t.Fatalf("renewal for a new address: %v, %v", renewed, err)
	}
	if err := setup.certs.current().Leaf.VerifyHostname("192.0.2.44"); err != nil {
		t.Error(err)
	}
	// What is on disk is what is served, so a restart keeps it.
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, "tls", leafCertFile), filepath.Join(dir, "tls", leafKeyFile))
	if err != nil || !bytes.Equal(pair.Certificate[0], setup.certs.current().Certificate[0]) {
		t.Errorf("cert.pem differs from the certificate in use: %v", err)
	}
}

// writeOldSelfSigned writes the 10-year self-signed certificate replyd
// versions before the CA made for REPLYD_TLS=auto.
func writeOldSelfSigned(t *testing.T, certFile, keyFile string) []byte {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(certFile), 0o700); err != nil {
		t.Fatal(err)
	}
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "replyd old"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().AddDate(10, 0, 0),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true, DNSNames: []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeKey(keyFile, key); err != nil {
		t.Fatal(err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	if err := os.WriteFile(certFile, certPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	return certPEM
}

func TestOldSelfSignedCertificateMigrates(t *testing.T) {
	dir := t.TempDir()
	tlsDir := filepath.Join(dir, "tls")
	oldPEM := writeOldSelfSigned(t, filepath.Join(tlsDir, leafCertFile), filepath.Join(tlsDir, leafKeyFile))

	var log bytes.Buffer
	setup, err := loadTLS(&Config{DataDir: dir, TLS: "auto"}, testLogger(&log))
	if err != nil {
		t.Fatal(err)
	}
	kept, err := os.ReadFile(filepath.Join(tlsDir, leafCertFile+oldSelfSignedSuffix))
	if err != nil || !bytes.Equal(kept, oldPEM) {
		t.Errorf("the old certificate is not kept aside: %v", err)
	}
	if _, err := os.Stat(filepath.Join(tlsDir, leafKeyFile+oldSelfSignedSuffix)); err != nil {
		t.Errorf("the old key is not kept aside: %v", err)
	}
	if _, err := setup.certs.current().Leaf.Verify(x509.VerifyOptions{Roots: rootPool(t, dir), DNSName: "localhost"}); err != nil {
		t.Errorf("after migration the server certificate does not chain to the root: %v", err)
	}
	if !strings.Contains(log.String(), "tablets that trusted or pinned the old certificate must install the root from /tls/ca.pem") {
		t.Errorf("no migration note in the log:\n%s", log.String())
	}
}

func TestLocalCAErrors(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "tls"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tls", caCertFile), []byte("not a certificate"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := loadTLS(&Config{DataDir: dir, TLS: "auto"}, testLogger(&bytes.Buffer{}))
	if err == nil || !strings.Contains(err.Error(), "ca.pem holds no certificate") || !strings.Contains(err.Error(), "install the new root") {
		t.Errorf("damaged ca.pem: %v", err)
	}
	_, err = loadTLS(&Config{TLS: "on", TLSCert: filepath.Join(dir, "missing.pem"), TLSKey: filepath.Join(dir, "k.pem")}, testLogger(&bytes.Buffer{}))
	if err == nil || !strings.Contains(err.Error(), "missing.pem") {
		t.Errorf("missing configured certificate: %v", err)
	}
}

func TestConfiguredCertificateIsServedWithoutCA(t *testing.T) {
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem")
	certPEM := writeOldSelfSigned(t, cert, key)
	setup, err := loadTLS(&Config{TLS: "on", TLSCert: cert, TLSKey: key}, testLogger(&bytes.Buffer{}))
	if err != nil {
		t.Fatal(err)
	}
	if setup.ca != nil || setup.certs.CACertPEM() != nil || setup.certs.CAFingerprint() != "" {
		t.Error("a configured certificate must not claim a CA")
	}
	if !bytes.Equal(setup.certs.ServerCertPEM(), certPEM) {
		t.Error("/tls/cert.pem differs from the configured certificate")
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
	var log bytes.Buffer
	setup, err := loadTLS(&Config{DataDir: t.TempDir(), TLS: "auto"}, testLogger(&log))
	if err != nil {
		t.Fatal(err)
	}
	if len(setup.config.CipherSuites) == 0 {
		t.Fatal("no suite list: Go's defaults include CBC suites")
	}
	for _, id := range setup.config.CipherSuites {
		name := tls.CipherSuiteName(id)
		if !(strings.Contains(name, "_GCM_") || strings.Contains(name, "CHACHA20_POLY1305")) || !strings.HasPrefix(name, "TLS_ECDHE_") {
			t.Errorf("suite %s is not ECDHE with an AEAD cipher", name)
		}
	}
}
