package bolt

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/replyd/replyd/store"
)

// t0 is the fixed start of the injected clock.
var t0 = time.Date(2026, 11, 22, 1, 0, 0, 0, time.UTC)

// clock is an injectable clock that tests move by hand.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *clock) Add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

// MustOpen opens a fresh store in a temp dir with a fixed clock and closes
// it when the test ends.
func MustOpen(tb testing.TB) (*DB, *clock) {
	tb.Helper()
	c := &clock{t: t0}
	db := MustOpenAt(tb, filepath.Join(tb.TempDir(), "replyd.db"), Options{Now: c.Now})
	return db, c
}

// MustOpenAt opens path and closes the store when the test ends.
func MustOpenAt(tb testing.TB, path string, opts Options) *DB {
	tb.Helper()
	db, err := Open(path, opts)
	if err != nil {
		tb.Fatalf("Open(%s): %v", path, err)
	}
	tb.Cleanup(func() { _ = db.Close() })
	return db
}

// Must fails the test on err.
func Must(tb testing.TB, err error) {
	tb.Helper()
	if err != nil {
		tb.Fatal(err)
	}
}

// MustCreateKey stores a key with the given hash created at at.
func MustCreateKey(tb testing.TB, db *DB, hash string, at time.Time) store.APIKey {
	tb.Helper()
	k := store.APIKey{Hash: hash, ClientID: "client-" + hash, Status: store.StatusActive, Scopes: []string{"infer"}, RateLimitPerMinute: 60, CreatedAt: at}
	Must(tb, db.CreateKey(k))
	return k
}

// MustAppend appends a log entry.
func MustAppend(tb testing.TB, db *DB, e store.LogEntry) {
	tb.Helper()
	Must(tb, db.AppendLog(e))
}

func TestOpenFileModeAndSchema(t *testing.T) {
	path := filepath.Join(t.TempDir(), "replyd.db")
	db := MustOpenAt(t, path, Options{})
	fi, err := os.Stat(path)
	Must(t, err)
	if got := fi.Mode().Perm(); got != 0o600 {
		t.Errorf("file mode = %o, want 600", got)
	}
	Must(t, db.Close())

	// Reopening keeps the data and the schema.
	db2 := MustOpenAt(t, path, Options{})
	Must(t, db2.SetAdminKeyHash("abc"))
	Must(t, db2.Close())
	ro := MustOpenAt(t, path, Options{ReadOnly: true})
	if h, err := ro.AdminKeyHash(); err != nil || h != "abc" {
		t.Errorf("read-only AdminKeyHash = %q, %v; want abc", h, err)
	}
	if err := ro.SetAdminKeyHash("x"); err == nil {
		t.Error("write on a read-only store succeeded")
	}
}

func TestOpenSecondFailsFastWithErrLocked(t *testing.T) {
	path := filepath.Join(t.TempDir(), "replyd.db")
	held := MustOpenAt(t, path, Options{})
	_, err := Open(path, Options{Timeout: 50 * time.Millisecond})
	if !errors.Is(err, store.ErrLocked) {
		t.Fatalf("second Open: %v, want ErrLocked", err)
	}
	if !strings.Contains(err.Error(), path) {
		t.Errorf("error %q does not name %s", err, path)
	}
	// Restore must not replace a file a running process holds.
	var buf bytes.Buffer
	_, err = held.Backup(&buf)
	Must(t, err)
	backup := filepath.Join(t.TempDir(), "backup.db")
	Must(t, os.WriteFile(backup, buf.Bytes(), 0o600))
	if err := Restore(backup, path); !errors.Is(err, store.ErrLocked) || !strings.Contains(err.Error(), "stop the running replyd") {
		t.Errorf("Restore onto an open file: %v, want ErrLocked from the destination", err)
	}
}

