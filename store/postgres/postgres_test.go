package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/replyd/replyd/internal/pgtest"
	"github.com/replyd/replyd/store"
	"github.com/replyd/replyd/store/postgres"
)

// TestMigrateConcurrentOpens opens eight stores on one fresh database at
// once, as boxes starting together do: the advisory lock lets each migration
// run exactly once and every Open succeeds.
func TestMigrateConcurrentOpens(t *testing.T) {
	srv := pgtest.Start(t)
	url := srv.NewDatabase(t)
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := postgres.Open(context.Background(), url, postgres.Options{})
			if err == nil {
				s.Close()
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatalf("concurrent Open: %v", err)
		}
	}
	var n, max int
	query(t, url, "SELECT count(*), max(version) FROM schema_version", &n, &max)
	if n != postgres.SchemaVersion() || max != postgres.SchemaVersion() {
		t.Errorf("schema_version holds %d rows up to %d; want each of the %d migrations once", n, max, postgres.SchemaVersion())
	}
	// Reopening applies nothing more.
	mustOpen(t, url, postgres.Options{})
	query(t, url, "SELECT count(*) FROM schema_version", &n)
	if n != postgres.SchemaVersion() {
		t.Errorf("reopen: %d rows", n)
	}
}

// TestOpenRefusesNewerSchema: a database migrated by a newer replyd is not
// touched by an older one.
func TestOpenRefusesNewerSchema(t *testing.T) {
	srv := pgtest.Start(t)
	url := srv.NewDatabase(t)
	mustOpen(t, url, postgres.Options{}).Close()
	exec(t, url, "INSERT INTO schema_version (version, name) VALUES ($1, 'from_the_future')", postgres.SchemaVersion()+1)
	_, err := postgres.Open(context.Background(), url, postgres.Options{})
	if err == nil || !strings.Contains(err.Error(), "newer than this replyd") {
		t.Fatalf("Open on a newer schema: %v", err)
	}
}

// TestOpenUnreachable: no server at the URL is ErrUnavailable, quickly, and
// the password is not in the message.
func TestOpenUnreachable(t *testing.T) {
	srv := pgtest.Start(t)
	url := srv.NewDatabase(t)
	srv.Stop()
	withPassword := strings.Replace(url, "postgres@", "postgres:s3cret-pw@", 1)
	_, err := postgres.Open(context.Background(), withPassword, postgres.Options{})
	if !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Open on a stopped server: %v, want ErrUnavailable", err)
	}
	if strings.Contains(err.Error(), "s3cret-pw") {
		t.Errorf("the error shows the password: %v", err)
	}
	if _, err := postgres.Open(context.Background(), "postgres://u:s3cret-pw@[::1:bad", postgres.Options{}); err == nil || strings.Contains(err.Error(), "s3cret-pw") {
		t.Errorf("bad URL: %v", err)
	}
}

// TestStoreUnavailableAndRecovery stops the server under an open store:
// calls fail with ErrUnavailable within the call timeout, Ping says so, and
// when the server is back the same store works again without reopening.
func TestStoreUnavailableAndRecovery(t *testing.T) {
	srv := pgtest.Start(t)
	url := srv.NewDatabase(t)
	s := mustOpen(t, url, postgres.Options{Timeout: 2 * time.Second})
	if err := s.CreateKey(store.APIKey{Hash: "k1"}); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	if _, err := s.GetKey("k1"); !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("GetKey with the server stopped: %v, want ErrUnavailable", err)
	}
	if err := s.AppendLog(store.LogEntry{Message: "x"}); !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("AppendLog with the server stopped: %v, want ErrUnavailable", err)
	}
	if err := s.Ping(context.Background()); !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("Ping with the server stopped: %v, want ErrUnavailable", err)
	}
	srv.Start()
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := s.GetKey("k1")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the store did not recover: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := s.Ping(context.Background()); err != nil {
		t.Errorf("Ping after recovery: %v", err)
	}
}

