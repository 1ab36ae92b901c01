// Package bolt is the embedded implementation of store.Store: replyd's
// state in one bbolt file (API keys, the admin key, system prompt versions,
// OTP codes, admin sessions, logs, the rows behind the statistics, the
// outcomes tablets report, and the remembered replies of users who opted
// in). Open opens the file; it owns the bucket names and the encodings.
// Nothing else in replyd imports bbolt.
package bolt

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/replyd/replyd/store"
)

// SchemaVersion is the layout version this package writes into the meta
// bucket. Open refuses a file written with a newer version and migrates an
// older one (see migrations).
//
//   - 1: the first layout.
//   - 2: infer log subjects are keyed pseudonyms (migratePseudonyms); the
//     secrets bucket holds the installation secrets.
//   - 3: the inferences and mem_* buckets (outcomes, the users' memory), and
//     compact binary infer_index rows (older rows, the subject alone, are
//     still read).
//   - 4: memory scoped to keys: the mem_links bucket, filled for existing
//     memories with the keys that wrote them (migrateMemoryLinks); guards of
//     login by code per client address (otp_guards).
const SchemaVersion = 4

// Bucket names. Every bucket is created by Open in one transaction.
var (
	bucketMeta      = []byte("meta")         // schema_version, admin key hash, current prompt, OTP
	bucketKeys      = []byte("keys")         // key hash -> JSON APIKey
	bucketKeysByAge = []byte("keys_by_age")  // created nanos ‖ seq -> key hash
	bucketPrompts   = []byte("prompts")      // seq -> JSON PromptVersion
	bucketPromptIdx = []byte("prompt_index") // version -> seq
	bucketSessions  = []byte("sessions")     // token hash -> expiry nanos
	bucketLogs      = []byte("logs")         // nanos ‖ seq -> JSON LogEntry
	bucketInferIdx  = []byte("infer_index")  // same key as logs, infer entries only -> inferRow
	bucketSecrets   = []byte("secrets")      // name -> installation secret (schema 2)
	bucketOTP       = []byte("otp")          // scope (client address) -> JSON otpRecord (created at any schema)
	bucketPairings  = []byte("pairings")     // code hash -> JSON Pairing
	// Schema 3.
	bucketInferences = []byte("inferences") // inference_id -> log key
	bucketMemUsers   = []byte("mem_users")  // subject -> JSON userRecord (the user's AES key)
	bucketMemPairs   = []byte("mem_pairs")  // subject ‖ 0 ‖ log key -> sealed pair
	bucketMemInfer   = []byte("mem_infer")  // subject ‖ 0 ‖ log key -> sealed texts awaiting feedback
	// Schema 4.
	bucketMemLinks  = []byte("mem_links")  // key hash ‖ 0 ‖ tag -> subject (MemorySubject)
	bucketOTPGuards = []byte("otp_guards") // scope -> JSON OTPGuard (scopes other than "")
	// Created at any schema (steering).
	bucketSteerIdx = []byte("steer_index") // same key as logs, steered answers only -> JSON steerRow
	// Live listening (schema 4 files gain them on the next writable open).
	bucketLiveTickets = []byte("live_tickets") // ticket hash -> JSON LiveTicket
	bucketLiveOff     = []byte("live_off")     // key hash -> empty: live listening switched off
	// Models chosen on the admin page (created on the next writable open).
	bucketModelChoices = []byte("model_choices") // node ‖ 0 ‖ kind -> JSON ModelChoice
	bucketModelRecords = []byte("model_records") // node ‖ 0 ‖ file ‖ 0 ‖ what -> JSON ModelRecord

	// v1Buckets exist in every replyd file; a read-only open checks them.
	v1Buckets = [][]byte{
		bucketMeta, bucketKeys, bucketKeysByAge, bucketPrompts, bucketPromptIdx,
		bucketSessions, bucketLogs, bucketInferIdx,
	}
	// allBuckets are created by a writable Open. Buckets added after
	// schema 1 may be missing from a file opened read-only: readers check.
	allBuckets = append(append([][]byte(nil), v1Buckets...), bucketSecrets, bucketOTP, bucketPairings,
		bucketInferences, bucketMemUsers, bucketMemPairs, bucketMemInfer, bucketMemLinks, bucketOTPGuards, bucketSteerIdx,
		bucketLiveTickets, bucketLiveOff, bucketModelChoices, bucketModelRecords)
)

