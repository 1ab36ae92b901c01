// Package store defines replyd's persistent state: the record types, the
// Store contract (store.go) and its embedded implementation, *DB, which keeps
// everything in one bbolt file: API keys, the admin key, system prompt
// versions, OTP codes, admin sessions, logs and the counters behind the
// statistics. Nothing else in replyd imports bbolt. The PostgreSQL
// implementation lives in store/postgres. Secrets are stored only as SHA-256
// hashes, except the installation secrets (the user-id pseudonym key, the TOTP
// secret), kept as they are because replyd must use them.
package store

import (
	"errors"
	"time"
)

// Key statuses.
const (
	StatusActive  = "active"
	StatusRevoked = "revoked"
)

// Log levels and resource types written by replyd.
const (
	LevelInfo  = "info"
	LevelWarn  = "warn"
	LevelError = "error"

	ResourceAPIKey = "api_key"
	ResourceAdmin  = "admin"

	StreamInfer = "infer"
	StreamAdmin = "admin"
)

// Errors returned by the store, tested with errors.Is.
var (
	ErrNotFound = errors.New("not found")
	ErrExists   = errors.New("already exists")
	// ErrInvalid marks a caller's mistake: an empty hash, a bad range.
	ErrInvalid = errors.New("invalid argument")
	// ErrUnavailable: the database cannot be reached (PostgreSQL stopped,
	// the network down). The request may succeed when retried later.
	ErrUnavailable = errors.New("store unavailable")
	// ErrNotSupported: this implementation does not offer the operation
	// (Backup on PostgreSQL); the error's text says what to do instead.
	ErrNotSupported = errors.New("not supported by this store")
	// ErrLocked: another process holds the data file.
	ErrLocked = errors.New("data file is locked by another replyd process")
)

// APIKey is a client key as stored: only its SHA-256 hash, never the key.
type APIKey struct {
	Hash               string // lowercase hex SHA-256 of the key
	ClientID           string
	Status             string // StatusActive or StatusRevoked
	Scopes             []string
	RateLimitPerMinute int
	CreatedAt          time.Time
	RevokedAt          time.Time // zero while active
	LastUsedAt         time.Time // updated at most once a minute
}

// PromptVersion is one saved version of the system prompt.
type PromptVersion struct {
	Prompt    string
	Version   string
	CreatedAt time.Time
}

// LogEntry is one line of the admin-visible log. It never holds dialog text.
type LogEntry struct {
	Timestamp    time.Time
	Level        string
	Message      string
	ResourceType string
	ResourceID   string
	StreamName   string
	// Subject is the infer payload's user_id as secret.Pseudonym under the
	// installation's SecretPseudonym key, or the key hash when there is no
	// user_id. It feeds active_users and is never shown.
	Subject string
	// Status is the HTTP status the request was answered with (0 for admin
	// actions that are not requests).
	Status int
	// LatencyMS is how long an infer request took.
	LatencyMS int64
	// Node names the replyd box that wrote the entry (REPLYD_NODE_NAME), so
	// that logs shared by several boxes tell them apart.
	Node string
}

// LogQuery selects log entries: newest first, Timestamp >= Since.
type LogQuery struct {
	Since  time.Time
	Limit  int
	Level  string // optional exact match
	Stream string // optional exact match
}

// Stats are the counters over a window.
type Stats struct {
	TotalRequests int // infer calls, whatever their outcome
	ActiveUsers   int // distinct subjects among them
}

// StatsBucket is one slice of a time series of Stats.
type StatsBucket struct {
	Start         time.Time
	TotalRequests int
	ActiveUsers   int
}

// OTPResult tells how a verification went.
type OTPResult int

// Results of VerifyOTP.
const (
	OTPOK      OTPResult = iota
	OTPWrong             // wrong code; attempts remain
	OTPBurned            // too many wrong tries: the code is gone
	OTPExpired           // the code expired
	OTPNone              // no code outstanding
)