func TestOpenMissingDirectory(t *testing.T) {
	path := filepath.Join(t.TempDir(), "no-such-dir", "replyd.db")
	_, err := Open(path, Options{})
	if err == nil || !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("Open in a missing dir: %v", err)
	}
}

func TestOpenDataDirIsAFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "not-a-dir")
	Must(t, os.WriteFile(file, nil, 0o600))
	path := filepath.Join(file, "replyd.db")
	_, err := Open(path, Options{})
	if err == nil || !errors.Is(err, syscall.ENOTDIR) || !strings.Contains(err.Error(), path) {
		t.Fatalf("Open under a file: %v", err)
	}
}

func TestOpenReadOnlyDirectory(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root ignores directory permissions; TestOpenInjectedFileSystemErrors covers the message")
	}
	dir := t.TempDir()
	Must(t, os.Chmod(dir, 0o500))
	t.Cleanup(func() { _ = os.Chmod(dir, 0o700) })
	path := filepath.Join(dir, "replyd.db")
	_, err := Open(path, Options{})
	if err == nil || !errors.Is(err, os.ErrPermission) || !strings.Contains(err.Error(), path) {
		t.Fatalf("Open in a read-only dir: %v", err)
	}
}

func TestOpenInjectedFileSystemErrors(t *testing.T) {
	for _, tc := range []struct {
		errno syscall.Errno
		want  string
	}{
		{syscall.EROFS, "read-only file system"},
		{syscall.EACCES, "must be writable"},
		{syscall.ENOSPC, "no space left"},
	} {
		t.Run(tc.errno.Error(), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "replyd.db")
			open := func(name string, _ int, _ os.FileMode) (*os.File, error) {
				return nil, &os.PathError{Op: "open", Path: name, Err: tc.errno}
			}
			_, err := Open(path, Options{openFile: open})
			if err == nil || !errors.Is(err, tc.errno) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), path) {
				t.Fatalf("Open: %v; want %q naming %s", err, tc.want, path)
			}
		})
	}
}

func TestOpenRejectsForeignAndNewerFiles(t *testing.T) {
	dir := t.TempDir()
	junk := filepath.Join(dir, "junk.db")
	Must(t, os.WriteFile(junk, bytes.Repeat([]byte("x"), 8192), 0o600))
	if _, err := Open(junk, Options{}); err == nil || !strings.Contains(err.Error(), "not a valid bbolt") {
		t.Errorf("Open(junk) = %v", err)
	}

	path := filepath.Join(dir, "new.db")
	db := MustOpenAt(t, path, Options{})
	Must(t, db.bolt.Update(func(tx *boltTx) error {
		return tx.Bucket(bucketMeta).Put(metaSchemaVersion, u64(SchemaVersion+1))
	}))
	Must(t, db.Close())
	if _, err := Open(path, Options{}); err == nil || !strings.Contains(err.Error(), "newer") {
		t.Errorf("Open(newer schema) = %v", err)
	}
}

