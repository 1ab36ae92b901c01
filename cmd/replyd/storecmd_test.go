package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/replyd/replyd/internal/pgtest"
	"github.com/replyd/replyd/store"
	"github.com/replyd/replyd/store/bolt"
	"github.com/replyd/replyd/store/postgres"
	"github.com/replyd/replyd/store/storetest"
)

// runCmd runs replyd with args and env and returns its exit code and output.
func runCmd(t *testing.T, env map[string]string, args ...string) (int, string) {
	t.Helper()
	var out bytes.Buffer
	code := run(context.Background(), args, envMap(env), &out, &out)
	return code, out.String()
}

// TestStoreMigrate copies a bbolt file holding some of everything into
// PostgreSQL, checks the copy, shows that running it again changes nothing,
// that a database holding other data is refused without --force and
// replaced with it.
func TestStoreMigrate(t *testing.T) {
	file := filepath.Join(t.TempDir(), "replyd.db")
	clk := storetest.NewClock(storetest.T0)
	src, err := bolt.Open(file, bolt.Options{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	storetest.Fill(t, src)
	srv := pgtest.Start(t)
	url := srv.NewDatabase(t)
	// A running replyd holds the file: refused.
	code, out := runCmd(t, nil, "store", "migrate", "--from", file, "--to", url)
	if code != 1 || !strings.Contains(out, "stop it first") {
		t.Fatalf("migrate from a held file: %d %s", code, out)
	}
	src.Close()

	code, out = runCmd(t, nil, "store", "migrate", "--from", file, "--to", url)
	if code != 0 || !strings.Contains(out, "copied 4 keys, 2 prompt versions, 2 sessions, 34 log entries, 2 outcomes, 1 remembering users and 5 model choices, timings and comparisons") || !strings.Contains(out, "checked the copy") {
		t.Fatalf("migrate: %d %s", code, out)
	}
	src = reopen(t, file)
	dst, err := postgres.Open(context.Background(), url, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	storetest.SameData(t, src, dst)
	src.Close()

	// Idempotent: the same copy again changes nothing.
	code, out = runCmd(t, nil, "store", "migrate", "--from", file, "--to", url)
	if code != 0 || !strings.Contains(out, "nothing to do") {
		t.Fatalf("second migrate: %d %s", code, out)
	}
	// The cluster moved on: refused without --force, replaced with it.
	storetest.MustAppend(t, dst, store.LogEntry{Message: "written by a box after the move"})
	code, out = runCmd(t, nil, "store", "migrate", "--from", file, "--to", url)
	if code != 1 || !strings.Contains(out, "add --force") {
		t.Fatalf("migrate onto other data: %d %s", code, out)
	}
	if es, _ := dst.Logs(store.LogQuery{Limit: 1}); len(es) != 1 || es[0].Message != "written by a box after the move" {
		t.Fatalf("a refused migrate changed the target: %+v", es)
	}
	code, out = runCmd(t, nil, "store", "migrate", "--from", file, "--to", url, "--force")
	if code != 0 || !strings.Contains(out, "copied 4 keys") {
		t.Fatalf("migrate --force: %d %s", code, out)
	}
	src = reopen(t, file)
	storetest.SameData(t, src, dst)

	for _, args := range [][]string{
		{"store", "migrate", "--from", file},
		{"store", "migrate", "--from", file, "--to", "/tmp/x.db"},
		{"store", "migrate", "--from", filepath.Join(t.TempDir(), "none.db"), "--to", url},
		{"store"},
	} {
		if code, out := runCmd(t, nil, args...); code == 0 {
			t.Errorf("%q succeeded: %s", args, out)
		}
	}
}

func reopen(t *testing.T, file string) *bolt.DB {
	t.Helper()
	db, err := bolt.Open(file, bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// TestPostgresBackupRestoreCheck: on a PostgreSQL store, `replyd backup`
// runs pg_dump (a custom-format dump pg_restore reads back), and restore
// and check explain what to use instead.
func TestPostgresBackupRestoreCheck(t *testing.T) {
	srv := pgtest.Start(t)
	url := srv.NewDatabase(t)
	s, err := postgres.Open(context.Background(), url, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	storetest.Fill(t, s)
	s.Close()
	env := map[string]string{"REPLYD_STORE_URL": url}
	out := filepath.Join(t.TempDir(), "replyd.dump")
	if findPGDump() == "" {
		t.Fatal("pg_dump is missing although PostgreSQL is installed")
	}
	code, msg := runCmd(t, env, "backup", "--out", out)
	if code != 0 || !strings.Contains(msg, "pg_dump wrote") {
		t.Fatalf("backup: %d %s", code, msg)
	}
	list, err := exec.Command(filepath.Join(filepath.Dir(findPGDump()), "pg_restore"), "--list", out).CombinedOutput()
	if err != nil || !strings.Contains(string(list), "TABLE DATA public api_keys") || !strings.Contains(string(list), "TABLE DATA public logs") {
		t.Errorf("pg_restore --list: %v\n%s", err, list)
	}
	if _, err := os.Stat(out + ".partial"); !os.IsNotExist(err) {
		t.Errorf("partial dump left behind: %v", err)
	}
	if code, msg := runCmd(t, env, "restore", out); code != 1 || !strings.Contains(msg, "pg_restore") {
		t.Errorf("restore: %d %s", code, msg)
	}
	if code, msg := runCmd(t, env, "check"); code != 1 || !strings.Contains(msg, "pg_amcheck") {
		t.Errorf("check: %d %s", code, msg)
	}
	// Without pg_dump the backup explains itself, without the password.
	pgDumpAllowed = false
	defer func() { pgDumpAllowed = true }()
	code, msg = runCmd(t, map[string]string{"REPLYD_STORE_URL": "postgres://u:pw-secret@db.lan/x"}, "backup", "--out", out+"2")
	if code != 1 || !strings.Contains(msg, "back it up with pg_dump") || !strings.Contains(msg, "postgres://u:REDACTED@db.lan/x") || strings.Contains(msg, "pw-secret") {
		t.Errorf("backup without pg_dump: %d %s", code, msg)
	}
}
