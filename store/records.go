// Package store defines replyd's persistent state: the record types and the
// Store contract (store.go) with what its implementations share (the
// statistics' arithmetic, the sealing of remembered texts, snapshots, the
// in-memory rate limiter). store/bolt keeps everything in one bbolt file (the
// embedded default); store/postgres in PostgreSQL, shared by several boxes.
// Nothing but store/bolt imports bbolt. Secrets are stored only as SHA-256
// hashes, except the installation secrets (the user-id pseudonym key, the
// TOTP secret), kept as they are because replyd must use them; remembered
// dialog text only encrypted with AES-GCM under a key of its own user
// (seal.go).
package store

import (
	"errors"
	"fmt"
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
	// ResourceClient names a client address (failed authentication).
	ResourceClient = "client_address"

	StreamInfer = "infer"
	StreamAdmin = "admin"
	// StreamAuth holds the aggregated failed-authentication entries.
	StreamAuth = "auth"
	// StreamSteer holds the entries of steered infer calls, which count as
	// the turn they refine, not as inferences of their own.
	StreamSteer = "steer"
)

// Names of the installation secrets replyd keeps in the store. They live in
// the data file, so every box of a cluster and every backup share them; they
// are never logged and never leave the box except inside a backup.
const (
	// SecretPseudonym keys the HMAC that turns a payload's user_id into the
	// stored pseudonym (see secret.Pseudonym).
	SecretPseudonym = "pseudonym_key"
	// SecretTOTP is the administrator's RFC 6238 secret, present once
	// enrolled.
	SecretTOTP = "totp"
)

// DefaultPruneBatch is the number of log entries PruneLogs deletes per
// transaction when its batch argument is <= 0.
const DefaultPruneBatch = 1000

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
	// ErrExpired: the record (a pairing code) has passed its expiry.
	ErrExpired = errors.New("expired")
	// ErrUsed: the single-use record (a pairing code) was already used.
	ErrUsed = errors.New("already used")
	// ErrLimit: a bound on the number of records (pending pairings) is reached.
	ErrLimit = errors.New("limit reached")
	// ErrLocked: another process holds the data file.
	ErrLocked = errors.New("data file is locked by another replyd process")
	// ErrNoSpace: a write failed because the data directory's file system
	// is full (or the user's quota is used up).
	ErrNoSpace = errors.New("no space left on the data directory's device")
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

// Created checks a key that CreateKey is to store at now (a hash) and
// returns it with CreatedAt set to now where it is zero and Status to
// StatusActive where it is empty. Its error wraps ErrInvalid.
func (k APIKey) Created(now time.Time) (APIKey, error) {
	if k.Hash == "" {
		return k, fmt.Errorf("store: %w: empty key hash", ErrInvalid)
	}
	if k.CreatedAt.IsZero() {
		k.CreatedAt = now
	}
	if k.Status == "" {
		k.Status = StatusActive
	}
	return k, nil
}

// Pairing is a pending tablet pairing: what the key minted by redeeming its
// one-time code will be. Only the code's SHA-256 hash is stored; the key
// does not exist until the code is redeemed.
type Pairing struct {
	CodeHash string // lowercase hex SHA-256 of the normalised code
	// Key holds the minted key's ClientID, Status, Scopes and
	// RateLimitPerMinute; its Hash and CreatedAt are set on redemption
	// (and RevokedAt when Status is StatusRevoked).
	Key       APIKey
	CreatedAt time.Time
	ExpiresAt time.Time
	// UsedAt and KeyHash are set when the code is redeemed. A used pairing
	// is kept until ExpiresAt, so that a second try can be told "already
	// used", and then pruned like an unused one.
	UsedAt  time.Time
	KeyHash string
	// MemorySubject, when not empty, is a memory user (MemoryUser.Subject)
	// the minted key is linked to (Store.LinkMemory): one person's second
	// tablet or phone.
	MemorySubject string
}

