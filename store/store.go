package store

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/replyd/replyd/internal/window"
)

// Store is replyd's persistent state: the contract every implementation
// keeps. Two implement it: store/bolt (one bbolt file, one process: the
// embedded default) and store/postgres (PostgreSQL, shared by several boxes).
// Both run the one scenario suite in store/storetest; a behaviour that only
// one of them has is a bug in the other. A new method goes into this
// interface, into both implementations and into a storetest scenario; a new
// kind of data also goes into Snapshot, so that `replyd store migrate`
// carries it.
//
// Rules that hold for every method:
//   - It is safe for concurrent use, from many goroutines and (PostgreSQL)
//     from many processes at once.
//   - A write is durable when the method returns nil: one transaction per
//     logical write; nothing acknowledged is lost when the process dies.
//   - Secrets (API keys, OTP codes, session tokens) arrive and are stored
//     only as lowercase hex SHA-256; the store never sees them in clear.
//     The installation secrets (InstallationSecret) are the exception:
//     replyd must use them, so they are kept as they are, never logged.
//   - Errors are tested with errors.Is: ErrNotFound, ErrExists, ErrInvalid
//     (the caller's mistake: an empty hash, a bad range), ErrUnavailable (the
//     database cannot be reached: retry later), ErrNoSpace (a write failed
//     because the disk is full), ErrNotSupported, and for pairings
//     ErrExpired, ErrUsed and ErrLimit. Anything else is an
//     internal failure.
//   - Times are kept to the nanosecond and come back as the same instant;
//     the zero Time stands for "never" (a key not revoked, not yet used).
//   - Methods take no context: each bounds its own work (PostgreSQL: a
//     per-call timeout), so a caller never hangs on a dead database.
type Store interface {
	// CreateKey stores k under k.Hash. It returns ErrExists when the hash
	// is already stored (revoked or not) and ErrInvalid when it is empty. A
	// zero CreatedAt is set from the store's clock and an empty Status
	// becomes StatusActive.
	CreateKey(k APIKey) error
	// GetKey returns the key stored under hash, or ErrNotFound. It reads the
	// stored record every time, so a revocation on any box is seen at once.
	GetKey(hash string) (APIKey, error)
	// ListKeys returns up to limit keys, newest CreatedAt first (keys created
	// in the same nanosecond: last created first). Revoked keys are skipped
	// unless includeRevoked is set; the limit counts only returned keys. A
	// limit <= 0 means no limit. The result is never nil.
	ListKeys(limit int, includeRevoked bool) ([]APIKey, error)
	// ListKeysPage returns the next page of ListKeys's order: up to limit
	// keys (limit >= 1) that come after the position after (nil: from the
	// newest), and the position of the last one returned when more keys
	// follow (nil at the end). Keys created or revoked between pages
	// neither repeat nor shift the pages: a key created meanwhile is newer
	// than every position, so it is on no later page.
	ListKeysPage(after *KeyCursor, limit int, includeRevoked bool) (keys []APIKey, next *KeyCursor, err error)
	// RevokeKey marks the key revoked at at and returns the stored record.
	// It is idempotent: revoking a revoked key changes nothing and returns
	// the record with its first RevokedAt. An unknown hash gives ErrNotFound.
	RevokeKey(hash string, at time.Time) (APIKey, error)
	// TouchKey records that the key was used at at. To spare a write on
	// every authenticated request it persists at most once per minute per
	// key (tracked in memory, so a restart allows one early write); calls
	// inside that minute return nil without writing and without checking
	// that the key exists. A persisted touch of an unknown key gives
	// ErrNotFound and is not remembered. LastUsedAt never moves backwards.
	TouchKey(hash string, at time.Time) error

	// AdminKeyHash returns the stored hash of the admin key (the Argon2id
	// string of secret.HashAdminKey, or the hex SHA-256 older versions
	// stored), or "" when none is set.
	AdminKeyHash() (string, error)
	// SetAdminKeyHash replaces the admin key hash; "" removes it, which
	// disables X-ADMIN-KEY authentication.
	SetAdminKeyHash(hash string) error
	// SetAdminKeyHashIfAbsent stores hash as the admin key hash only when
	// none is stored, in one atomic step, and reports whether it did: of
	// boxes that start together on one database, each with a key of its
	// own, exactly one stores its hash and the others keep the stored one.
	// An empty hash is ErrInvalid.
	SetAdminKeyHashIfAbsent(hash string) (bool, error)

	// CurrentPrompt returns the most recently saved prompt version and true,
	// or false when no prompt was ever saved.
	CurrentPrompt() (PromptVersion, bool, error)
	// SavePrompt appends p to the history and makes it current, in one
	// transaction. p.Version must be non-empty (else ErrInvalid) and not
	// used before (else ErrExists). A zero CreatedAt is set from the clock.
	SavePrompt(p PromptVersion) error
	// PromptHistory returns up to limit saved versions, most recently saved
	// first. A limit <= 0 means all of them. The result is never nil.
	PromptHistory(limit int) ([]PromptVersion, error)
	// NextPromptVersion returns one more than the largest version that is a
	// non-negative decimal integer, as a string; "1" when there is none.
	// Versions that are not integers ("beta") are ignored. The answer is
	// advisory: a concurrent SavePrompt may take it, and then SavePrompt
	// reports ErrExists.
	NextPromptVersion() (string, error)

	// SaveOTP makes codeHash the code outstanding for scope (the client
	// address that asked for it), replacing only that scope's earlier code:
	// a code asked for from one address is never replaced or spent from
	// another. When the scope's code was issued less than resend before
	// issuedAt, nothing is saved and retry is the time left (on every box:
	// one atomic write). An empty scope or hash is ErrInvalid.
	SaveOTP(scope, codeHash string, issuedAt, expiresAt time.Time, resend time.Duration) (retry time.Duration, err error)
	// UseOTP spends scope's code when codeHash matches it (compared in
	// constant time) and now is before its expiry, and reports whether it
	// did: of concurrent uses of the right code, on any box, exactly one is
	// true. A wrong, expired or missing code is false and writes nothing:
	// wrong guesses never touch the code (the caller limits attempts).
	UseOTP(scope, codeHash string, now time.Time) (bool, error)
	// DeleteOTP removes scope's code, if any (a code that could not be
	// delivered). Deleting a missing code is not an error.
	DeleteOTP(scope string) error
	// PruneOTPs deletes every code whose expiry is at or before now and
	// returns how many it deleted. It also forgets the guards of scopes
	// other than "" that are idle at now (OTPGuard.Idle, OTPGuardIdle).
	PruneOTPs(now time.Time) (int, error)
	// OTPLock returns the end of the current pause of login by code of
	// guard scope (see OTPLockRule: "" is the global guard, others one per
	// client address or /64), or the zero Time when there is none at now.
	OTPLock(scope string, now time.Time) (time.Time, error)
	// OTPFailed counts one wrong login code from source (the client
	// address's bucket) at now under rule in guard scope, atomically for
	// every box, and returns the end of the pause it started (the zero
	// Time when it started none).
	OTPFailed(scope, source string, now time.Time, rule OTPLockRule) (time.Time, error)
	// UseTOTPStep records that a TOTP code of time step step (Unix time /
	// 30 s) was accepted and reports whether it may be: true only when step
	// is later than every step accepted before, so that each code works
	// once, on any box. A negative step is ErrInvalid.
	UseTOTPStep(step int64) (bool, error)

	// InstallationSecret returns the secret stored under name (such as
	// SecretPseudonym), creating it (32 bytes from crypto/rand) when there
	// is none, so that concurrent callers, later starts and every box get
	// the same value. An empty name is ErrInvalid.
	InstallationSecret(name string) ([]byte, error)
	// Secret returns the secret stored under name and whether there is
	// one, without creating it.
	Secret(name string) ([]byte, bool, error)
	// SetSecret stores value under name, replacing any earlier value; an
	// empty value deletes it. An empty name is ErrInvalid.
	SetSecret(name string, value []byte) error

	// CreateSession stores an admin session under the SHA-256 hex of its
	// token. It returns ErrExists when the hash is already stored and
	// ErrInvalid when it is empty.
	CreateSession(tokenHash string, expiresAt time.Time) error
	// SessionValid reports whether a session with this token hash exists
	// and now is before its expiry. It never writes: expired sessions stay
	// until PruneSessions or DeleteSession removes them.
	SessionValid(tokenHash string, now time.Time) (bool, error)
	// DeleteSession removes the session (logout). Deleting an unknown
	// session is not an error.
	DeleteSession(tokenHash string) error
	// PruneSessions deletes every session whose expiry is at or before now
	// and returns how many it deleted.
	PruneSessions(now time.Time) (int, error)

	// CreatePairing stores a pending tablet pairing under p.CodeHash (the
	// SHA-256 of its one-time code; p.Key holds the settings of the key to
	// mint). In the same transaction it deletes every pairing whose
	// ExpiresAt is at or before now. It returns ErrLimit when maxPending
	// unused, unexpired pairings exist already (maxPending <= 0: no bound),
	// ErrExists when the code hash is taken, and ErrInvalid for an empty
	// hash or an ExpiresAt not after now.
	CreatePairing(p Pairing, maxPending int, now time.Time) error
	// RedeemPairing mints the key of the pairing stored under codeHash, with
	// hash keyHash and CreatedAt now, and marks the pairing used, in one
	// transaction; of concurrent redemptions of one code exactly one gets
	// the key. When p.MemorySubject names a memory user that still exists,
	// the new key is linked to it (LinkMemory) in the same transaction. It
	// returns the key, or ErrNotFound (no such pairing; nothing
	// is written, so guessing costs no disk), ErrExpired (the pairing
	// expired and is deleted), ErrUsed (redeemed before) or ErrExists
	// (keyHash is taken; nothing is written).
	RedeemPairing(codeHash, keyHash string, now time.Time) (APIKey, error)
	// PrunePairings deletes every pairing, used or not, whose ExpiresAt is
	// at or before now, and returns how many it deleted.
	PrunePairings(now time.Time) (int, error)

	// CreateLiveTicket stores the one-time ticket t of a live session
	// (LiveTicket) under t.Hash. In the same transaction it deletes every
	// ticket whose ExpiresAt is at or before now, so expired tickets leave
	// nothing behind. It returns ErrInvalid when t.Hash or t.KeyHash is
	// empty or t expires at or before now, and ErrExists when the hash is
	// taken.
	CreateLiveTicket(t LiveTicket, now time.Time) error
	// TakeLiveTicket removes the ticket stored under hash and returns it,
	// in one atomic step: of several boxes or goroutines taking one ticket
	// at once, exactly one gets it. It returns ErrNotFound when no ticket
	// has this hash (never created, or taken before; nothing is written,
	// so guessing costs no disk) and ErrExpired when it expired (it is
	// deleted).
	TakeLiveTicket(hash string, now time.Time) (LiveTicket, error)
	// SetLiveOff switches live listening off (off) or back on for the API
	// key keyHash: the key's holder withdrew consent, or an administrator
	// did for them. It is idempotent and returns ErrNotFound for an unknown
	// key. Every box reads it afresh (LiveOff), so a switch reaches them all
	// at the next turn.
	SetLiveOff(keyHash string, off bool) error
	// LiveOff reports whether live listening is switched off for keyHash;
	// false for a key never switched (or unknown).
	LiveOff(keyHash string) (bool, error)

	// AppendLog stores e (a zero Timestamp is set from the clock). The entry
	// is durable when AppendLog returns nil; concurrent calls may share one
	// commit. Entries of stream StreamInfer count in Stats. An entry of
	// StreamSteer whose Inference has an ID and a Turn records a steered
	// answer: Inference finds it by its id (on every box, after a restart)
	// with its Turn and SteerMode, while it counts in no statistics and
	// takes no outcome (SetOutcome: ErrNotFound).
	AppendLog(e LogEntry) error
	// Logs returns the entries with Timestamp >= q.Since (inclusive) that
	// match q.Level and q.Stream when those are set, newest first, at most
	// q.Limit of them (q.Limit <= 0: all), from every box. Entries with equal
	// timestamps come last-appended first. The result is never nil.
	Logs(q LogQuery) ([]LogEntry, error)
	// Stats counts the StreamInfer entries with since <= Timestamp < until:
	// TotalRequests, the distinct non-empty Subjects among them
	// (ActiveUsers), errors by ErrorCode, latency percentiles of the answered
	// ones, the outcomes of the answered ones, and the same per key and per
	// prompt version, all through a StatsBuilder so the arithmetic is the
	// same everywhere. Its cost grows with the window, not the whole log. An
	// empty or inverted window gives the zero counts (NewStatsBuilder().Stats()).
	Stats(since, until time.Time) (Stats, error)
	// StatsSeries splits [since, until) into consecutive buckets of the
	// given width starting at since (the last one may reach past until but
	// counts nothing at or after until) and returns the requests, active
	// users, outcomes and accepted outcomes of each, empty buckets
	// included, oldest first. bucket must be positive and the series at most
	// MaxSeriesBuckets long, else ErrInvalid. An empty or inverted window
	// gives an empty, non-nil series.
	StatsSeries(since, until time.Time, bucket time.Duration) ([]StatsBucket, error)
	// PruneLogs deletes up to batch of the oldest entries whose Timestamp is
	// before before, in one short transaction so that writers are not held
	// up, and returns how many it deleted; they leave the statistics too.
	// Callers loop until it returns fewer than batch. A batch <= 0 means
	// DefaultPruneBatch.
	PruneLogs(before time.Time, batch int) (int, error)

	// PruneLogsToSize deletes the oldest entries, in transactions of at
	// most batch entries (<= 0: DefaultPruneBatch), until the entries take
	// at most maxBytes as the store counts them (bbolt: the pages of the
	// log and its index; PostgreSQL: the rows' stored size), and returns
	// how many it deleted; they leave the statistics too.
	PruneLogsToSize(maxBytes int64, batch int) (int, error)

	// Inference returns the answered inference whose log entry carried this
	// id (LogEntry.Inference.ID), with its remembered texts while they are
	// kept, decrypted, or ErrNotFound (also once its entry was pruned or its
	// user deleted). For a steered answer (AppendLog) it returns ID, At,
	// KeyHash, Subject, PromptVersion, CandidateChars, Turn and SteerMode. The feedback rules (which key, FeedbackWindow,
	// ReplaceWindow) are the caller's.
	Inference(id string) (Inference, error)
	// SetOutcome records o as the inference's outcome, replacing any
	// earlier one, in one transaction, or returns ErrNotFound. For an
	// inference made with remember: true whose texts are still kept, reply
	// and the partner's turn become the user's pair for that inference,
	// encrypted under the user's key (an empty reply removes the pair), and
	// the user's memory revision moves; it returns the new revision (0 when
	// no pair changed).
	SetOutcome(id string, o Outcome, reply string) (uint64, error)
	// Outcomes calls fn for every reported outcome of an inference logged
	// with since <= time < until, oldest first, with the remembered pair
	// where one is kept. It reads in short transactions and calls fn outside
	// them; fn's error stops the walk and is returned.
	Outcomes(since, until time.Time, fn func(OutcomeRecord) error) error

	// MemorySubject returns the memory (subject) that key keyHash reads and
	// writes for the user whose installation-wide pseudonym is tag (the
	// MemoryUser.Tag, secret.Pseudonym of its user_id), or "" when the key
	// is linked to none: the caller then uses the key's own namespace. A
	// memory user is linked to the key that created it (AppendLog with
	// Inference.Remember) and to those LinkMemory adds. It reads one small
	// record, cheap enough for every inference.
	MemorySubject(keyHash, tag string) (string, error)
	// LinkMemory lets key keyHash read and write the memory of subject when
	// it names that memory's user_id, in place of the key's own memory for
	// that user_id (replacing an earlier link of the key for it). It
	// returns ErrNotFound when there is no such memory user or key, and
	// ErrInvalid for an empty argument.
	LinkMemory(keyHash, subject string) error
	// UnlinkMemory removes the link of keyHash to subject, or returns
	// ErrNotFound when there is none.
	UnlinkMemory(keyHash, subject string) error
	// MemoryUsers returns every user with a memory (an encryption key), by
	// subject, with the number of pairs kept and the keys linked to it
	// (sorted). The result is never nil.
	MemoryUsers() ([]MemoryUser, error)
	// MemoryRev returns the revision of the user's pairs, which changes
	// whenever they change; 0 when the user has no memory. It is cheap
	// enough to call on every inference.
	MemoryRev(subject string) (uint64, error)
	// MemoryPairs returns the user's pairs, decrypted, oldest first, and
	// their revision; none (and 0) for a user without memory.
	MemoryPairs(subject string) ([]Pair, uint64, error)
	// DeleteUser destroys the user's encryption key, links, pairs, texts awaiting
	// feedback and reported outcomes (the log entries and their counts
	// stay; the user's inferences can no longer be reported on), or returns
	// ErrNotFound when nothing is stored for the user. When it returns, no
	// readable copy is left: bbolt overwrites its free pages
	// (ScrubFreePages); PostgreSQL only ever stored the texts encrypted, and
	// rewrites the table of keys (VACUUM FULL), vacuums the texts and runs a
	// CHECKPOINT, so that no relation file holds the key (what it could not
	// do is in UserDeletion.ScrubProblem; its write-ahead log keeps the rows
	// until the segment goes).
	DeleteUser(subject string) (UserDeletion, error)
	// PruneMemory deletes the pairs of inferences made before pairsBefore
	// (the zero Time keeps them all), the texts awaiting feedback of
	// inferences made before textsBefore, and the users, with their keys,
	// left with neither that were created before both.
	PruneMemory(pairsBefore, textsBefore time.Time) (MemoryPrune, error)

	// SetModelChoice stores c as box c.Node's choice of model for engine
	// c.Kind, replacing that box's earlier choice for the engine (other
	// boxes' choices stay). An empty Node, Kind or Model is ErrInvalid. A
	// zero At is set from the clock.
	SetModelChoice(c ModelChoice) error
	// ModelChoices returns every box's choices, by Node and then Kind. The
	// result is never nil.
	ModelChoices() ([]ModelChoice, error)
	// PutModelRecord stores r, replacing box r.Node's earlier record of
	// the same What for r.File. An empty Node or File, an unknown What or
	// an empty Body is ErrInvalid. A zero At is set from the clock.
	PutModelRecord(r ModelRecord) error
	// ModelRecords returns box node's records, by File and then What. The
	// result is never nil.
	ModelRecords(node string) ([]ModelRecord, error)
	// DeleteModelRecords deletes box node's records of file (none is not
	// an error).
	DeleteModelRecords(node, file string) error

	// Snapshot calls fn with a consistent view of everything the store
	// holds, taken in one read transaction that lasts until fn returns;
	// snap.Logs may be ranged over only during fn. It is how `replyd store
	// migrate` reads a store.
	Snapshot(fn func(snap Snapshot) error) error
	// Import writes everything in snap, in one transaction: all of it or
	// nothing. Into a store that holds anything (keys, prompts, logs,
	// sessions, a code, the admin key, secrets) it refuses with ErrExists unless
	// replace is set, in which case what the store held is gone afterwards.
	// Importing a store's Snapshot into an empty store gives one that
	// answers every method as the first does.
	Import(snap Snapshot, replace bool) error

	// Backup writes a consistent copy of everything to w and returns the
	// bytes written. A store that cannot (PostgreSQL, whose backup is
	// pg_dump) returns an error wrapping ErrNotSupported whose text tells
	// the operator what to do instead, before writing anything.
	Backup(w io.Writer) (int64, error)
	// Size returns the bytes the stored data takes.
	Size() (int64, error)
	// Ping reports whether the store can serve requests now: nil, or an
	// error that /healthz shows as the reason it is degraded: wrapping
	// ErrUnavailable when the database cannot be reached, or (bbolt) the
	// last write's failure until a write succeeds again, wrapping
	// ErrNoSpace when the disk is full.
	Ping(ctx context.Context) error
	// RateLimiter counts each key's requests against its rate limit: in
	// memory for the one process of a bbolt store (MemoryLimiter), in the
	// database for the boxes that share a PostgreSQL store.
	RateLimiter

	// Describe names where the data lives for the admin page and the logs:
	// a file path, or a database URL without its password.
	Describe() string
	// Close releases the store. Appends in flight finish first.
	Close() error
}

