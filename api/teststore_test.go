package api

import (
	"context"
	"io"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/replyd/replyd/store"
	"github.com/replyd/replyd/store/bolt"
)

// testStore is the store the api tests run against: the real bbolt store on
// a file in the test's temporary directory (the one store/storetest checks),
// with the faults a test injects in front of a few methods.
type testStore struct {
	*bolt.DB

	mu     sync.Mutex
	faults map[string]error // method name -> the error it returns instead
	// scrubProblem becomes DeleteUser's ScrubProblem (as when PostgreSQL
	// refuses a VACUUM or CHECKPOINT).
	scrubProblem string
	// scopes replaces the stored scopes of a key hash in what GetKey
	// returns (no route changes a key's scopes).
	scopes map[string][]string
}

// faultable are the methods fail can break: the key lookup every tablet
// request makes, a write, the health check and the backup.
var faultable = []string{"GetKey", "CreateKey", "Ping", "Backup"}

// newTestStore opens a fresh store whose clock is now and closes it when tb
// ends.
func newTestStore(tb testing.TB, now func() time.Time) *testStore {
	tb.Helper()
	db, err := bolt.Open(filepath.Join(tb.TempDir(), "replyd.db"), bolt.Options{Now: now})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = db.Close() })
	return &testStore{DB: db, faults: map[string]error{}}
}

// fail makes the named methods (every faultable one when none is named)
// return err; a nil err clears them.
func (s *testStore) fail(err error, methods ...string) {
	if len(methods) == 0 {
		methods = faultable
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range methods {
		if err == nil {
			delete(s.faults, m)
		} else {
			s.faults[m] = err
		}
	}
}

func (s *testStore) fault(method string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.faults[method]
}

func (s *testStore) GetKey(hash string) (store.APIKey, error) {
	if err := s.fault("GetKey"); err != nil {
		return store.APIKey{}, err
	}
	k, err := s.DB.GetKey(hash)
	s.mu.Lock()
	if sc, ok := s.scopes[hash]; ok && err == nil {
		k.Scopes = sc
	}
	s.mu.Unlock()
	return k, err
}

// scopesOverride makes GetKey answer scopes for hash.
func (s *testStore) scopesOverride(hash string, scopes []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.scopes == nil {
		s.scopes = map[string][]string{}
	}
	s.scopes[hash] = scopes
}

func (s *testStore) CreateKey(k store.APIKey) error {
	if err := s.fault("CreateKey"); err != nil {
		return err
	}
	return s.DB.CreateKey(k)
}

func (s *testStore) Ping(ctx context.Context) error {
	if err := s.fault("Ping"); err != nil {
		return err
	}
	return s.DB.Ping(ctx)
}

func (s *testStore) Backup(w io.Writer) (int64, error) {
	if err := s.fault("Backup"); err != nil {
		return 0, err
	}
	return s.DB.Backup(w)
}

func (s *testStore) DeleteUser(subject string) (store.UserDeletion, error) {
	d, err := s.DB.DeleteUser(subject)
	s.mu.Lock()
	d.ScrubProblem = s.scrubProblem
	s.mu.Unlock()
	return d, err
}

// logsCopy returns every log entry, oldest first.
func (s *testStore) logsCopy() []store.LogEntry {
	var out []store.LogEntry
	err := s.Snapshot(func(snap store.Snapshot) error {
		for e, err := range snap.Logs {
			if err != nil {
				return err
			}
			out = append(out, e)
		}
		return nil
	})
	if err != nil {
		panic(err) // the file is the test's own
	}
	return out
}

// logCount returns the number of log entries.
func (s *testStore) logCount() int { return len(s.logsCopy()) }

// snapshot returns everything but the logs.
func (s *testStore) snapshot(tb testing.TB) store.Snapshot {
	tb.Helper()
	var out store.Snapshot
	if err := s.Snapshot(func(snap store.Snapshot) error { out = snap; return nil }); err != nil {
		tb.Fatal(err)
	}
	out.Logs = nil
	return out
}