// TestDescribe names the database without the password.
func TestDescribe(t *testing.T) {
	srv := pgtest.Start(t)
	url := srv.NewDatabase(t)
	s := mustOpen(t, url, postgres.Options{})
	if d := s.Describe(); !strings.HasPrefix(d, "postgres://postgres@"+srv.Addr()+"/replyd_test_") {
		t.Errorf("Describe = %q", d)
	}
	var buf strings.Builder
	if _, err := s.Backup(&buf); !errors.Is(err, store.ErrNotSupported) || !strings.Contains(err.Error(), "pg_dump") {
		t.Errorf("Backup: %v, want ErrNotSupported naming pg_dump", err)
	}
}

// exec runs sql with args on a connection of its own to url.
func exec(t *testing.T, url, sql string, args ...any) {
	t.Helper()
	onConn(t, url, func(ctx context.Context, c *pgx.Conn) error {
		_, err := c.Exec(ctx, sql, args...)
		return err
	})
}

// query scans the one row sql returns into dest, on a connection of its
// own to url.
func query(t *testing.T, url, sql string, dest ...any) {
	t.Helper()
	onConn(t, url, func(ctx context.Context, c *pgx.Conn) error {
		return c.QueryRow(ctx, sql).Scan(dest...)
	})
}

// onConn runs fn on a new connection to url; an error fails the test.
func onConn(t *testing.T, url string, fn func(context.Context, *pgx.Conn) error) {
	t.Helper()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	if err := fn(ctx, c); err != nil {
		t.Fatal(err)
	}
}

// dumpText is every row of every table of the database as text (bytea as
// hex), what a pg_dump would hold.
func dumpText(t *testing.T, url string) string {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(context.Background(), `SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'`)
	if err != nil {
		t.Fatal(err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, name := range tables {
		rows, err := conn.Query(context.Background(), `SELECT row_to_json(t)::text FROM `+pgx.Identifier{name}.Sanitize()+` t`)
		if err != nil {
			t.Fatal(err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString(strings.Join(lines, "\n"))
	}
	return b.String()
}

// TestMemoryOnlyEncrypted: a remembering user's texts are in no table in
// clear, and after DeleteUser its key is in none either.
func TestMemoryOnlyEncrypted(t *testing.T) {
	srv := pgtest.Start(t)
	url := srv.NewDatabase(t)
	s := mustOpen(t, url, postgres.Options{})
	const marker = "MARKER-2b7e-honey"
	err := s.AppendLog(store.LogEntry{StreamName: store.StreamInfer, Subject: "victim", Status: 200, ResourceID: "k",
		Inference: &store.InferenceInfo{ID: "inf_m", CandidateChars: []int{5}, Remember: &store.RememberedTexts{Partner: marker + " partner", Candidates: []string{marker + " candidate"}}}})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if _, err := s.SetOutcome("inf_m", store.Outcome{Kind: store.OutcomeEdited, Rank: 1, FirstAt: now, At: now}, marker+" reply"); err != nil {
		t.Fatal(err)
	}
	if pairs, _, err := s.MemoryPairs("victim"); err != nil || len(pairs) != 1 {
		t.Fatalf("pairs: %v %v", pairs, err)
	}
	var key []byte
	query(t, url, "SELECT key FROM memory_users WHERE subject = 'victim'", &key)
	keyHex := fmt.Sprintf("%x", key)
	dump := dumpText(t, url)
	if strings.Contains(dump, "MARKER") || strings.Contains(dump, fmt.Sprintf("%x", "MARKER")) {
		t.Error("a remembered text is stored in clear")
	}
	if !strings.Contains(dump, keyHex) {
		t.Fatal("the user's key is not in the dump: the check below could not fail")
	}
	if _, err := s.DeleteUser("victim"); err != nil {
		t.Fatal(err)
	}
	if dump := dumpText(t, url); strings.Contains(dump, keyHex) || strings.Contains(dump, "victim\",\"seq") {
		t.Error("the user's key or rows are left after DeleteUser")
	}
}
