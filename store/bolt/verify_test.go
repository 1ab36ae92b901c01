package bolt

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/replyd/replyd/internal/testutil"
	"github.com/replyd/replyd/store"
	"github.com/replyd/replyd/store/storetest"
)

// writeSampleFile fills a data file at path with keys and log entries
// (storetest.FillBulk, in one order) and closes it.
func writeSampleFile(tb testing.TB, path string, keys, logs int) {
	tb.Helper()
	db, err := Open(path, Options{Now: func() time.Time { return t0 }})
	Must(tb, err)
	db.bolt.NoSync = true     // a sample, not a durability test: no fsync per write
	db.bolt.MaxBatchDelay = 0 // nor a wait for other appends
	storetest.FillBulk(tb, db, keys, logs, 400, 1)
	Must(tb, db.Close())
}

// cachedFile builds a data file once per process with write and returns
// its bytes.
type cachedFile struct {
	once  sync.Once
	bytes []byte
}

func (c *cachedFile) get(tb testing.TB, write func(path string)) []byte {
	tb.Helper()
	c.once.Do(func() {
		dir, err := os.MkdirTemp("", "replyd-sample-")
		Must(tb, err)
		defer os.RemoveAll(dir)
		path := filepath.Join(dir, "replyd.db")
		write(path)
		c.bytes, err = os.ReadFile(path)
		Must(tb, err)
	})
	return c.bytes
}

var sample cachedFile

// sampleFile returns the bytes of a data file of about 3 MB (the issue's
// damaged files were cut from one larger than 2,000,000 bytes).
func sampleFile(tb testing.TB) []byte {
	return sample.get(tb, func(path string) { writeSampleFile(tb, path, 300, 6000) })
}

// wantDamaged checks that err is a *DamagedError naming path and saying
// problem and what to do.
func wantDamaged(t *testing.T, err error, path, problem string) {
	t.Helper()
	var d *DamagedError
	if !errors.As(err, &d) || !errors.Is(err, ErrDamaged) {
		t.Fatalf("err = %v, want a DamagedError", err)
	}
	msg := err.Error()
	for _, want := range []string{path, problem, "replyd restore", "docs/operations.md"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q does not say %q", msg, want)
		}
	}
}

// TestOpenRefusesDamagedFiles takes the three damaged files of issue 43
// (truncated to 2,000,000 bytes, 50 random pages overwritten, empty): each
// must be refused by Open, read-only or not, and by VerifyFile with a
// message naming the file, never crash the process (before VerifyFile, the
// truncated file faulted with SIGBUS through bbolt's map and the overwritten
// one panicked in bbolt).
func TestOpenRefusesDamagedFiles(t *testing.T) {
	good := sampleFile(t)
	if len(good) <= 2_000_000 {
		t.Fatalf("the sample file has %d bytes, want more than 2,000,000", len(good))
	}
	m, err := chooseMeta(bytes.NewReader(good), int64(len(good)))
	if err != nil || m == nil {
		t.Fatalf("the sample's meta: %v %v", m, err)
	}
	overwritten := testutil.OverwritePages(good, int(m.hwm), 50, rand.New(rand.NewPCG(43, 50)))
	for _, tc := range []struct {
		name, problem string
		data          []byte
	}{
		{"truncated", "truncated", good[:2_000_000]},
		{"overwritten", "overwritten", overwritten},
		{"empty", "empty (0 bytes)", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "replyd.db")
			Must(t, os.WriteFile(path, tc.data, 0o600))
			wantDamaged(t, VerifyFile(path), path, tc.problem)
			for _, ro := range []bool{true, false} {
				db, err := Open(path, Options{ReadOnly: ro})
				if err == nil {
					db.Close()
				}
				wantDamaged(t, err, path, tc.problem)
			}
			// Refusing changed nothing: the file is as damaged as it was.
			got, err := os.ReadFile(path)
			Must(t, err)
			if len(got) != len(tc.data) {
				t.Errorf("the refused file now has %d bytes, want %d", len(got), len(tc.data))
			}
		})
	}
}

// TestVerifyFileAcceptsGoodFiles: a whole file passes VerifyFile and bbolt's
// own Check, before and after more writes, and a file cut after its last
// page (bbolt grows files ahead of their pages) too.
func TestVerifyFileAcceptsGoodFiles(t *testing.T) {
	path := filepath.Join(t.TempDir(), "replyd.db")
	Must(t, os.WriteFile(path, sampleFile(t), 0o600))
	Must(t, VerifyFile(path))
	db := MustOpenAt(t, path, Options{})
	Must(t, db.Check())
	for i := range 200 {
		_, err := db.RevokeKey(fmt.Sprintf("hash-%05d", i), t0)
		Must(t, err)
	}
	Must(t, db.Close())
	Must(t, VerifyFile(path))
	ro := MustOpenAt(t, path, Options{ReadOnly: true})
	Must(t, ro.Check())
}

// TestOpenVerifiesUnderTheLock: a file a writer holds is not read by the
// check (its pages move as the writer commits): the second Open reports
// ErrLocked as before.
func TestOpenVerifiesUnderTheLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "replyd.db")
	MustOpenAt(t, path, Options{})
	_, err := Open(path, Options{ReadOnly: true, Timeout: 100 * time.Millisecond})
	if !errors.Is(err, store.ErrLocked) {
		t.Fatalf("read-only Open of a held file: %v, want ErrLocked", err)
	}
}

// TestRestoreRefusesDamagedBackup: a truncated backup is refused with what
// is wrong, and the current file is kept.
func TestRestoreRefusesDamagedBackup(t *testing.T) {
	dir := t.TempDir()
	backup, current := filepath.Join(dir, "backup.db"), filepath.Join(dir, "replyd.db")
	good := sampleFile(t)
	Must(t, os.WriteFile(backup, good[:2_000_000], 0o600))
	Must(t, os.WriteFile(current, good, 0o600))
	err := Restore(backup, current)
	if err == nil || !strings.Contains(err.Error(), "truncated") || !strings.Contains(err.Error(), backup) {
		t.Fatalf("Restore(truncated backup) = %v", err)
	}
	Must(t, VerifyFile(current))
}
