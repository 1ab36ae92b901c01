package postgres_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
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
// until its segment is removed: docs/clustering.md's way to force that (wal_recycle
// off, pg_switch_wal, CHECKPOINT) leaves no copy in pg_wal either.
func TestDeleteUserLeavesNoKeyOnDisk(t *testing.T) {
	srv := pgtest.StartWith(t, pgtest.Options{Settings: map[string]string{"wal_recycle": "off"}})
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
	wal := filepath.Join(srv.DataDir(), "pg_wal")
	var deleted [][]byte
	for _, victim := range []string{"user-05", fmt.Sprintf("user-%02d", users-1)} {
		key, other := keyOf(victim), keyOf("user-02")
		deleted = append(deleted, key)
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
		if len(filesHolding(t, wal, key)) == 0 {
			t.Errorf("the write-ahead log holds %s's key no more before it was switched: the search cannot see it", victim)
		}
	}
	// What docs/clustering.md tells the operator to run once the user is deleted.
	var lsn string
	query(t, url, "SELECT pg_switch_wal()::text", &lsn)
	exec(t, url, "CHECKPOINT")
	for i, key := range deleted {
		if files := filesHolding(t, wal, key); len(files) > 0 {
			t.Errorf("deleted key %d is in the write-ahead log after pg_switch_wal and CHECKPOINT: %v", i, files)
		}
	}
}

// TestDeleteUserAsAnOrdinaryUser: replyd's own database user (the owner of
// its tables, not a superuser, as docs/clustering.md sets it up) may run the VACUUM
// FULL; CHECKPOINT needs the pg_checkpoint role, and without it the
// deletion still succeeds and says what is left undone.
func TestDeleteUserAsAnOrdinaryUser(t *testing.T) {
	srv := pgtest.Start(t)
	url := srv.NewDatabase(t)
	role := "replyd_app"
	exec(t, url, "CREATE ROLE "+role+" LOGIN")
	var db string
	query(t, url, "SELECT current_database()", &db)
	exec(t, url, "ALTER DATABASE "+db+" OWNER TO "+role)
	clk := storetest.NewClock(storetest.T0)
	s := mustOpen(t, strings.Replace(url, "postgres@", role+"@", 1), postgres.Options{Now: clk.Now})
	remember := func(subject string) {
		storetest.MustInfer(t, s, storetest.Inf{Key: "k", Subject: subject, ID: "inf-" + subject, Version: "1", Cands: []string{"Yes."}, Partner: "Tea?"})
		if _, err := s.SetOutcome("inf-"+subject, storetest.Spoken(1, 4, storetest.T0), "Yes."); err != nil {
			t.Fatal(err)
		}
	}
	remember("a")
	remember("b")
	d, err := s.DeleteUser("a")
	if err != nil || !d.Key {
		t.Fatalf("DeleteUser without pg_checkpoint: %+v, %v", d, err)
	}
	if !strings.Contains(d.ScrubProblem, "pg_checkpoint") || strings.Contains(d.ScrubProblem, "VACUUM") {
		t.Errorf("ScrubProblem = %q; want only the CHECKPOINT named, with pg_checkpoint", d.ScrubProblem)
	}
	exec(t, url, "GRANT pg_checkpoint TO "+role)
	if d, err := s.DeleteUser("b"); err != nil || d.ScrubProblem != "" {
		t.Errorf("DeleteUser with pg_checkpoint: %+v, %v; want no problem", d, err)
	}
}
