package api

import (
	"context"
	"io"
	"time"

	"github.com/replyd/replyd/engine"
	"github.com/replyd/replyd/store"
)

// Store is what the API needs from persistent state. *store.DB implements it;
// api tests use the real store on a temp file or a fake.
type Store interface {
	// API keys.
	CreateKey(k store.APIKey) error                                  // store.ErrExists on a duplicate hash
	GetKey(hash string) (store.APIKey, error)                        // store.ErrNotFound
	ListKeys(limit int, includeRevoked bool) ([]store.APIKey, error) // newest first; limit <= 0: all
	RevokeKey(hash string, at time.Time) (store.APIKey, error)       // idempotent; store.ErrNotFound
	TouchKey(hash string, at time.Time) error                        // "last used"; the store writes it at most once a minute per key

	// Admin key (hash only).
	AdminKeyHash() (string, error) // "" when none is set
	SetAdminKeyHash(hash string) error

	// System prompt.
	CurrentPrompt() (store.PromptVersion, bool, error)
	SavePrompt(p store.PromptVersion) error                 // store.ErrExists when the version is taken
	PromptHistory(limit int) ([]store.PromptVersion, error) // newest first
	NextPromptVersion() (string, error)                     // the next integer version as a string

	// OTP: at most one outstanding code; saving replaces it.
	SaveOTP(codeHash string, issuedAt, expiresAt time.Time) error
	LastOTPIssued() (time.Time, error) // zero when none
	VerifyOTP(codeHash string, now time.Time, maxAttempts int) (store.OTPResult, error)

	// Admin sessions (token hashes).
	CreateSession(tokenHash string, expiresAt time.Time) error
	SessionValid(tokenHash string, now time.Time) (bool, error)
	DeleteSession(tokenHash string) error

	// Logs and statistics.
	AppendLog(e store.LogEntry) error // durable when it returns (batched fsync)
	Logs(q store.LogQuery) ([]store.LogEntry, error)
	Stats(since, until time.Time) (store.Stats, error)
	StatsSeries(since, until time.Time, bucket time.Duration) ([]store.StatsBucket, error)

	// Operations.
	Backup(w io.Writer) (int64, error) // hot, consistent copy of the file
	Size() (int64, error)
}

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