// migrations[v] upgrades a file of schema version v to v+1 inside Open's
// transaction.
var migrations = map[uint64]func(*bolt.Tx) error{
	1: migratePseudonyms,
	3: migrateMemoryLinks,
}

// Keys inside the meta bucket.
var (
	metaSchemaVersion = []byte("schema_version")
	metaAdminKeyHash  = []byte("admin_key_hash")
	metaPromptCurrent = []byte("prompt_current")
	metaTOTPLastStep  = []byte("totp_last_step")

	// Schema 1 kept one global code here; Open deletes them.
	metaV1OTP           = []byte("otp")
	metaV1OTPLastIssued = []byte("otp_last_issued")
)

// DefaultTimeout is how long Open waits for the file lock when
// Options.Timeout is zero.
const DefaultTimeout = time.Second

// initialMmapSize is mapped up front (address space only: on Linux the
// file does not grow with it) so that a long read transaction, such as a
// Backup streamed to a slow client, does not block writers on a remap until
// the file passes this size (bbolt's advice in DB.Begin). 64-bit only.
const initialMmapSize = 1 << 30

// Options configures Open. The zero value is usable.
type Options struct {
	// Now is the clock used for defaults (a zero LogEntry.Timestamp, a zero
	// CreatedAt). It defaults to time.Now; tests inject a fixed clock.
	Now func() time.Time
	// Timeout bounds the wait for the file lock held by another process.
	// Zero means DefaultTimeout; a negative value is treated as zero too.
	Timeout time.Duration
	// ReadOnly opens the file with a shared lock and no write access: every
	// write method then fails. The file must exist and carry our schema.
	ReadOnly bool

	// openFile replaces os.OpenFile; tests use it to simulate read-only and
	// full file systems as root.
	openFile func(string, int, os.FileMode) (*os.File, error)
}

// DB is replyd's state in one bbolt file. It is safe for concurrent use by
// many goroutines. Exactly one process may hold a DB open for writing.
type DB struct {
	bolt *bolt.DB
	path string
	now  func() time.Time

	// gate admits every transaction; ScrubFreePages, which must run with
	// no transaction open, takes it exclusively.
	gate gate

	touches store.TouchThrottle
	limiter store.MemoryLimiter // the rate limits: one process, so in memory

	closed atomic.Bool // set by Close

	// writeFail is the last write's failure, nil after a write succeeds.
	writeFail atomic.Pointer[error]
}

// Open opens (creating if needed, mode 0600) the bbolt file at path and makes
// sure every bucket and the schema version exist. An existing file is first
// checked with VerifyFile, without mapping it: a damaged one (truncated,
// pages overwritten, empty) is refused with a *DamagedError naming the file
// and what to do, never mapped. When another process holds
// the file, Open fails after opts.Timeout with an error wrapping ErrLocked.
// A missing, read-only or full data directory gives an error naming the path.
func Open(path string, opts Options) (*DB, error) {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if err := verifyExisting(path, opts.Timeout); err != nil {
		return nil, err
	}
	bdb, err := bolt.Open(path, 0o600, &bolt.Options{
		Timeout:      opts.Timeout,
		ReadOnly:     opts.ReadOnly,
		OpenFile:     opts.openFile,
		FreelistType: bolt.FreelistMapType,
		// The freelist is not written on every commit (it is rebuilt by
		// scanning the file when it is opened after a crash): on a small
		// store that halves the pages a feedback or a log entry writes.
		// Durability is bbolt's as before: a commit is on disk when it
		// returns (the data pages and the meta page are synced).
		NoFreelistSync: !opts.ReadOnly,
		InitialMmapSize: func() int {
			if strconv.IntSize == 64 {
				return initialMmapSize
			}
			return 0
		}(),
	})
	if err != nil {
		return nil, describeOpenError(path, err)
	}
	db := &DB{bolt: bdb, path: path, now: opts.Now}
	if opts.ReadOnly {
		err = bdb.View(func(tx *bolt.Tx) error { return checkSchema(tx) })
	} else {
		err = bdb.Update(initSchema)
	}
	if err != nil {
		_ = bdb.Close()
		return nil, fmt.Errorf("store: open %s: %w", path, describeIOError(err))
	}
	return db, nil
}

