package localca

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/replyd/replyd/internal/testutil"
)

// openRenewed opens the CA in dir for the box's names, as replyd starts
// with REPLYD_TLS=auto, and makes sure it has a server certificate.
func openRenewed(t *testing.T, dir string, log *bytes.Buffer) *CA {
	t.Helper()
	ca, err := Open(dir, BoxNames(""), testutil.Logger(log))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ca.Renew(time.Now()); err != nil {
		t.Fatal(err)
	}
	return ca
}

// rootPool reads dir/ca.pem into a pool, as a tablet installs it.
func rootPool(t *testing.T, dir string) *x509.CertPool {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, CACertFile))
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
	dir := filepath.Join(t.TempDir(), "tls")
	var log bytes.Buffer
	ca := openRenewed(t, dir, &log)
	certs := ca.Certs()
	for name, mode := range map[string]os.FileMode{CACertFile: 0o644, caKeyFile: 0o600, LeafCertFile: 0o644, LeafKeyFile: 0o600} {
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil || st.Mode().Perm() != mode {
			t.Errorf("%s: mode %v, %v; want %v", name, st.Mode().Perm(), err, mode)
		}
	}
	if st, err := os.Stat(dir); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("folder: %v, %v; want 0700", st.Mode().Perm(), err)
	}
	fp := certs.CAFingerprint()
	if len(fp) != 95 || !strings.Contains(log.String(), "made replyd's certificate authority") {
		t.Errorf("fingerprint %q; log:\n%s", fp, log.String())
	}

	root := rootPool(t, dir)
	block, _ := pem.Decode(certs.CACertPEM())
	rootCert, err := x509.ParseCertificate(block.Bytes)
	if err != nil || !rootCert.IsCA || rootCert.MaxPathLen != 0 || !rootCert.MaxPathLenZero {
		t.Fatalf("root: %v IsCA=%v MaxPathLen=%d", err, rootCert.IsCA, rootCert.MaxPathLen)
	}
	if Fingerprint(rootCert.Raw) != fp {
		t.Errorf("CAFingerprint %s is not the root's SHA-256 %s", fp, Fingerprint(rootCert.Raw))
	}
	leaf := certs.current().Leaf
	if days := leaf.NotAfter.Sub(leaf.NotBefore).Hours() / 24; days > 825 {
		t.Errorf("server certificate valid %.0f days; iOS accepts at most 825", days)
	}
	if !certs.NotAfter().Equal(leaf.NotAfter) {
		t.Errorf("NotAfter %v, the certificate's %v", certs.NotAfter(), leaf.NotAfter)
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
	if !bytes.Contains(certs.ServerCertPEM(), certs.CACertPEM()[len("-----BEGIN CERTIFICATE-----\n"):100]) {
		t.Error("/tls/cert.pem does not carry the chain up to the root")
	}

	// A second start keeps both.
	log.Reset()
	again := openRenewed(t, dir, &log)
	if again.Certs().CAFingerprint() != fp || !bytes.Equal(again.Certs().current().Certificate[0], certs.current().Certificate[0]) {
		t.Error("the root and the server certificate must be kept across starts")
	}
	if strings.Contains(log.String(), "made replyd's") || strings.Contains(log.String(), "issued a new") {
		t.Errorf("second start made something:\n%s", log.String())
	}
}

func TestServerCertificateIsRenewed(t *testing.T) {
	dir := t.TempDir()
	var log bytes.Buffer
	ca := openRenewed(t, dir, &log)
	first := ca.Certs().current().Leaf

	// A TLS client that trusts only the root.
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	srv.TLS = ca.Certs().TLSConfig()
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

	if renewed, err := ca.Renew(time.Now().Add(leafValidity - leafRenewBefore - 24*time.Hour)); err != nil || renewed {
		t.Errorf("renewed %v, %v more than %s before expiry", renewed, err, leafRenewBefore)
	}
	nearExpiry := first.NotAfter.Add(-leafRenewBefore + time.Hour)
	renewed, err := ca.Renew(nearExpiry)
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
	if renewed, err := ca.Renew(time.Now()); err != nil || !renewed {
		t.Fatalf("renewal for a new address: %v, %v", renewed, err)
	}
	if err := ca.Certs().current().Leaf.VerifyHostname("192.0.2.44"); err != nil {
		t.Error(err)
	}
	// What is on disk is what is served, so a restart keeps it.
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, LeafCertFile), filepath.Join(dir, LeafKeyFile))
	if err != nil || !bytes.Equal(pair.Certificate[0], ca.Certs().current().Certificate[0]) {
		t.Errorf("cert.pem differs from the certificate in use: %v", err)
	}
}

