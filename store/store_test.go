package store

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
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
func MustCreateKey(tb testing.TB, db *DB, hash string, at time.Time) APIKey {
	tb.Helper()
	k := APIKey{Hash: hash, ClientID: "client-" + hash, Status: StatusActive, Scopes: []string{"infer"}, RateLimitPerMinute: 60, CreatedAt: at}
	Must(tb, db.CreateKey(k))
	return k
}

// MustAppend appends a log entry.
func MustAppend(tb testing.TB, db *DB, e LogEntry) {
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
	if !errors.Is(err, ErrLocked) {
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
	if err := Restore(backup, path); !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "stop the running replyd") {
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

func TestMixedConcurrentUse(t *testing.T) {
	db, _ := MustOpen(t)
	MustCreateKey(t, db, "k", t0)
	var wg sync.WaitGroup
	errs := make(chan error, 400)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 10 {
				at := t0.Add(time.Duration(g*10+i) * time.Minute)
				errs <- db.TouchKey("k", at)
				errs <- db.AppendLog(LogEntry{Timestamp: at, StreamName: StreamInfer, Subject: "k"})
				_, err := db.Stats(t0, t0.Add(24*time.Hour))
				errs <- err
				_, err = db.Logs(LogQuery{Limit: 5})
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		Must(t, err)
	}
	k, err := db.GetKey("k")
	Must(t, err)
	if want := t0.Add(79 * time.Minute); !k.LastUsedAt.Equal(want) {
		t.Errorf("LastUsedAt = %v, want the latest touch %v", k.LastUsedAt, want)
	}
	if s, _ := db.Stats(t0, t0.Add(24*time.Hour)); s.TotalRequests != 80 {
		t.Errorf("TotalRequests = %d, want 80", s.TotalRequests)
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

func TestKeys(t *testing.T) {
	db, _ := MustOpen(t)
	a := MustCreateKey(t, db, "aaaa", t0)
	b := MustCreateKey(t, db, "bbbb", t0.Add(time.Minute))
	c := MustCreateKey(t, db, "cccc", t0.Add(2*time.Minute))

	if err := db.CreateKey(APIKey{Hash: "bbbb"}); !errors.Is(err, ErrExists) {
		t.Errorf("duplicate CreateKey: %v, want ErrExists", err)
	}
	if err := db.CreateKey(APIKey{}); err == nil {
		t.Error("CreateKey with empty hash succeeded")
	}
	got, err := db.GetKey("aaaa")
	Must(t, err)
	if diff := cmp.Diff(a, got); diff != "" {
		t.Errorf("GetKey (-want +got):\n%s", diff)
	}
	if _, err := db.GetKey("nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("GetKey(unknown): %v, want ErrNotFound", err)
	}

	hashes := func(ks []APIKey) []string {
		out := []string{}
		for _, k := range ks {
			out = append(out, k.Hash)
		}
		return out
	}
	list := func(limit int, rev bool) []string {
		t.Helper()
		ks, err := db.ListKeys(limit, rev)
		Must(t, err)
		return hashes(ks)
	}
	if diff := cmp.Diff([]string{"cccc", "bbbb", "aaaa"}, list(0, false)); diff != "" {
		t.Errorf("ListKeys newest first (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"cccc", "bbbb"}, list(2, false)); diff != "" {
		t.Errorf("ListKeys limit 2 (-want +got):\n%s", diff)
	}

	revokedAt := t0.Add(time.Hour)
	r, err := db.RevokeKey("bbbb", revokedAt)
	Must(t, err)
	if r.Status != StatusRevoked || !r.RevokedAt.Equal(revokedAt) {
		t.Errorf("RevokeKey = %+v", r)
	}
	// Idempotent: the first RevokedAt stays.
	r2, err := db.RevokeKey("bbbb", revokedAt.Add(time.Hour))
	Must(t, err)
	if !r2.RevokedAt.Equal(revokedAt) || r2.Status != StatusRevoked {
		t.Errorf("second RevokeKey changed the record: %+v", r2)
	}
	if _, err := db.RevokeKey("nope", revokedAt); !errors.Is(err, ErrNotFound) {
		t.Errorf("RevokeKey(unknown): %v, want ErrNotFound", err)
	}
	if diff := cmp.Diff([]string{"cccc", "aaaa"}, list(0, false)); diff != "" {
		t.Errorf("ListKeys without revoked (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"cccc", "bbbb", "aaaa"}, list(0, true)); diff != "" {
		t.Errorf("ListKeys with revoked (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"cccc", "aaaa"}, list(2, false)); diff != "" {
		t.Errorf("ListKeys limit counts only returned keys (-want +got):\n%s", diff)
	}
	_ = b
	_ = c
}

func TestCreateKeyDefaults(t *testing.T) {
	db, _ := MustOpen(t)
	Must(t, db.CreateKey(APIKey{Hash: "h"}))
	k, err := db.GetKey("h")
	Must(t, err)
	if !k.CreatedAt.Equal(t0) || k.Status != StatusActive {
		t.Errorf("defaults: %+v", k)
	}
}

func TestTouchKeyThrottled(t *testing.T) {
	db, _ := MustOpen(t)
	MustCreateKey(t, db, "k", t0)
	lastUsed := func() time.Time {
		t.Helper()
		k, err := db.GetKey("k")
		Must(t, err)
		return k.LastUsedAt
	}
	Must(t, db.TouchKey("k", t0.Add(time.Second)))
	if got := lastUsed(); !got.Equal(t0.Add(time.Second)) {
		t.Fatalf("first touch: LastUsedAt = %v", got)
	}
	// Within a minute of the last write nothing is written.
	Must(t, db.TouchKey("k", t0.Add(50*time.Second)))
	if got := lastUsed(); !got.Equal(t0.Add(time.Second)) {
		t.Errorf("throttled touch wrote: LastUsedAt = %v", got)
	}
	Must(t, db.TouchKey("k", t0.Add(61*time.Second)))
	if got := lastUsed(); !got.Equal(t0.Add(61 * time.Second)) {
		t.Errorf("touch after a minute: LastUsedAt = %v", got)
	}
	if err := db.TouchKey("unknown", t0); !errors.Is(err, ErrNotFound) {
		t.Errorf("TouchKey(unknown) = %v, want ErrNotFound", err)
	}
	// A failed touch is not remembered: a later key with that hash is touched.
	MustCreateKey(t, db, "unknown", t0)
	Must(t, db.TouchKey("unknown", t0.Add(time.Second)))
	if k, _ := db.GetKey("unknown"); !k.LastUsedAt.Equal(t0.Add(time.Second)) {
		t.Errorf("touch after failed touch: %v", k.LastUsedAt)
	}
}

func TestAdminKeyHash(t *testing.T) {
	db, _ := MustOpen(t)
	if h, err := db.AdminKeyHash(); err != nil || h != "" {
		t.Fatalf("empty store: %q, %v", h, err)
	}
	Must(t, db.SetAdminKeyHash("h1"))
	Must(t, db.SetAdminKeyHash("h2"))
	if h, _ := db.AdminKeyHash(); h != "h2" {
		t.Errorf("AdminKeyHash = %q, want h2", h)
	}
	Must(t, db.SetAdminKeyHash(""))
	if h, _ := db.AdminKeyHash(); h != "" {
		t.Errorf("after clearing: %q", h)
	}
}

func TestPrompts(t *testing.T) {
	db, clk := MustOpen(t)
	if _, ok, err := db.CurrentPrompt(); ok || err != nil {
		t.Fatalf("CurrentPrompt on empty store: ok=%v err=%v", ok, err)
	}
	if v, _ := db.NextPromptVersion(); v != "1" {
		t.Errorf("NextPromptVersion empty = %q, want 1", v)
	}
	Must(t, db.SavePrompt(PromptVersion{Prompt: "one", Version: "1"}))
	clk.Add(time.Minute)
	Must(t, db.SavePrompt(PromptVersion{Prompt: "nine", Version: "9"}))
	clk.Add(time.Minute)
	Must(t, db.SavePrompt(PromptVersion{Prompt: "beta", Version: "beta"}))
	clk.Add(time.Minute)
	Must(t, db.SavePrompt(PromptVersion{Prompt: "three", Version: "3"}))

	if err := db.SavePrompt(PromptVersion{Prompt: "again", Version: "9"}); !errors.Is(err, ErrExists) {
		t.Errorf("duplicate version: %v, want ErrExists", err)
	}
	if err := db.SavePrompt(PromptVersion{Prompt: "x"}); err == nil {
		t.Error("SavePrompt without version succeeded")
	}
	if v, _ := db.NextPromptVersion(); v != "10" {
		t.Errorf("NextPromptVersion = %q, want 10", v)
	}
	cur, ok, err := db.CurrentPrompt()
	Must(t, err)
	want := PromptVersion{Prompt: "three", Version: "3", CreatedAt: t0.Add(3 * time.Minute)}
	if diff := cmp.Diff(want, cur); !ok || diff != "" {
		t.Errorf("CurrentPrompt ok=%v (-want +got):\n%s", ok, diff)
	}
	hist, err := db.PromptHistory(0)
	Must(t, err)
	var versions []string
	for _, p := range hist {
		versions = append(versions, p.Version)
	}
	if diff := cmp.Diff([]string{"3", "beta", "9", "1"}, versions); diff != "" {
		t.Errorf("PromptHistory (-want +got):\n%s", diff)
	}
	hist, _ = db.PromptHistory(2)
	if len(hist) != 2 || hist[1].Version != "beta" {
		t.Errorf("PromptHistory(2) = %+v", hist)
	}
}

func TestOTP(t *testing.T) {
	db, _ := MustOpen(t)
	exp := t0.Add(5 * time.Minute)
	use := func(scope, hash string, now time.Time, want bool) {
		t.Helper()
		got, err := db.UseOTP(scope, hash, now)
		Must(t, err)
		if got != want {
			t.Errorf("UseOTP(%q, %q) = %v, want %v", scope, hash, got, want)
		}
	}
	use("10.0.0.1", "x", t0, false)

	// Single use.
	Must(t, db.SaveOTP("10.0.0.1", "good", t0, exp))
	use("10.0.0.1", "bad", t0, false)
	use("10.0.0.1", "good", t0, true)
	use("10.0.0.1", "good", t0, false)

	// Wrong guesses write nothing and never burn the code.
	Must(t, db.SaveOTP("10.0.0.1", "good", t0, exp))
	st := db.bolt.Stats()
	writes := st.TxStats.GetWrite()
	for i := 0; i < 50; i++ {
		use("10.0.0.1", fmt.Sprintf("bad%d", i), t0, false)
	}
	st = db.bolt.Stats()
	if w := st.TxStats.GetWrite(); w != writes {
		t.Errorf("50 wrong guesses wrote %d pages", w-writes)
	}
	use("10.0.0.1", "good", t0, true)

	// Scopes are separate: a code is spent only from its own scope, and a
	// new code for one scope leaves the others alone.
	Must(t, db.SaveOTP("10.0.0.1", "one", t0, exp))
	Must(t, db.SaveOTP("10.0.0.2", "two", t0, exp))
	use("10.0.0.2", "one", t0, false)
	Must(t, db.SaveOTP("10.0.0.2", "two-again", t0.Add(time.Minute), exp))
	use("10.0.0.2", "two", t0, false) // replaced
	use("10.0.0.1", "one", t0, true)
	use("10.0.0.2", "two-again", t0, true)

	// Expiry is exclusive.
	Must(t, db.SaveOTP("s", "good", t0, exp))
	use("s", "good", exp, false)
	use("s", "good", exp.Add(-time.Nanosecond), true)

	// Delete and prune.
	Must(t, db.SaveOTP("a", "h", t0, exp))
	Must(t, db.SaveOTP("b", "h", t0, t0.Add(time.Minute)))
	Must(t, db.SaveOTP("c", "h", t0, exp))
	Must(t, db.DeleteOTP("c"))
	Must(t, db.DeleteOTP("never-existed"))
	use("c", "h", t0, false)
	n, err := db.PruneOTPs(t0.Add(2 * time.Minute))
	Must(t, err)
	if n != 1 { // b; a is still valid; the others were spent or deleted
		t.Errorf("pruned %d codes, want 1", n)
	}
	use("a", "h", t0, true)
	use("b", "h", t0, false)
	if err := db.SaveOTP("", "h", t0, exp); err == nil {
		t.Error("empty scope accepted")
	}
}

func TestUseTOTPStep(t *testing.T) {
	db, _ := MustOpen(t)
	for _, tc := range []struct {
		step int64
		want bool
	}{{100, true}, {100, false}, {99, false}, {101, true}, {103, true}, {102, false}} {
		got, err := db.UseTOTPStep(tc.step)
		Must(t, err)
		if got != tc.want {
			t.Errorf("UseTOTPStep(%d) = %v, want %v", tc.step, got, tc.want)
		}
	}
}

func TestSessions(t *testing.T) {
	db, _ := MustOpen(t)
	exp := t0.Add(time.Hour)
	Must(t, db.CreateSession("s1", exp))
	Must(t, db.CreateSession("s2", t0.Add(time.Minute)))
	if err := db.CreateSession("s1", exp); !errors.Is(err, ErrExists) {
		t.Errorf("duplicate session: %v", err)
	}
	valid := func(h string, now time.Time) bool {
		t.Helper()
		ok, err := db.SessionValid(h, now)
		Must(t, err)
		return ok
	}
	if !valid("s1", t0) || !valid("s1", exp.Add(-time.Nanosecond)) {
		t.Error("s1 not valid before expiry")
	}
	if valid("s1", exp) || valid("nope", t0) {
		t.Error("expired or unknown session valid")
	}
	n, err := db.PruneSessions(t0.Add(2 * time.Minute))
	Must(t, err)
	if n != 1 {
		t.Errorf("PruneSessions = %d, want 1", n)
	}
	if valid("s2", t0) {
		t.Error("pruned session still valid")
	}
	Must(t, db.DeleteSession("s1"))
	Must(t, db.DeleteSession("s1"))
	if valid("s1", t0) {
		t.Error("deleted session still valid")
	}
}

func TestLogs(t *testing.T) {
	db, clk := MustOpen(t)
	for i := range 10 {
		level, stream := LevelInfo, StreamInfer
		if i%3 == 0 {
			level = LevelError
		}
		if i%2 == 0 {
			stream = StreamAdmin
		}
		MustAppend(t, db, LogEntry{Timestamp: t0.Add(time.Duration(i) * time.Second), Level: level, Message: fmt.Sprint(i), StreamName: stream})
	}
	// Two entries in the same nanosecond keep append order (newest first).
	MustAppend(t, db, LogEntry{Timestamp: t0.Add(20 * time.Second), Message: "a"})
	MustAppend(t, db, LogEntry{Timestamp: t0.Add(20 * time.Second), Message: "b"})
	// A zero timestamp takes the clock.
	clk.Add(time.Hour)
	MustAppend(t, db, LogEntry{Message: "clock"})

	msgs := func(q LogQuery) []string {
		t.Helper()
		es, err := db.Logs(q)
		Must(t, err)
		out := []string{}
		for _, e := range es {
			out = append(out, e.Message)
		}
		return out
	}
	for _, tc := range []struct {
		name string
		q    LogQuery
		want []string
	}{
		{"all", LogQuery{}, []string{"clock", "b", "a", "9", "8", "7", "6", "5", "4", "3", "2", "1", "0"}},
		{"limit", LogQuery{Limit: 3}, []string{"clock", "b", "a"}},
		{"since inclusive", LogQuery{Since: t0.Add(8 * time.Second), Limit: 100}, []string{"clock", "b", "a", "9", "8"}},
		{"since and level", LogQuery{Since: t0.Add(3 * time.Second), Level: LevelError}, []string{"9", "6", "3"}},
		{"stream", LogQuery{Stream: StreamInfer, Limit: 2}, []string{"9", "7"}},
		{"level and stream", LogQuery{Level: LevelError, Stream: StreamAdmin}, []string{"6", "0"}},
		{"future since", LogQuery{Since: t0.Add(2 * time.Hour)}, []string{}},
	} {
		if diff := cmp.Diff(tc.want, msgs(tc.q)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, diff)
		}
	}
	es, err := db.Logs(LogQuery{Limit: 1})
	Must(t, err)
	if !es[0].Timestamp.Equal(t0.Add(time.Hour)) {
		t.Errorf("clock timestamp = %v", es[0].Timestamp)
	}
}

func TestLogEntryRoundTrip(t *testing.T) {
	db, _ := MustOpen(t)
	e := LogEntry{Timestamp: t0.Add(123 * time.Nanosecond), Level: LevelWarn, Message: "m", ResourceType: ResourceAPIKey, ResourceID: "rid", StreamName: StreamInfer, Subject: "subj", Status: 502, LatencyMS: 1234}
	MustAppend(t, db, e)
	got, err := db.Logs(LogQuery{})
	Must(t, err)
	if diff := cmp.Diff([]LogEntry{e}, got); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
}

func TestStats(t *testing.T) {
	db, _ := MustOpen(t)
	add := func(d time.Duration, stream, subject string) {
		MustAppend(t, db, LogEntry{Timestamp: t0.Add(d), StreamName: stream, Subject: subject})
	}
	add(-time.Second, StreamInfer, "u0") // before the window
	add(0, StreamInfer, "u1")            // at since: counted
	add(time.Minute, StreamInfer, "u2")
	add(2*time.Minute, StreamInfer, "u1")
	add(3*time.Minute, StreamAdmin, "u3")  // not infer
	add(4*time.Minute, StreamInfer, "")    // counted, no subject
	add(5*time.Minute, StreamInfer, "u1")  // u1 again, in the second bucket
	add(10*time.Minute, StreamInfer, "u4") // at until: not counted

	s, err := db.Stats(t0, t0.Add(10*time.Minute))
	Must(t, err)
	if diff := cmp.Diff(Stats{TotalRequests: 5, ActiveUsers: 2}, s); diff != "" {
		t.Errorf("Stats (-want +got):\n%s", diff)
	}
	if s, _ := db.Stats(t0, t0); s != (Stats{}) {
		t.Errorf("empty window: %+v", s)
	}

	series, err := db.StatsSeries(t0, t0.Add(10*time.Minute), 3*time.Minute)
	Must(t, err)
	want := []StatsBucket{
		{Start: t0, TotalRequests: 3, ActiveUsers: 2},
		{Start: t0.Add(3 * time.Minute), TotalRequests: 2, ActiveUsers: 1},
		{Start: t0.Add(6 * time.Minute)},
		{Start: t0.Add(9 * time.Minute)},
	}
	if diff := cmp.Diff(want, series); diff != "" {
		t.Errorf("StatsSeries (-want +got):\n%s", diff)
	}
	if _, err := db.StatsSeries(t0, t0.Add(time.Hour), 0); err == nil {
		t.Error("zero bucket accepted")
	}
	if _, err := db.StatsSeries(t0, t0.Add(time.Hour), time.Millisecond); err == nil {
		t.Error("too many buckets accepted")
	}

	// Pruning removes entries from the statistics too.
	n, err := db.PruneLogs(t0.Add(90*time.Second), 0)
	Must(t, err)
	if n != 3 {
		t.Errorf("PruneLogs = %d, want 3", n)
	}
	s, _ = db.Stats(time.Time{}, t0.Add(time.Hour))
	if diff := cmp.Diff(Stats{TotalRequests: 4, ActiveUsers: 2}, s); diff != "" {
		t.Errorf("Stats after prune (-want +got):\n%s", diff)
	}
}

func TestPruneLogsInBatches(t *testing.T) {
	db, _ := MustOpen(t)
	for i := range 25 {
		MustAppend(t, db, LogEntry{Timestamp: t0.Add(time.Duration(i) * time.Second), Message: fmt.Sprint(i), StreamName: StreamInfer, Subject: "u"})
	}
	before := t0.Add(20 * time.Second)
	var calls []int
	for {
		n, err := db.PruneLogs(before, 7)
		Must(t, err)
		calls = append(calls, n)
		if n < 7 {
			break
		}
	}
	if diff := cmp.Diff([]int{7, 7, 6}, calls); diff != "" {
		t.Errorf("batches (-want +got):\n%s", diff)
	}
	es, _ := db.Logs(LogQuery{})
	if len(es) != 5 || es[4].Message != "20" {
		t.Errorf("left after prune: %+v", es)
	}
	if s, _ := db.Stats(t0, t0.Add(time.Hour)); s.TotalRequests != 5 {
		t.Errorf("Stats after prune: %+v", s)
	}
}

func TestAppendLogConcurrent(t *testing.T) {
	db, _ := MustOpen(t)
	const writers, each = 50, 4
	var wg sync.WaitGroup
	errs := make(chan error, writers*each)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				errs <- db.AppendLog(LogEntry{Timestamp: t0, Message: fmt.Sprintf("%d-%d", w, i), StreamName: StreamInfer, Subject: fmt.Sprint(w)})
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		Must(t, err)
	}
	es, err := db.Logs(LogQuery{})
	Must(t, err)
	seen := map[string]bool{}
	for _, e := range es {
		seen[e.Message] = true
	}
	for w := range writers {
		for i := range each {
			if !seen[fmt.Sprintf("%d-%d", w, i)] {
				t.Errorf("entry %d-%d missing", w, i)
			}
		}
	}
	if len(es) != writers*each {
		t.Errorf("%d entries, want %d", len(es), writers*each)
	}
	s, _ := db.Stats(t0, t0.Add(time.Second))
	if s != (Stats{TotalRequests: writers * each, ActiveUsers: writers}) {
		t.Errorf("Stats = %+v", s)
	}
}

func TestBackupRestoreRoundTrip(t *testing.T) {
	db, _ := MustOpen(t)
	MustCreateKey(t, db, "k1", t0)
	Must(t, db.SavePrompt(PromptVersion{Prompt: "p", Version: "1"}))
	MustAppend(t, db, LogEntry{Timestamp: t0, Message: "hello", StreamName: StreamInfer, Subject: "u"})
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
	if !errors.Is(err, syscall.ENOSPC) || !errors.Is(err, ErrNoSpace) || !strings.Contains(err.Error(), "no space left") {
		t.Errorf("describeIOError(ENOSPC) = %v", err)
	}
}

func TestWriteFailure(t *testing.T) {
	db, _ := MustOpen(t)
	if err := db.WriteFailure(); err != nil {
		t.Fatalf("fresh store: %v", err)
	}
	// A caller's mistake is not a write failure.
	if _, err := db.RevokeKey("unknown", t0); !errors.Is(err, ErrNotFound) {
		t.Fatal(err)
	}
	if err := db.WriteFailure(); err != nil {
		t.Fatalf("after ErrNotFound: %v", err)
	}
	// A failed commit is, until the next write succeeds.
	_ = db.noteWrite(&os.PathError{Op: "write", Path: "/x", Err: syscall.ENOSPC})
	if err := db.WriteFailure(); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("after ENOSPC: %v", err)
	}
	Must(t, db.AppendLog(LogEntry{Message: "m"}))
	if err := db.WriteFailure(); err != nil {
		t.Fatalf("after a good write: %v", err)
	}
}