// verifyExisting runs VerifyFile on the file at path, if there is one,
// under a shared lock (a running replyd writing it would make its pages
// move under the check): bbolt maps the file and reads it as it finds it, so
// a truncated file or a garbage page would fault or panic inside bbolt.
func verifyExisting(path string, timeout time.Duration) error {
	f, err := sharedLock(path, timeout)
	if err != nil || f == nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("store: open %s: %w", path, err)
	}
	if err := verify(f, fi.Size(), path); err != nil {
		var d *DamagedError
		if errors.As(err, &d) {
			return err
		}
		return fmt.Errorf("store: open %s: %w", path, describeIOError(err))
	}
	return nil
}

// initSchema creates every bucket and records the schema version, or checks
// it when the file already has one.
func initSchema(tx *bolt.Tx) error {
	for _, name := range allBuckets {
		if _, err := tx.CreateBucketIfNotExists(name); err != nil {
			return fmt.Errorf("create bucket %s: %w", name, err)
		}
	}
	meta := tx.Bucket(bucketMeta)
	if meta.Get(metaSchemaVersion) == nil {
		return meta.Put(metaSchemaVersion, u64(SchemaVersion))
	}
	if err := checkSchema(tx); err != nil {
		return err
	}
	for v := binary.BigEndian.Uint64(meta.Get(metaSchemaVersion)); v < SchemaVersion; v++ {
		if m := migrations[v]; m != nil {
			if err := m(tx); err != nil {
				return fmt.Errorf("migrating schema %d to %d: %w", v, v+1, err)
			}
		}
		if err := meta.Put(metaSchemaVersion, u64(v+1)); err != nil {
			return err
		}
	}
	for _, k := range [][]byte{metaV1OTP, metaV1OTPLastIssued} {
		if meta.Get(k) != nil {
			if err := meta.Delete(k); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkSchema verifies that tx holds every bucket and a schema version this
// code understands.
func checkSchema(tx *bolt.Tx) error {
	meta := tx.Bucket(bucketMeta)
	if meta == nil {
		return errors.New("not a replyd data file: no meta bucket")
	}
	v := meta.Get(metaSchemaVersion)
	if len(v) != 8 {
		return errors.New("not a replyd data file: no schema version")
	}
	got := binary.BigEndian.Uint64(v)
	if got > SchemaVersion {
		return fmt.Errorf("schema version %d is newer than this replyd understands (%d)", got, SchemaVersion)
	}
	for _, name := range v1Buckets {
		if tx.Bucket(name) == nil {
			return fmt.Errorf("not a replyd data file: bucket %s missing", name)
		}
	}
	return nil
}

// describeOpenError turns bbolt's and the OS's errors from opening path into
// one an operator can act on; it keeps the cause for errors.Is.
func describeOpenError(path string, err error) error {
	switch {
	case errors.Is(err, berrors.ErrTimeout):
		return fmt.Errorf("store: %s: %w (another replyd process holds it; stop it or choose another data directory)", path, store.ErrLocked)
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("store: open %s: the file or its data directory does not exist: %w", path, err)
	case errors.Is(err, berrors.ErrInvalid), errors.Is(err, berrors.ErrVersionMismatch), errors.Is(err, berrors.ErrChecksum):
		return fmt.Errorf("store: open %s: not a valid bbolt data file (%w): %w. %s", path, ErrDamaged, err, RestoreAdvice)
	}
	return fmt.Errorf("store: open %s: %w", path, describeIOError(err))
}

// describeIOError adds an explanation to the errors a data directory gives
// when it is read-only, not ours, or full.
func describeIOError(err error) error {
	switch {
	case errors.Is(err, syscall.EROFS):
		return fmt.Errorf("the data directory is on a read-only file system: %w", err)
	case errors.Is(err, fs.ErrPermission):
		return fmt.Errorf("permission denied: the data directory must be writable by this user: %w", err)
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return fmt.Errorf("%w: %w", store.ErrNoSpace, err)
	}
	return err
}

// Close releases the file and its lock. It waits for running transactions.
func (db *DB) Close() error {
	db.closed.Store(true)
	if err := db.bolt.Close(); err != nil {
		return fmt.Errorf("store: close %s: %w", db.path, err)
	}
	return nil
}

// Path returns the file the DB was opened on.
func (db *DB) Path() string { return db.path }

// Describe returns the file's path.
func (db *DB) Describe() string { return db.path }

// Ping reports whether the store can serve requests now: an error when it is
// closed, or when its last write failed (WriteFailure: a full or read-only
// disk) until a write succeeds again.
func (db *DB) Ping(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if db.closed.Load() {
		return fmt.Errorf("store %s: %w: closed", db.path, store.ErrUnavailable)
	}
	return db.WriteFailure()
}

// update runs fn in one read-write transaction and explains I/O errors.
func (db *DB) update(fn func(*bolt.Tx) error) error {
	db.gate.enter(false)
	defer db.gate.leave(false)
	return db.noteWrite(db.bolt.Update(fn))
}

// noteWrite records the outcome of a write transaction for WriteFailure and
// returns err explained. A caller's mistake (not found, exists, invalid)
// says nothing about the disk and changes nothing.
func (db *DB) noteWrite(err error) error {
	if err == nil {
		db.writeFail.Store(nil)
		return nil
	}
	err = db.wrap(err)
	if !errors.Is(err, store.ErrNotFound) && !errors.Is(err, store.ErrExists) && !errors.Is(err, store.ErrInvalid) {
		db.writeFail.Store(&err)
	}
	return err
}

// WriteFailure returns the error of the last write transaction when it
// failed (wrapping ErrNoSpace when the disk is full), or nil when the last
// write succeeded or none was made since Open. Health checks report it.
func (db *DB) WriteFailure() error {
	if p := db.writeFail.Load(); p != nil {
		return *p
	}
	return nil
}

// batch runs fn through bbolt's Batch (see AppendLog); errors are bbolt's.
func (db *DB) batch(fn func(*bolt.Tx) error) error {
	db.gate.enter(false)
	defer db.gate.leave(false)
	return db.bolt.Batch(fn)
}

// view runs fn in one read-only transaction.
func (db *DB) view(fn func(*bolt.Tx) error) error {
	if err := db.rawView(fn, false); err != nil {
		return db.wrap(err)
	}
	return nil
}

// rawView runs fn in one read-only transaction and returns bbolt's error.
// long marks a reader that may last (a backup streamed to a client).
func (db *DB) rawView(fn func(*bolt.Tx) error, long bool) error {
	db.gate.enter(long)
	defer db.gate.leave(long)
	return db.bolt.View(fn)
}

// wrap leaves the sentinel errors of this package as they are and prefixes
// everything else with the file's path.
func (db *DB) wrap(err error) error {
	if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrExists) || errors.Is(err, store.ErrInvalid) ||
		errors.Is(err, store.ErrExpired) || errors.Is(err, store.ErrUsed) || errors.Is(err, store.ErrLimit) {
		return err
	}
	return fmt.Errorf("store %s: %w", db.path, describeIOError(err))
}

// invalid returns an error wrapping ErrInvalid.
func invalid(format string, args ...any) error {
	return fmt.Errorf("store: %w: %s", store.ErrInvalid, fmt.Sprintf(format, args...))
}

// deleteWhere deletes the entries of b for which dead is true and returns
// how many. It collects the keys first: deleting under a moving cursor
// skips keys.
func deleteWhere(b *bolt.Bucket, dead func(k, v []byte) bool) (int, error) {
	var keys [][]byte
	err := b.ForEach(func(k, v []byte) error {
		if dead(k, v) {
			keys = append(keys, append([]byte(nil), k...))
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return deleteKeys(b, keys)
}

// u64 encodes v big-endian so that byte order equals numeric order.
func u64(v uint64) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint64(b, v)
	return b
}

// nanos maps t to a sortable unsigned count of nanoseconds since 1970,
// clamping times before 1970 (and the zero Time) to 0 and times after 2262 to
// the largest value.
func nanos(t time.Time) uint64 {
	if t.IsZero() || t.Before(time.Unix(0, 0)) {
		return 0
	}
	if t.After(time.Unix(0, math.MaxInt64)) {
		return math.MaxInt64
	}
	return uint64(t.UnixNano())
}

// timeKey is the 16-byte key "nanos ‖ seq" of an entry that sorts by time.
func timeKey(t time.Time, seq uint64) []byte {
	k := make([]byte, 16)
	binary.BigEndian.PutUint64(k, nanos(t))
	binary.BigEndian.PutUint64(k[8:], seq)
	return k
}

// keyNanos reads the time part of a timeKey.
func keyNanos(k []byte) uint64 { return binary.BigEndian.Uint64(k[:8]) }
