// Package localca is replyd's own certificate authority (REPLYD_TLS=auto)
// and the certificates the listener presents.
//
// Tablets trust only certificates chained to a root they have installed, and
// iOS refuses server certificates valid for more than 825 days, so a
// long-lived self-signed certificate works for neither. The root is made
// once and kept in a folder of the data directory (Open); it signs a
// short-lived server certificate for the box's names and addresses
// (BoxNames), which the caller renews by calling Renew now and then; the
// listener's configuration (Certs.TLSConfig) picks the new one up at the next
// handshake. Tablets install the root once (GET /tls/ca.pem, served from
// Certs.CACertPEM). A certificate configured from elsewhere is served
// through NewCerts, with no CA.
//
// The package is pure Go and imports nothing of replyd's; Certs implements
// api.CertSource.
package localca

import (
	"bytes"
	"crypto"
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
	"log/slog"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

const (
	// caValidity is the root's lifetime.
	caValidity = 20 * 365 * 24 * time.Hour
	// leafValidity is the server certificate's lifetime: within the 825
	// days iOS accepts from an installed root and the 398 days browsers
	// accept from public CAs.
	leafValidity = 397 * 24 * time.Hour
	// leafRenewBefore is how long before its expiry the server certificate
	// is replaced.
	leafRenewBefore = 30 * 24 * time.Hour
)

// File names in the CA's folder.
const (
	// CACertFile is the root certificate (PEM), the file tablets install.
	CACertFile = "ca.pem"
	caKeyFile  = "ca-key.pem"
	// LeafCertFile is the server certificate with the root appended.
	LeafCertFile = "cert.pem"
	// LeafKeyFile is the server certificate's key (PKCS #8 PEM, mode 0600).
	LeafKeyFile = "key.pem"
	// OldSelfSignedSuffix marks the self-signed certificate of replyd
	// versions before the CA, kept beside the new files on migration.
	OldSelfSignedSuffix = ".self-signed-old"
)

// Certs holds the certificate the listener presents and the CA root,
// swapped atomically on renewal. It implements api.CertSource.
type Certs struct {
	mu      sync.RWMutex
	leaf    *tls.Certificate
	caPEM   []byte
	caFP    string
	leafPEM []byte
}

// NewCerts serves leaf, a certificate configured from elsewhere: no CA
// (CACertPEM is nil, CAFingerprint "").
func NewCerts(leaf *tls.Certificate) *Certs {
	c := &Certs{}
	c.setLeaf(leaf)
	return c
}

func (c *Certs) setLeaf(leaf *tls.Certificate) {
	var b bytes.Buffer
	for _, der := range leaf.Certificate {
		_ = pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: der})
	}
	c.mu.Lock()
	c.leaf, c.leafPEM = leaf, b.Bytes()
	c.mu.Unlock()
}

// TLSConfig serves the current certificate on every handshake, with AEAD
// suites only.
func (c *Certs) TLSConfig() *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		CipherSuites: aeadSuites,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return c.current(), nil
		},
	}
}

// CACertPEM implements api.CertSource.
func (c *Certs) CACertPEM() []byte { return c.caPEM }

// CAFingerprint implements api.CertSource.
func (c *Certs) CAFingerprint() string { return c.caFP }

// ServerCertPEM implements api.CertSource.
func (c *Certs) ServerCertPEM() []byte {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.leafPEM
}

// NotAfter is the expiry of the current server certificate, zero when it is
// not known.
func (c *Certs) NotAfter() time.Time {
	if leaf := c.current(); leaf != nil && leaf.Leaf != nil {
		return leaf.Leaf.NotAfter
	}
	return time.Time{}
}

// current returns the certificate in use, nil before the first.
func (c *Certs) current() *tls.Certificate {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.leaf
}

// CA is replyd's certificate authority kept in a folder.
type CA struct {
	dir   string
	cert  *x509.Certificate
	key   crypto.Signer
	names func() ([]string, []net.IP) // the box's names and addresses now
	log   *slog.Logger
	certs *Certs
}

// File is the path of the CA's file name (CACertFile, ...).
func (ca *CA) File(name string) string { return filepath.Join(ca.dir, name) }

// Certs is what the listener serves: the root, and the server certificate
// of the last Renew (nil before the first).
func (ca *CA) Certs() *Certs { return ca.certs }

