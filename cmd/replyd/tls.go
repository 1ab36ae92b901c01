package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// loadTLS returns the TLS configuration: the configured certificate and key,
// or (REPLYD_TLS=auto) a self-signed certificate kept in the data directory,
// made on first start. Either way the certificate's SHA-256 fingerprint is
// printed so tablets can pin it.
func loadTLS(cfg *Config, stderr io.Writer) (*tls.Config, error) {
	certFile, keyFile := cfg.TLSCert, cfg.TLSKey
	if certFile == "" {
		certFile = filepath.Join(cfg.DataDir, "tls", "cert.pem")
		keyFile = filepath.Join(cfg.DataDir, "tls", "key.pem")
		if _, err := os.Stat(certFile); errors.Is(err, os.ErrNotExist) {
			if err := writeSelfSigned(certFile, keyFile, time.Now()); err != nil {
				return nil, fmt.Errorf("making a self-signed TLS certificate in %s: %w", filepath.Dir(certFile), err)
			}
			fmt.Fprintf(stderr, "replyd: made a self-signed TLS certificate: %s\n", certFile)
		}
	}
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("TLS certificate %s / key %s: %w", certFile, keyFile, err)
	}
	fp := sha256.Sum256(pair.Certificate[0])
	fmt.Fprintf(stderr, "replyd: TLS certificate SHA-256 fingerprint: %s\n", fingerprint(fp[:]))
	return &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12, CipherSuites: aeadSuites}, nil
}

// aeadSuites are the TLS 1.2 suites replyd offers: ECDHE key exchange with
// an AEAD cipher only (no CBC, no SHA-1 MAC, no static RSA). TLS 1.3's
// suites are all AEAD and not configurable.
var aeadSuites = []uint16{
	tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
	tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
}

// fingerprint formats a digest as colon-separated upper-case hex, the way
// browsers show certificate fingerprints.
func fingerprint(d []byte) string {
	h := strings.ToUpper(hex.EncodeToString(d))
	var b strings.Builder
	for i := 0; i < len(h); i += 2 {
		if i > 0 {
			b.WriteByte(':')
		}
		b.WriteString(h[i : i+2])
	}
	return b.String()
}

// writeSelfSigned writes a 10-year ECDSA P-256 certificate for the host's
// names and addresses, the key with mode 0600.
func writeSelfSigned(certFile, keyFile string, now time.Time) error {
	if err := os.MkdirAll(filepath.Dir(certFile), 0o700); err != nil {
		return err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return err
	}
	host, _ := os.Hostname()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "replyd " + host, Organization: []string{"replyd appliance"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.AddDate(10, 0, 0),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		DNSNames:              []string{"localhost"},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	if host != "" {
		tmpl.DNSNames = append(tmpl.DNSNames, host, host+".local")
	}
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && !ipn.IP.IsLoopback() {
				tmpl.IPAddresses = append(tmpl.IPAddresses, ipn.IP)
			}
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return err
	}
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	if err := writeFileAtomic(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		return err
	}
	return writeFileAtomic(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
}

// writeFileAtomic writes data to a temp file beside path, syncs it and
// renames it into place.
func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// localTransport is the HTTP transport the CLI uses to reach this machine's
// replyd: with TLS on, it trusts the server's own certificate file (the
// self-signed one in the data directory, or REPLYD_TLS_CERT).
func localTransport(cfg *Config) http.RoundTripper {
	if !cfg.TLSEnabled() {
		return http.DefaultTransport
	}
	certFile := cfg.TLSCert
	if certFile == "" {
		certFile = filepath.Join(cfg.DataDir, "tls", "cert.pem")
	}
	pool := x509.NewCertPool()
	if pem, err := os.ReadFile(certFile); err == nil {
		pool.AppendCertsFromPEM(pem)
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	return t
}