// RateWindow is the length of a rate-limit window.
const RateWindow = time.Minute

// RateLimiter admits a key's requests under its rate_limit_per_minute, in
// fixed windows of RateWindow: a window opens with the first request after
// the previous one closed. The bbolt store (one box) counts in memory
// (MemoryLimiter); boxes that share a PostgreSQL store share its limiter
// (store/postgres), so that the limit holds across all of them. The
// ratelimit scenarios of storetest state the contract for both.
type RateLimiter interface {
	// Allow admits one request for key at now when fewer than limit were
	// admitted in the key's current window, and counts it. A limit of 0 or
	// less means unlimited. When refused, retry is the time until the
	// window closes. A time slightly before the window's start (another
	// box's clock) counts in the current window; one more than a window
	// before it (a clock set back) opens a new window. An error (wrapping
	// ErrUnavailable when the database cannot be reached) admits nothing.
	Allow(key string, limit int, now time.Time) (ok bool, retry time.Duration, err error)
	// Refund gives back one request admitted in key's current window (a
	// request that was then shed with 503: its retry must not find the
	// limit used up). It does nothing when the window is over or nothing
	// was admitted in it.
	Refund(key string, now time.Time) error
	// Take spends one request of key's token bucket (a budget that holds
	// at most burst requests and refills perMinute a minute, starting
	// full) at now, or, when less than one request is left, refuses and
	// returns the time until one is: the steering budget, a keystroke
	// every 600 ms. The buckets are apart from Allow's windows. A time
	// before the bucket's last request (another box's clock) refills
	// nothing. perMinute or burst <= 0 means unlimited. An error (wrapping
	// ErrUnavailable when the database cannot be reached) admits nothing.
	Take(key string, perMinute, burst int, now time.Time) (ok bool, retry time.Duration, err error)
}

