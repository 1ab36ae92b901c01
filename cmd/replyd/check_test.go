package main

import (
	"bytes"
	"context"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/replyd/replyd/internal/testutil"
	"github.com/replyd/replyd/store/bolt"
	"github.com/replyd/replyd/store/storetest"
)

// writeLargeDataFile writes a data file of more than 2,000,000 bytes
// holding keys and log entries (entries of 1,500 bytes: every page carries
// a header, as a real file's do) into dir/replyd.db, with its marker, as a
// replyd that has run leaves it.
// It returns the file's bytes and how many of them its pages use (bbolt
// grows the file ahead of them).
func writeLargeDataFile(t *testing.T, dir string) ([]byte, int) {
	t.Helper()
	path := filepath.Join(dir, "replyd.db")
	db, _, err := bolt.OpenInstall(path, bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	storetest.FillBulk(t, db, 0, 1760, 1500, 16)
	used, err := db.Size()
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) <= 2_000_000 {
		t.Fatalf("the data file has %d bytes, want more than 2,000,000", len(b))
	}
	return b, int(used)
}

// TestCheckAndServeRefuseDamagedFiles runs `replyd check` and `replyd serve`
// on issue 43's damaged data files: truncated to 2,000,000 bytes (both died
// of SIGBUS), 50 random pages overwritten (both panicked in bbolt), 0 bytes
// and missing (serve took them for a new install and forgot every key).
// check exits 3 and serve 1, each with a message naming the file, what is
// wrong and the restore; a whole file checks with 0.
func TestCheckAndServeRefuseDamagedFiles(t *testing.T) {
	dir := t.TempDir()
	good, used := writeLargeDataFile(t, dir)
	path := filepath.Join(dir, "replyd.db")
	env := map[string]string{"REPLYD_DATA_DIR": dir}
	if code, out := runCmd(t, env, "check"); code != 0 || !strings.Contains(out, "is consistent") {
		t.Fatalf("check of the whole file: %d %s", code, out)
	}
	// Pages in use: overwriting those beyond changes nothing.
	overwritten := testutil.OverwritePages(good, used/testutil.PageSize, 50, rand.New(rand.NewPCG(43, 3)))
	for _, tc := range []struct {
		name, problem string
		data          []byte // nil: no file
	}{
		{"truncated", "truncated", good[:2_000_000]},
		{"overwritten", "overwritten", overwritten},
		{"empty", "empty (0 bytes), but this install has run before", []byte{}},
		{"missing", "missing, but this install has run before", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_ = os.Remove(path)
			if tc.data != nil {
				if err := os.WriteFile(path, tc.data, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			code, out := runCmd(t, env, "check")
			wantRefusal(t, "check", code, exitDamaged, out, path, tc.problem)

			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var buf bytes.Buffer
			code = run(ctx, []string{"serve"}, envMap(map[string]string{"REPLYD_DATA_DIR": dir, "REPLYD_ADDR": "127.0.0.1:0"}), &buf, &buf)
			wantRefusal(t, "serve", code, 1, buf.String(), path, tc.problem)
			if tc.data == nil {
				if _, err := os.Stat(path); err == nil {
					t.Errorf("serve created %s", path)
				}
			}
		})
	}
}

func wantRefusal(t *testing.T, cmd string, code, wantCode int, out, path, problem string) {
	t.Helper()
	if code != wantCode {
		t.Errorf("%s exited %d, want %d: %s", cmd, code, wantCode, out)
	}
	for _, want := range []string{path, problem, "replyd restore", "docs/operations.md"} {
		if !strings.Contains(out, want) {
			t.Errorf("%s said %q, which does not say %q", cmd, out, want)
		}
	}
	if strings.Contains(out, "goroutine ") || strings.Contains(out, "panic") {
		t.Errorf("%s crashed: %s", cmd, out)
	}
}

// TestServeNewInstallSaysSo: the first start in an empty data directory
// logs that it is a new install and leaves the marker.
func TestServeNewInstallSaysSo(t *testing.T) {
	dir := t.TempDir()
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	db, err := openStore(context.Background(), &Config{DataDir: dir}, log)
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	if !strings.Contains(buf.String(), "new install") {
		t.Errorf("log %q does not say new install", buf.String())
	}
	if _, err := os.Stat(bolt.MarkerPath(filepath.Join(dir, "replyd.db"))); err != nil {
		t.Errorf("no marker: %v", err)
	}
	buf.Reset()
	db, err = openStore(context.Background(), &Config{DataDir: dir}, log)
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	if strings.Contains(buf.String(), "new install") {
		t.Errorf("the second start says new install: %q", buf.String())
	}
}