func TestBackupRestoreRoundTrip(t *testing.T) {
	db, _ := MustOpen(t)
	MustCreateKey(t, db, "k1", t0)
	Must(t, db.SavePrompt(store.PromptVersion{Prompt: "p", Version: "1"}))
	MustAppend(t, db, store.LogEntry{Timestamp: t0, Message: "hello", StreamName: store.StreamInfer, Subject: "u"})
	timing := store.ModelRecord{Node: "box-a", File: "one.gguf", What: store.ModelTiming, Bytes: 7, ModTime: t0, At: t0, Body: []byte(`{"ms":41}`)}
	Must(t, db.PutModelRecord(timing))
	Must(t, db.Check())

	size, err := db.Size()
	Must(t, err)
	var buf bytes.Buffer
	n, err := db.Backup(&buf)
	Must(t, err)
	if n != int64(buf.Len()) || n != size {
		t.Errorf("Backup wrote %d bytes, buffer %d, Size %d", n, buf.Len(), size)
	}

	dir := t.TempDir()
	backup := filepath.Join(dir, "backup.db")
	Must(t, os.WriteFile(backup, buf.Bytes(), 0o600))
	dst := filepath.Join(dir, "restored.db")
	Must(t, os.WriteFile(dst, []byte("old contents"), 0o644))
	Must(t, Restore(backup, dst))
	fi, err := os.Stat(dst)
	Must(t, err)
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("restored mode %o", fi.Mode().Perm())
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".restored.db.restore-*")); len(left) != 0 {
		t.Errorf("temp files left: %v", left)
	}

	r := MustOpenAt(t, dst, Options{})
	Must(t, r.Check())
	if k, err := r.GetKey("k1"); err != nil || k.ClientID != "client-k1" {
		t.Errorf("restored key: %+v, %v", k, err)
	}
	if p, ok, _ := r.CurrentPrompt(); !ok || p.Prompt != "p" {
		t.Errorf("restored prompt: %+v", p)
	}
	if s, _ := r.Stats(t0, t0.Add(time.Second)); s.TotalRequests != 1 {
		t.Errorf("restored stats: %+v", s)
	}
	if rs, err := r.ModelRecords("box-a"); err != nil || len(rs) != 1 || string(rs[0].Body) != string(timing.Body) || !rs[0].ModTime.Equal(t0) {
		t.Errorf("restored model records: %+v, %v", rs, err)
	}
}

func TestRestoreRejectsBadSources(t *testing.T) {
	dir := t.TempDir()
	dst := filepath.Join(dir, "dst.db")
	Must(t, os.WriteFile(dst, []byte("keep me"), 0o600))

	junk := filepath.Join(dir, "junk")
	Must(t, os.WriteFile(junk, bytes.Repeat([]byte{0xff}, 8192), 0o600))

	// A valid bbolt file without our schema.
	foreign := filepath.Join(dir, "foreign.db")
	fdb, err := boltOpen(foreign)
	Must(t, err)
	Must(t, fdb.Update(func(tx *boltTx) error { _, err := tx.CreateBucket([]byte("other")); return err }))
	Must(t, fdb.Close())

	for _, src := range []string{junk, foreign, filepath.Join(dir, "missing.db")} {
		if err := Restore(src, dst); err == nil || !strings.Contains(err.Error(), src) {
			t.Errorf("Restore(%s) = %v; want an error naming the source", src, err)
		}
		if b, _ := os.ReadFile(dst); string(b) != "keep me" {
			t.Fatalf("Restore(%s) touched dst", src)
		}
	}
}

func TestDescribeIOErrorFull(t *testing.T) {
	err := describeIOError(&os.PathError{Op: "write", Path: "/x", Err: syscall.ENOSPC})
	if !errors.Is(err, syscall.ENOSPC) || !errors.Is(err, store.ErrNoSpace) || !strings.Contains(err.Error(), "no space left") {
		t.Errorf("describeIOError(ENOSPC) = %v", err)
	}
}

func TestWriteFailure(t *testing.T) {
	db, _ := MustOpen(t)
	if err := db.WriteFailure(); err != nil {
		t.Fatalf("fresh store: %v", err)
	}
	// A caller's mistake is not a write failure.
	if _, err := db.RevokeKey("unknown", t0); !errors.Is(err, store.ErrNotFound) {
		t.Fatal(err)
	}
	if err := db.WriteFailure(); err != nil {
		t.Fatalf("after ErrNotFound: %v", err)
	}
	// A failed commit is, until the next write succeeds.
	_ = db.noteWrite(&os.PathError{Op: "write", Path: "/x", Err: syscall.ENOSPC})
	if err := db.WriteFailure(); !errors.Is(err, store.ErrNoSpace) {
		t.Fatalf("after ENOSPC: %v", err)
	}
	Must(t, db.AppendLog(store.LogEntry{Message: "m"}))
	if err := db.WriteFailure(); err != nil {
		t.Fatalf("after a good write: %v", err)
	}
}