func TestOldSelfSignedCertificateMigrates(t *testing.T) {
	dir := t.TempDir()
	oldPEM := testutil.WriteSelfSigned(t, filepath.Join(dir, LeafCertFile), filepath.Join(dir, LeafKeyFile))

	var log bytes.Buffer
	ca := openRenewed(t, dir, &log)
	kept, err := os.ReadFile(filepath.Join(dir, LeafCertFile+OldSelfSignedSuffix))
	if err != nil || !bytes.Equal(kept, oldPEM) {
		t.Errorf("the old certificate is not kept aside: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, LeafKeyFile+OldSelfSignedSuffix)); err != nil {
		t.Errorf("the old key is not kept aside: %v", err)
	}
	if _, err := ca.Certs().current().Leaf.Verify(x509.VerifyOptions{Roots: rootPool(t, dir), DNSName: "localhost"}); err != nil {
		t.Errorf("after migration the server certificate does not chain to the root: %v", err)
	}
	if !strings.Contains(log.String(), "tablets that trusted or pinned the old certificate must install the root from /tls/ca.pem") {
		t.Errorf("no migration note in the log:\n%s", log.String())
	}
}

func TestLocalCAErrors(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, CACertFile), []byte("not a certificate"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Open(dir, BoxNames(""), testutil.Logger(&bytes.Buffer{}))
	if err == nil || !strings.Contains(err.Error(), "ca.pem holds no certificate") || !strings.Contains(err.Error(), "install the new root") {
		t.Errorf("damaged ca.pem: %v", err)
	}

	// A root beside the key of another root is refused.
	a, b := t.TempDir(), t.TempDir()
	openRenewed(t, a, &bytes.Buffer{})
	openRenewed(t, b, &bytes.Buffer{})
	rootA, err := os.ReadFile(filepath.Join(a, CACertFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(b, CACertFile), rootA, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Open(b, BoxNames(""), testutil.Logger(&bytes.Buffer{}))
	if err == nil || !strings.Contains(err.Error(), "ca-key.pem does not belong to ca.pem") {
		t.Errorf("a root with another root's key: %v", err)
	}
}

func TestConfiguredCertificateIsServedWithoutCA(t *testing.T) {
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem")
	certPEM := testutil.WriteSelfSigned(t, cert, key)
	pair, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	certs := NewCerts(&pair)
	if certs.CACertPEM() != nil || certs.CAFingerprint() != "" {
		t.Error("a configured certificate must not claim a CA")
	}
	if !bytes.Equal(certs.ServerCertPEM(), certPEM) {
		t.Error("/tls/cert.pem differs from the configured certificate")
	}
}

func TestFingerprintFormat(t *testing.T) {
	if got := colonHex([]byte{0xab, 0x01, 0xff}); got != "AB:01:FF" {
		t.Fatal(got)
	}
	// SHA-256 of the empty input.
	if got := Fingerprint(nil); !strings.HasPrefix(got, "E3:B0:C4:42:98:FC") || len(got) != 95 {
		t.Fatal(got)
	}
}

// TestTLSOffersOnlyAEADSuites: every TLS 1.2 suite offered is an AEAD suite
// with forward secrecy.
func TestTLSOffersOnlyAEADSuites(t *testing.T) {
	config := openRenewed(t, t.TempDir(), &bytes.Buffer{}).Certs().TLSConfig()
	if len(config.CipherSuites) == 0 {
		t.Fatal("no suite list: Go's defaults include CBC suites")
	}
	for _, id := range config.CipherSuites {
		name := tls.CipherSuiteName(id)
		if !(strings.Contains(name, "_GCM_") || strings.Contains(name, "CHACHA20_POLY1305")) || !strings.HasPrefix(name, "TLS_ECDHE_") {
			t.Errorf("suite %s is not ECDHE with an AEAD cipher", name)
		}
	}
}
