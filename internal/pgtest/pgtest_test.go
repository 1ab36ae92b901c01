package pgtest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestStartStopRestart starts a server, writes, stops it, starts it again on
// the same port and reads the write back.
func TestStartStopRestart(t *testing.T) {
	s := Start(t)
	url := s.NewDatabase(t)
	ctx := context.Background()
	exec := func(sql string) {
		t.Helper()
		c, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	exec("CREATE TABLE t (v int); INSERT INTO t VALUES (42)")
	s.Stop()
	if c, err := pgx.Connect(ctx, url); err == nil {
		c.Close(ctx)
		t.Fatal("connected to a stopped server")
	}
	s.Start()
	s.Kill()
	s.Start()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var v int
	if err := c.QueryRow(ctx, "SELECT v FROM t").Scan(&v); err != nil || v != 42 {
		t.Fatalf("after restart: %d, %v", v, err)
	}
}