// Open loads the root kept in dir, or makes it (dir is created, mode 0700).
// names lists the names and addresses the server certificate must cover,
// asked anew at each Renew. A self-signed certificate left by an older
// replyd (cert.pem without ca.pem) is renamed with OldSelfSignedSuffix, and
// the log says that tablets which pinned it must install the root instead.
// Open issues no server certificate: Renew does.
func Open(dir string, names func() ([]string, []net.IP), log *slog.Logger) (*CA, error) {
	ca := &CA{dir: dir, names: names, log: log, certs: &Certs{}}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("TLS directory %s: %w", dir, err)
	}
	certPEM, err := os.ReadFile(ca.File(CACertFile))
	switch {
	case err == nil:
		if err := ca.load(certPEM); err != nil {
			return nil, fmt.Errorf("replyd's certificate authority in %s: %w (move the tls folder away to make a new one; tablets must then install the new root)", dir, err)
		}
	case errors.Is(err, os.ErrNotExist):
		if err := ca.migrateSelfSigned(); err != nil {
			return nil, err
		}
		if err := ca.create(time.Now()); err != nil {
			return nil, fmt.Errorf("making replyd's certificate authority in %s: %w", dir, err)
		}
		log.Info("TLS: made replyd's certificate authority", "ca_file", ca.File(CACertFile))
	default:
		return nil, fmt.Errorf("reading %s: %w", ca.File(CACertFile), err)
	}
	ca.certs.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.cert.Raw})
	ca.certs.caFP = Fingerprint(ca.cert.Raw)
	return ca, nil
}

// migrateSelfSigned renames an older replyd's self-signed certificate and
// key, so that the CA's server certificate takes their place.
func (ca *CA) migrateSelfSigned() error {
	old := ca.File(LeafCertFile)
	if _, err := os.Stat(old); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	for _, name := range []string{LeafCertFile, LeafKeyFile} {
		if err := os.Rename(ca.File(name), ca.File(name)+OldSelfSignedSuffix); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("keeping the old self-signed certificate aside: %w", err)
		}
	}
	ca.log.Warn("TLS: the self-signed certificate of an older replyd is replaced by one signed by replyd's own certificate authority; "+
		"tablets that trusted or pinned the old certificate must install the root from /tls/ca.pem",
		"old_cert", old+OldSelfSignedSuffix)
	return nil
}

// load parses the root and its key and checks that they belong together.
func (ca *CA) load(certPEM []byte) error {
	block, _ := pem.Decode(certPEM)
	if block == nil || block.Type != "CERTIFICATE" {
		return errors.New("ca.pem holds no certificate")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return err
	}
	if !cert.IsCA {
		return errors.New("ca.pem is not a CA certificate")
	}
	key, err := readKey(ca.File(caKeyFile))
	if err != nil {
		return err
	}
	if !publicKeyEqual(cert.PublicKey, key.Public()) {
		return errors.New("ca-key.pem does not belong to ca.pem")
	}
	ca.cert, ca.key = cert, key
	return nil
}

// create makes a new root: ECDSA P-256, CA for server certificates only
// (path length 0), valid caValidity.
func (ca *CA) create(now time.Time) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	host, _ := os.Hostname()
	tmpl := &x509.Certificate{
		SerialNumber:          randomSerial(),
		Subject:               pkix.Name{CommonName: strings.TrimSpace("replyd local CA " + host), Organization: []string{"replyd appliance"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return err
	}
	if err := writeKey(ca.File(caKeyFile), key); err != nil {
		return err
	}
	if err := writeFileAtomic(ca.File(CACertFile), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return err
	}
	ca.cert, _ = x509.ParseCertificate(der)
	ca.key = key
	return nil
}

// Renew makes sure the server certificate in use is signed by this CA,
// covers the box's current names and addresses and is not within
// leafRenewBefore of its expiry; otherwise it issues a new one, writes it
// and swaps it in. The first call takes the certificate kept in the folder
// when it passes. It reports whether it issued one; on an error the
// certificate in use stays.
func (ca *CA) Renew(now time.Time) (bool, error) {
	dns, ips := ca.names()
	leaf := ca.certs.current()
	if leaf == nil {
		if pair, err := tls.LoadX509KeyPair(ca.File(LeafCertFile), ca.File(LeafKeyFile)); err == nil {
			leaf = &pair
		}
	}
	reason := ca.leafProblem(leaf, dns, ips, now)
	if reason == "" {
		if ca.certs.current() == nil {
			ca.certs.setLeaf(leaf)
		}
		return false, nil
	}
	pair, err := ca.issue(dns, ips, now)
	if err != nil {
		return false, fmt.Errorf("issuing the TLS server certificate in %s: %w", ca.dir, err)
	}
	ca.certs.setLeaf(pair)
	ca.log.Info("TLS: issued a new server certificate", "reason", reason,
		"expires", pair.Leaf.NotAfter.UTC().Format(time.RFC3339), "dns_names", strings.Join(dns, ","), "ip_addresses", joinIPs(ips))
	return true, nil
}

// leafProblem says why leaf must be replaced, or "" when it may stay.
func (ca *CA) leafProblem(leaf *tls.Certificate, dns []string, ips []net.IP, now time.Time) string {
	if leaf == nil || len(leaf.Certificate) == 0 {
		return "none yet"
	}
	cert := leaf.Leaf
	if cert == nil {
		var err error
		if cert, err = x509.ParseCertificate(leaf.Certificate[0]); err != nil {
			return "unreadable"
		}
	}
	if err := cert.CheckSignatureFrom(ca.cert); err != nil {
		return "not signed by replyd's certificate authority"
	}
	if now.Add(leafRenewBefore).After(cert.NotAfter) {
		return "expires soon"
	}
	for _, n := range dns {
		if !slices.Contains(cert.DNSNames, n) {
			return "new name " + n
		}
	}
	for _, ip := range ips {
		if !slices.ContainsFunc(cert.IPAddresses, ip.Equal) {
			return "new address " + ip.String()
		}
	}
	return ""
}

// issue signs a server certificate for dns and ips valid leafValidity and
// writes it (with the CA root appended, so clients get the chain) and its
// key.
func (ca *CA) issue(dns []string, ips []net.IP, now time.Time) (*tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	cn := "replyd"
	if len(dns) > 0 {
		cn = dns[len(dns)-1]
	}
	tmpl := &x509.Certificate{
		SerialNumber: randomSerial(),
		Subject:      pkix.Name{CommonName: cn, Organization: []string{"replyd appliance"}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(leafValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     dns,
		IPAddresses:  ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, err
	}
	chain := append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.cert.Raw})...)
	if err := writeKey(ca.File(LeafKeyFile), key); err != nil {
		return nil, err
	}
	if err := writeFileAtomic(ca.File(LeafCertFile), chain, 0o644); err != nil {
		return nil, err
	}
	pair, err := tls.LoadX509KeyPair(ca.File(LeafCertFile), ca.File(LeafKeyFile))
	if err != nil {
		return nil, err
	}
	return &pair, nil
}

