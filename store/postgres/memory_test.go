package postgres_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/replyd/replyd/internal/pgtest"
	"github.com/replyd/replyd/store/postgres"
	"github.com/replyd/replyd/store/storetest"
)

// filesHolding returns the files under dir whose bytes contain b.
func filesHolding(t *testing.T, dir string, b []byte) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		if os.IsNotExist(err) { // unlinked by a checkpoint meanwhile
			return nil
		}
		if err != nil {
			return err
		}
		if bytes.Contains(data, b) {
			out = append(out, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestDeleteUserLeavesNoKeyOnDisk: after DELETE /v1/admin/users/{user}
// returns on PostgreSQL, no relation file of the database (tables, their
// TOAST, indexes, the statistics catalog) holds the user's encryption key:
// the rows are gone and the space they took has been cleared and written
// out. Several users, the deleted ones among them, updated often (each
// update leaves an old row version with the key), and statistics gathered
// as autovacuum would gather them. The write-ahead log still holds the key
// until its segments are recycled (README says how an operator forces it).
func TestDeleteUserLeavesNoKeyOnDisk(t *testing.T) {
	srv := pgtest.Start(t)
	url := srv.NewDatabase(t)
	clk := storetest.NewClock(storetest.T0)
	s := mustOpen(t, url, postgres.Options{Now: clk.Now})

	const users = 12
	for u := range users {
		subject := fmt.Sprintf("user-%02d", u)
		for i := range 4 {
			id := fmt.Sprintf("inf-%02d-%d", u, i)
			storetest.MustInfer(t, s, storetest.Inf{At: time.Duration(u*10+i) * time.Second, Key: "k", Subject: subject, ID: id,
				Version: "1", Cands: []string{"Yes please."}, Partner: "Tea?"})
			if _, err := s.SetOutcome(id, storetest.Spoken(1, 11, storetest.T0), "Yes please."); err != nil {
				t.Fatal(err)
			}
		}
	}
	exec(t, url, "ANALYZE")
	exec(t, url, "CHECKPOINT")
	var dbOID uint32
	query(t, url, "SELECT oid FROM pg_database WHERE datname = current_database()", &dbOID)
	base := filepath.Join(srv.DataDir(), "base", fmt.Sprint(dbOID))
	keyOf := func(subject string) []byte {
		var k []byte
		query(t, url, "SELECT key FROM memory_users WHERE subject = '"+subject+"'", &k)
		if len(k) != 32 {
			t.Fatalf("%s's key has %d bytes", subject, len(k))
		}
		return k
	}
	// The middle of the table, and its newest row (the lowest address of
	// its page, which compaction alone leaves in the free space).
	for _, victim := range []string{"user-05", fmt.Sprintf("user-%02d", users-1)} {
		key, other := keyOf(victim), keyOf("user-02")
		if len(filesHolding(t, base, key)) == 0 {
			t.Fatalf("%s's key is in no relation file before the deletion: the search cannot see it", victim)
		}
		if _, err := s.DeleteUser(victim); err != nil {
			t.Fatal(err)
		}
		if files := filesHolding(t, base, key); len(files) > 0 {
			t.Errorf("after deleting %s its key is still on disk in %v", victim, files)
		}
		if len(filesHolding(t, base, other)) == 0 {
			t.Errorf("after deleting %s another user's key is on disk no more: the search is broken", victim)
		}
		t.Logf("%s: the write-ahead log still holds the key in %d segment(s)", victim, len(filesHolding(t, filepath.Join(srv.DataDir(), "pg_wal"), key)))
	}
}
