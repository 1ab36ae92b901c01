package postgres

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"

	"github.com/replyd/replyd/internal/pgtest"
)

// TestMigration8GivesMemoriesToTheirWriters: a database of schema 7 kept each
// memory under the user_id's pseudonym alone, readable by every key.
// Migration 8 links each memory to the keys that wrote it (the keys of the
// inferences whose pairs or awaiting texts it holds) and to no other, keeps
// its subject as its tag, and carries the global login guard over.
func TestMigration8GivesMemoriesToTheirWriters(t *testing.T) {
	srv := pgtest.Start(t)
	url := srv.NewDatabase(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	ms, err := migrations()
	if err != nil {
		t.Fatal(err)
	}
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := conn.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	exec(`CREATE TABLE schema_version (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`)
	for _, m := range ms[:7] {
		exec(m.sql)
		exec(`INSERT INTO schema_version (version, name) VALUES ($1, $2)`, m.version, m.name)
	}
	exec(`INSERT INTO otp_guard (id, fails, level, last_fail_ns, locked_until_ns) VALUES (1, 2, 3, 4, 5)`)
	for _, subject := range []string{"tag-bob", "tag-ann"} {
		exec(`INSERT INTO memory_users (subject, key, created_ns, rev) VALUES ($1, $2, 1, 1)`, subject, make([]byte, 32))
	}
	logRow := func(key, subject string, remembered bool) int64 {
		t.Helper()
		var seq int64
		err := conn.QueryRow(ctx, `INSERT INTO logs (ts_ns, level, message, resource_type, resource_id, stream, subject, status, latency_ms, node, remembered)
			VALUES (1, 'info', 'infer', 'api_key', $1, 'infer', $2, 200, 1, 'box', $3) RETURNING seq`, key, subject, remembered).Scan(&seq)
		if err != nil {
			t.Fatal(err)
		}
		return seq
	}
	row := func(table, subject string, seq int64) {
		exec(fmt.Sprintf(`INSERT INTO %s (subject, seq, ts_ns, sealed) VALUES ($1, $2, 1, '\x01')`, table), subject, seq)
	}
	row("memory_pairs", "tag-bob", logRow("kA", "tag-bob", true))
	row("memory_texts", "tag-bob", logRow("kB", "tag-bob", true))
	logRow("kC", "tag-bob", false) // read, never wrote
	row("memory_pairs", "tag-ann", logRow("kA", "tag-ann", true))
	if err := conn.Close(ctx); err != nil {
		t.Fatal(err)
	}

	s, err := Open(ctx, url, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	users, err := s.MemoryUsers()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for _, u := range users {
		if u.Tag != u.Subject {
			t.Errorf("an old memory's tag %q is not its subject %q", u.Tag, u.Subject)
		}
		got[u.Subject] = u.Keys
	}
	if diff := cmp.Diff(map[string][]string{"tag-ann": {"kA"}, "tag-bob": {"kA", "kB"}}, got); diff != "" {
		t.Errorf("links after migration 8 (-want +got):\n%s", diff)
	}
	for key, want := range map[string]string{"kA": "tag-bob", "kB": "tag-bob", "kC": ""} {
		if subj, err := s.MemorySubject(key, "tag-bob"); err != nil || subj != want {
			t.Errorf("MemorySubject(%s) = %q, %v; want %q", key, subj, err, want)
		}
	}
	var fails, level int
	if err := s.pool.QueryRow(ctx, `SELECT fails, level FROM otp_guards WHERE scope = ''`).Scan(&fails, &level); err != nil || fails != 2 || level != 3 {
		t.Errorf("the global guard after migration 8: fails %d, level %d, %v", fails, level, err)
	}
}