// BoxNames returns a function listing the names and addresses the server
// certificate must cover: localhost, the host name and host.local, the
// public URL's host, the loopback addresses and every non-link-local
// address of the box's interfaces.
func BoxNames(publicURL string) func() ([]string, []net.IP) {
	return func() ([]string, []net.IP) {
		dns := []string{"localhost"}
		ips := []net.IP{net.IPv4(127, 0, 0, 1).To4(), net.IPv6loopback}
		addName := func(n string) {
			n = strings.ToLower(strings.TrimSuffix(n, "."))
			if n != "" && !slices.Contains(dns, n) {
				dns = append(dns, n)
			}
		}
		addIP := func(ip net.IP) {
			if v4 := ip.To4(); v4 != nil {
				ip = v4
			}
			if !slices.ContainsFunc(ips, ip.Equal) {
				ips = append(ips, ip)
			}
		}
		if host, _ := os.Hostname(); host != "" && !strings.ContainsAny(host, " /") {
			addName(host)
			if !strings.Contains(host, ".") {
				addName(host + ".local")
			}
		}
		if u, err := url.Parse(publicURL); err == nil && u.Hostname() != "" {
			if ip := net.ParseIP(u.Hostname()); ip != nil {
				addIP(ip)
			} else {
				addName(u.Hostname())
			}
		}
		if addrs, err := net.InterfaceAddrs(); err == nil {
			for _, a := range addrs {
				if ipn, ok := a.(*net.IPNet); ok && !ipn.IP.IsLoopback() && !ipn.IP.IsLinkLocalUnicast() {
					addIP(ipn.IP)
				}
			}
		}
		return dns, ips
	}
}

func joinIPs(ips []net.IP) string {
	s := make([]string, len(ips))
	for i, ip := range ips {
		s[i] = ip.String()
	}
	return strings.Join(s, ",")
}

func randomSerial() *big.Int {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return serial
}

// writeKey writes key as PKCS #8 PEM with mode 0600.
func writeKey(path string, key *ecdsa.PrivateKey) error {
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	return writeFileAtomic(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb}), 0o600)
}

// readKey reads a PKCS #8 PEM private key.
func readKey(path string) (crypto.Signer, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, fmt.Errorf("%s holds no PEM key", path)
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	s, ok := k.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("%s: not a signing key", path)
	}
	return s, nil
}

func publicKeyEqual(a, b crypto.PublicKey) bool {
	ak, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && ak.Equal(b)
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

// Fingerprint is the SHA-256 fingerprint of a certificate's DER bytes as
// colon-separated upper-case hex, the way browsers show it.
func Fingerprint(der []byte) string {
	d := sha256.Sum256(der)
	return colonHex(d[:])
}

// colonHex formats d as colon-separated upper-case hex.
func colonHex(d []byte) string {
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
