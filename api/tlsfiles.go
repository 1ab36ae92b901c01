package api

import (
	"net/http"

	"github.com/labstack/echo/v4"
)

// handleCACert serves GET /tls/ca.pem: replyd's own root certificate, for
// tablets to install. It is public, like any CA certificate. The content
// type makes iOS offer the certificate as a profile and Android as a CA
// certificate to install.
func (s *Server) handleCACert(c echo.Context) error {
	return s.servePEM(c, CertSource.CACertPEM, "application/x-x509-ca-cert", "replyd-ca.pem",
		"replyd runs no certificate authority of its own: it does with REPLYD_TLS=auto")
}

// handleServerCert serves GET /tls/cert.pem: the certificate the server
// presents now, for pinning and inspection.
func (s *Server) handleServerCert(c echo.Context) error {
	return s.servePEM(c, CertSource.ServerCertPEM, "application/x-pem-file", "replyd-cert.pem",
		"TLS is off: replyd serves plain HTTP and has no certificate")
}

// servePEM answers the PEM that get reads from the server's certificates as
// an attachment named filename, or 404 with missing when there is none.
func (s *Server) servePEM(c echo.Context, get func(CertSource) []byte, ctype, filename, missing string) error {
	var pem []byte
	if s.certs != nil {
		pem = get(s.certs)
	}
	if len(pem) == 0 {
		return errorf(CodeNotFound, "%s", missing)
	}
	h := c.Response().Header()
	h.Set("Cache-Control", "no-cache")
	h.Set(echo.HeaderContentDisposition, `attachment; filename="`+filename+`"`)
	return c.Blob(http.StatusOK, ctype, pem)
}