// Pending checks a pairing that CreatePairing is to store at now (a code
// hash, an expiry after now) and returns it with CreatedAt set to now where
// it is zero. Its error wraps ErrInvalid.
func (p Pairing) Pending(now time.Time) (Pairing, error) {
	if p.CodeHash == "" {
		return p, fmt.Errorf("store: %w: empty pairing code hash", ErrInvalid)
	}
	if !p.ExpiresAt.After(now) {
		return p, fmt.Errorf("store: %w: the pairing expires before it is created", ErrInvalid)
	}
	if p.CreatedAt.IsZero() {
		p.CreatedAt = now
	}
	return p, nil
}

// PromptVersion is one saved version of the system prompt.
type PromptVersion struct {
	Prompt    string
	Version   string
	CreatedAt time.Time
}

// Saved checks a version that SavePrompt is to store at now (a version
// name) and returns it with CreatedAt set to now where it is zero. Its
// error wraps ErrInvalid.
func (p PromptVersion) Saved(now time.Time) (PromptVersion, error) {
	if p.Version == "" {
		return p, fmt.Errorf("store: %w: empty prompt version", ErrInvalid)
	}
	if p.CreatedAt.IsZero() {
		p.CreatedAt = now
	}
	return p, nil
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
	// ErrorCode is the API error code of a failed infer request ("" when it
	// was answered); Stats counts errors by it.
	ErrorCode string `json:",omitempty"`
	// Inference describes an answered inference (nil otherwise): its id,
	// which feedback names, and what the statistics need.
	Inference *InferenceInfo `json:",omitempty"`
}

// InferenceInfo is what the log entry of an answered inference records
// beside the counts and times: never dialog text, except Remember, which
// the store keeps only encrypted and never in the log.
type InferenceInfo struct {
	// ID is the inference_id the answer carried: opaque and unguessable.
	ID string
	// Model and SpeechModel are the file names of the language model and
	// the Whisper model that made the answer ("" when unknown, or no
	// recording was sent).
	Model       string `json:",omitempty"`
	SpeechModel string `json:",omitempty"`
	// PromptVersion is the version of the system prompt the inference used.
	PromptVersion string
	// CandidateChars are the lengths in characters of the candidates, best
	// first: what keystrokes saved are computed from.
	CandidateChars []int
	// Remember, for a user_id with remember: true, holds the partner's turn
	// and the candidates so that feedback can pair the turn with what the
	// user said. The store encrypts it under the user's key (Subject names
	// the user) and keeps it only for FeedbackWindow + ReplaceWindow.
	Remember *RememberedTexts `json:"-"`
	// UserTag, with Remember, is the installation-wide pseudonym of the
	// user_id (secret.Pseudonym): the store records it on a memory user it
	// creates, with a link from the entry's key (Store.MemorySubject). It is
	// not kept in the log.
	UserTag string `json:"-"`
	// Turn and SteerMode describe a steered answer (an entry of
	// StreamSteer): the inference id of the turn it refines, which it
	// counts as, and its steering mode ("words", "prefix", "replace").
	// Both are empty for an inference of its own.
	Turn      string `json:",omitempty"`
	SteerMode string `json:",omitempty"`
}

// RememberedTexts is the dialog text an inference of a remembering user
// keeps until its feedback arrives.
type RememberedTexts struct {
	Partner    string   // the partner's turn the candidates answer
	Candidates []string // the candidate texts, best first
}

// Outcome kinds: what the AAC user did with an inference's candidates.
const (
	OutcomeSpoken  = "spoken"   // spoke candidate Rank as it was
	OutcomeEdited  = "edited"   // edited candidate Rank, then spoke it
	OutcomeTyped   = "typed"    // typed their own reply
	OutcomeNoneFit = "none_fit" // said that no candidate fit
)

