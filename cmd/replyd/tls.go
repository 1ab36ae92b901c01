package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/replyd/replyd/internal/localca"
)

// tlsSetup is the server's TLS: the listener's configuration, what the API
// shows (GET /tls/*.pem, the admin status), and the CA to renew from, nil
// with a configured certificate.
type tlsSetup struct {
	config *tls.Config
	certs  *localca.Certs
	ca     *localca.CA
}

// tlsDir is the folder of REPLYD_TLS=auto's CA in the data directory.
func tlsDir(cfg *Config) string { return filepath.Join(cfg.DataDir, "tls") }

// loadTLS returns the TLS setup: the configured certificate and key, or
// (REPLYD_TLS=auto) replyd's own CA and a server certificate it signed,
// made on first start and renewed when due. The fingerprints go to the log.
func loadTLS(cfg *Config, log *slog.Logger) (*tlsSetup, error) {
	if cfg.TLSCert != "" {
		pair, err := tls.LoadX509KeyPair(cfg.TLSCert, cfg.TLSKey)
		if err != nil {
			return nil, fmt.Errorf("TLS certificate %s / key %s: %w", cfg.TLSCert, cfg.TLSKey, err)
		}
		certs := localca.NewCerts(&pair)
		log.Info("TLS: serving the configured certificate", "cert", cfg.TLSCert, "cert_sha256", localca.Fingerprint(pair.Certificate[0]))
		return &tlsSetup{config: certs.TLSConfig(), certs: certs}, nil
	}
	ca, err := localca.Open(tlsDir(cfg), localca.BoxNames(cfg.PublicURL), log)
	if err != nil {
		return nil, err
	}
	if _, err := ca.Renew(time.Now()); err != nil {
		return nil, err
	}
	certs := ca.Certs()
	log.Info("TLS: replyd's own certificate authority signs the server certificate; tablets install its root from /tls/ca.pem",
		"ca_sha256", certs.CAFingerprint(), "ca_file", ca.File(localca.CACertFile), "cert_expires", certs.NotAfter().UTC().Format(time.RFC3339))
	return &tlsSetup{config: certs.TLSConfig(), certs: certs, ca: ca}, nil
}

// localTransport is the HTTP transport the CLI uses to reach this machine's
// replyd: with TLS on, it trusts replyd's own root (REPLYD_TLS=auto) and the
// server's certificate file (REPLYD_TLS_CERT, or the one in the data dir).
func localTransport(cfg *Config) http.RoundTripper {
	if !cfg.TLSEnabled() {
		return http.DefaultTransport
	}
	files := []string{cfg.TLSCert}
	if cfg.TLSCert == "" {
		files = []string{filepath.Join(tlsDir(cfg), localca.CACertFile), filepath.Join(tlsDir(cfg), localca.LeafCertFile)}
	}
	pool := x509.NewCertPool()
	for _, f := range files {
		if pem, err := os.ReadFile(f); err == nil {
			pool.AppendCertsFromPEM(pem)
		}
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	return t
}
