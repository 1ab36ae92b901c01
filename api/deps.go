package api

import (
	"context"
	"time"

	"github.com/replyd/replyd/engine"
	"github.com/replyd/replyd/store"
)

// Store is the persistent state the API works on: the one contract of
// store.Store, documented there and kept by the bbolt and the PostgreSQL
// stores alike (store/storetest runs both). api tests use the real bbolt
// store on a temp file or the in-memory fake in fakes_test.go.
type Store = store.Store

// Inferer runs one inference. *engine.Pipeline implements it.
type Inferer interface {
	Infer(ctx context.Context, req engine.Request) (engine.Result, error)
}

// Notifier delivers an OTP code to the administrator.
type Notifier interface {
	// Channel names the channel ("console", "webhook", ...).
	Channel() string
	// Send delivers text containing code; it must not log the code.
	Send(ctx context.Context, code, text string, expiresAt time.Time) error
}

// HealthSource reports the engines' state for /healthz and the admin page.
type HealthSource interface {
	Engines() []engine.EngineStatus
	QueueDepth() int
}

// CertSource is replyd's own certificate authority (REPLYD_TLS=auto) as the
// API shows it: GET /tls/ca.pem, GET /tls/cert.pem and the fingerprint on
// the admin status.
type CertSource interface {
	// CACertPEM is the root certificate tablets install; nil when replyd
	// runs no CA of its own (TLS off, or a certificate from elsewhere).
	CACertPEM() []byte
	// CAFingerprint is the SHA-256 fingerprint of the root, colon-separated
	// upper-case hex; "" without a CA.
	CAFingerprint() string
	// ServerCertPEM is the certificate (chain) the server presents now.
	ServerCertPEM() []byte
}

// VADSource is implemented by a HealthSource that knows whether voice
// activity detection is on: /healthz reports "vad": "on" or "off" and the
// admin status carries its state. It is optional, and separate from the
// engines, because VAD off never makes the service unhealthy.
type VADSource interface {
	VAD() engine.EngineStatus
}