// Feedback windows: an outcome may be reported for FeedbackWindow after
// its inference; a second report within ReplaceWindow of the first
// replaces it, a later one is refused.
const (
	FeedbackWindow = 24 * time.Hour
	ReplaceWindow  = 10 * time.Minute
)

// Outcome is what the AAC user did with one inference's candidates. It
// holds lengths and times, never text.
type Outcome struct {
	Kind string // one of the Outcome* kinds
	// Rank is the chosen candidate (1 = the first) for spoken and edited.
	Rank int
	// SpokenChars is the length in characters of what the user said (0
	// when unknown, as for none_fit without a text).
	SpokenChars int
	// KeystrokesSaved follows issue 12's rule (package engine/score).
	KeystrokesSaved int
	// TimeToChoiceMS is the client's time from the answer to the choice; -1
	// when the client did not report it.
	TimeToChoiceMS int64
	// FirstAt is when the first report for the inference arrived (the
	// replace window runs from it); At is when this one did.
	FirstAt, At time.Time
	// SteerMode is the steering mode of the answer the reply came from
	// ("" for the turn's own, unsteered answer). KeysPressed and
	// Selections are the user's actions for the turn as the client
	// reported them (ActionsReported): the keystroke saving rate is
	// (SpokenChars - KeysPressed - Selections) / SpokenChars.
	SteerMode               string
	KeysPressed, Selections int
	ActionsReported         bool
}

// Accepted reports whether the user spoke a suggestion, edited or not.
func (o Outcome) Accepted() bool { return o.Kind == OutcomeSpoken || o.Kind == OutcomeEdited }

// Inference is an answered inference as feedback sees it.
type Inference struct {
	ID             string
	At             time.Time // when its log entry was written
	KeyHash        string    // the API key that made it
	Subject        string    // the user it was for (see LogEntry.Subject)
	PromptVersion  string
	CandidateChars []int
	// Remembered is set when the inference was made with remember: true.
	// Texts holds its partner turn and candidates while they are kept
	// (FeedbackWindow + ReplaceWindow), decrypted; nil afterwards.
	Remembered bool
	Texts      *RememberedTexts
	// Outcome is the reported outcome, nil while none was reported.
	Outcome *Outcome
	// Turn and SteerMode are set for a steered answer (see
	// InferenceInfo.Turn): it has no outcome of its own; feedback naming
	// it is recorded on Turn.
	Turn, SteerMode string
}

// Pair is one remembered exchange of a user: the partner's turn and what
// the user really said to it.
type Pair struct {
	InferenceID string
	At          time.Time // when the inference was made
	Partner     string
	Reply       string
}

// MemoryUser describes one user whose replies are remembered. Subject is
// the same pseudonymous hash as LogEntry.Subject.
type MemoryUser struct {
	Subject string
	// Tag is the installation-wide pseudonym of the user_id the memory
	// belongs to (secret.Pseudonym); Subject is the pseudonym of that
	// user_id within the namespace of the key that created it. For a
	// memory from before memories were scoped to keys the two are equal.
	Tag string
	// Keys are the API key hashes linked to the memory (Store.LinkMemory),
	// sorted: the one that created it and those an admin added.
	Keys      []string
	Pairs     int
	CreatedAt time.Time
	// LastAt is when a pair was last stored (zero when none was).
	LastAt time.Time
	// Rev changes whenever the user's pairs change (recall caches check it).
	Rev uint64
}

// OutcomeRecord is one reported outcome for the export: the inference, its
// outcome, and the remembered pair when the user opted in and it is kept.
type OutcomeRecord struct {
	Inference Inference // without Texts; Outcome is set
	Pair      *Pair
}