// RateWindowOver reports whether a window that opened at start is over at
// now, so that a request at now opens a new one. Both limiters use it (the
// PostgreSQL one in SQL of the same meaning).
func RateWindowOver(start, now time.Time) bool { return window.Over(RateWindow, start, now) }

// KeyCursor is a position in the order of ListKeys: a key's creation time
// in Unix nanoseconds and the store's own creation sequence, which breaks
// ties. Its String form is what the admin API hands out as next_cursor.
type KeyCursor struct {
	CreatedNS int64
	Seq       int64
}

// String returns c as 32 hex digits.
func (c KeyCursor) String() string {
	return fmt.Sprintf("%016x%016x", uint64(c.CreatedNS), uint64(c.Seq))
}

// ParseKeyCursor reads a KeyCursor's String form; anything else wraps
// ErrInvalid.
func ParseKeyCursor(s string) (KeyCursor, error) {
	if len(s) != 32 {
		return KeyCursor{}, fmt.Errorf("%w: a key cursor is 32 hex digits", ErrInvalid)
	}
	ns, err1 := strconv.ParseUint(s[:16], 16, 64)
	seq, err2 := strconv.ParseUint(s[16:], 16, 64)
	if err1 != nil || err2 != nil {
		return KeyCursor{}, fmt.Errorf("%w: a key cursor is 32 hex digits", ErrInvalid)
	}
	return KeyCursor{CreatedNS: int64(ns), Seq: int64(seq)}, nil
}