// UserDeletion says what DeleteUser removed.
type UserDeletion struct {
	Pairs    int  // remembered pairs
	Pending  int  // inferences whose texts awaited feedback
	Outcomes int  // reported outcomes
	Key      bool // the user's encryption key existed and was destroyed
	// ScrubbedPages is the number of free pages of the file overwritten
	// with zeros afterwards (bbolt); Scrub how long the clearing took,
	// writers waiting (bbolt), or VACUUM and CHECKPOINT (PostgreSQL).
	ScrubbedPages int
	Scrub         time.Duration
	// ScrubProblem, when not empty, says what of the clearing could not be
	// done (PostgreSQL: a VACUUM or CHECKPOINT refused); the deletion itself
	// is committed.
	ScrubProblem string
}

// MemoryPrune says what PruneMemory removed.
type MemoryPrune struct {
	Pairs, Pending, Users int
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
	// Errors counts the failed infer calls by ErrorCode.
	Errors map[string]int
	// Latency is over the answered (2xx) infer calls.
	Latency Percentiles
	// OutcomeStats are over the inferences of the window with an outcome.
	OutcomeStats
	// ByKey has one entry per API key with calls in the window, most
	// requests first (entries written before keys were recorded lack one).
	ByKey []KeyStats
	// ByPromptVersion has one entry per system-prompt version that answered
	// inferences in the window, in the order each was first used.
	ByPromptVersion []VersionStats
	// ByModel has one entry per language model (InferenceInfo.Model) that
	// answered inferences in the window, in the order each was first used:
	// what a switch of models changed.
	ByModel []ModelStats
	// KSR has the keystroke saving rate of the spoken replies whose actions
	// were reported, one entry per steering mode ("none": picked from the
	// turn's unsteered answer) and prompt version, sorted by both.
	KSR []KSRStats
}

// KSRStats is the keystroke saving rate of a group of spoken replies:
// (Chars - Actions) / Chars.
type KSRStats struct {
	SteerMode     string
	PromptVersion string
	Replies       int
	Chars         int // characters of the replies
	Actions       int // keys pressed and selections made for them
}

// Rate is the keystroke saving rate, 0 when there are no characters.
func (k KSRStats) Rate() float64 {
	if k.Chars == 0 {
		return 0
	}
	return float64(k.Chars-k.Actions) / float64(k.Chars)
}

// SteerModeNone is the KSRStats.SteerMode of replies picked from a turn's
// unsteered answer.
const SteerModeNone = "none"

// KSRCounts reports whether o counts for the keystroke saving rate (a
// spoken reply whose actions were reported) and its steering mode.
func (o Outcome) KSRCounts() (mode string, ok bool) {
	if !o.ActionsReported || o.Kind == OutcomeNoneFit || o.SpokenChars <= 0 {
		return "", false
	}
	if o.SteerMode == "" {
		return SteerModeNone, true
	}
	return o.SteerMode, true
}

// Percentiles of a set of durations in milliseconds, nearest-rank; N is
// the number of values (P50 and P95 mean nothing when N is 0).
type Percentiles struct {
	N        int
	P50, P95 int64
}

// OutcomeStats summarise the outcomes of a set of inferences.
type OutcomeStats struct {
	Outcomes        int         // inferences with an outcome
	Accepted        int         // spoken or edited suggestions
	NoneFit         int         // none_fit reports
	RankCounts      map[int]int // chosen rank -> accepted outcomes
	KeystrokesSaved int
	TimeToChoice    Percentiles // over outcomes that reported it
}

// KeyStats are the counters of one API key.
type KeyStats struct {
	KeyHash  string
	Requests int
	Errors   int
	OutcomeStats
}

// VersionStats are the counters of one system-prompt version.
type VersionStats struct {
	Version    string
	Inferences int // answered inferences that used it
	Outcomes   int
	Accepted   int
}

// ModelStats counts the answered inferences of one language model.
type ModelStats struct {
	Model      string
	Inferences int
	Outcomes   int
	Accepted   int
	// Latency is over its answered inferences.
	Latency Percentiles
}

// StatsBucket is one slice of a time series of Stats.
type StatsBucket struct {
	Start         time.Time
	TotalRequests int
	ActiveUsers   int
	Outcomes      int
	Accepted      int
}
