package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/replyd/replyd/store"
	"github.com/replyd/replyd/store/bolt"
)

// cmdStore runs `replyd store migrate`.
func cmdStore(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "migrate" {
		return errors.New("store: use `replyd store migrate --from FILE --to postgres://… [--force]`")
	}
	fs := flag.NewFlagSet("store migrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	from := fs.String("from", "", "the bbolt data file to copy (replyd.db of a stopped replyd)")
	to := fs.String("to", "", "the PostgreSQL URL to copy into (postgres://user:password@host:5432/db?sslmode=…)")
	force := fs.Bool("force", false, "replace whatever the target database holds")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if *from == "" || *to == "" || fs.NArg() > 0 {
		return errors.New("store migrate: --from FILE and --to postgres://… are required, and nothing else")
	}
	if !strings.HasPrefix(*to, "postgres://") && !strings.HasPrefix(*to, "postgresql://") {
		return errors.New("store migrate: --to must be a postgres:// URL")
	}
	return migrateStore(ctx, *from, *to, *force, stdout)
}

// migrateStore copies everything in the bbolt file at from into the
// PostgreSQL database at to, in one transaction. It is idempotent: when the
// target already holds exactly the file's data it changes nothing. A target
// holding other data is refused unless force, which replaces it.
func migrateStore(ctx context.Context, from, to string, force bool, stdout io.Writer) error {
	if _, err := os.Stat(from); err != nil {
		return fmt.Errorf("store migrate: %w", err)
	}
	src, err := bolt.Open(from, bolt.Options{ReadOnly: true, Timeout: 200 * time.Millisecond})
	if errors.Is(err, store.ErrLocked) {
		return fmt.Errorf("store migrate: a running replyd holds %s: stop it first, so that nothing is written during the copy", from)
	}
	if err != nil {
		return fmt.Errorf("store migrate: %w", err)
	}
	defer src.Close()
	dst, err := openPostgres(ctx, to, 0, nil)
	if err != nil {
		return fmt.Errorf("store migrate: %w", err)
	}
	defer dst.Close()

	same, _, err := store.SameData(src, dst)
	if err != nil {
		return fmt.Errorf("store migrate: comparing: %w", err)
	}
	if same {
		fmt.Fprintf(stdout, "store migrate: %s already holds exactly the data of %s: nothing to do\n", dst.Describe(), from)
		return nil
	}
	var keys, prompts, sessions, entries, outcomes, users, models int
	err = src.Snapshot(func(snap store.Snapshot) error {
		keys, prompts, sessions = len(snap.Keys), len(snap.Prompts), len(snap.Sessions)
		outcomes, users, models = len(snap.Outcomes), len(snap.Memory), len(snap.ModelChoices)+len(snap.ModelRecords)
		logs := snap.Logs
		snap.Logs = func(yield func(store.LogEntry, error) bool) {
			for e, err := range logs {
				if err == nil {
					entries++
				}
				if !yield(e, err) {
					return
				}
			}
		}
		return dst.Import(snap, force)
	})
	if errors.Is(err, store.ErrExists) {
		return fmt.Errorf("store migrate: %s already holds other data (another box may be using it): add --force to replace all of it with %s", dst.Describe(), from)
	}
	if err != nil {
		return fmt.Errorf("store migrate: %w", err)
	}
	if same, why, err := store.SameData(src, dst); err != nil || !same {
		return fmt.Errorf("store migrate: the copy in %s does not match %s (%s, %v)", dst.Describe(), from, why, err)
	}
	fmt.Fprintf(stdout, "store migrate: copied %d keys, %d prompt versions, %d sessions, %d log entries, %d outcomes, %d remembering users and %d model choices, timings and comparisons from %s to %s, and checked the copy\n",
		keys, prompts, sessions, entries, outcomes, users, models, from, dst.Describe())
	return nil
}

// backupPostgres backs up a PostgreSQL store with pg_dump (custom format,
// for pg_restore) into out, or explains how when pg_dump is not installed.
// The password travels in PGPASSWORD, not on the command line.
func backupPostgres(ctx context.Context, storeURL, out string, stdout io.Writer) error {
	pgDump := findPGDump()
	if pgDump == "" || !pgDumpAllowed {
		return fmt.Errorf("backup: this replyd keeps its data in PostgreSQL (%s): back it up with pg_dump, e.g. `pg_dump --format=custom --file=%s '%s'` (install Debian's postgresql-client), or with the hospital's own PostgreSQL backups",
			redactURL(storeURL), out, redactURL(storeURL))
	}
	u, err := url.Parse(storeURL)
	if err != nil {
		return fmt.Errorf("backup: REPLYD_STORE_URL: %w", err)
	}
	env := os.Environ()
	if pw, ok := u.User.Password(); ok {
		env = append(env, "PGPASSWORD="+pw)
		u.User = url.User(u.User.Username())
	}
	q := u.Query()
	if pw := q.Get("password"); pw != "" {
		env = append(env, "PGPASSWORD="+pw)
		q.Del("password")
		u.RawQuery = q.Encode()
	}
	partial := out + ".partial"
	cmd := exec.CommandContext(ctx, pgDump, "--format=custom", "--file="+partial, "--dbname="+u.String())
	cmd.Env = env
	if msg, err := cmd.CombinedOutput(); err != nil {
		_ = os.Remove(partial)
		return fmt.Errorf("backup: %s: %v\n%s", pgDump, err, msg)
	}
	if err := os.Rename(partial, out); err != nil {
		return err
	}
	fi, err := os.Stat(out)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "backup: pg_dump wrote %d bytes of %s to %s (restore with pg_restore --clean --dbname=… %s)\n", fi.Size(), redactURL(storeURL), out, out)
	return nil
}

// pgDumpAllowed lets a test act as if pg_dump were not installed.
var pgDumpAllowed = true

// findPGDump returns pg_dump from PATH or the newest of Debian's
// /usr/lib/postgresql/N/bin, or "".
func findPGDump() string {
	if p, err := exec.LookPath("pg_dump"); err == nil {
		return p
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_dump")
	slices.Sort(dirs)
	if len(dirs) > 0 {
		return dirs[len(dirs)-1]
	}
	return ""
}

// errPostgresManaged answers the bbolt-only commands on a PostgreSQL store.
func errPostgresManaged(cmd, how string) error {
	return fmt.Errorf("%s: this replyd keeps its data in PostgreSQL (REPLYD_STORE_URL), which PostgreSQL itself looks after: %s", cmd, how)
}

// Exit statuses of `replyd check` (docs/operations.md): 0 the data file is
// consistent; 1 it could not be checked (an option, a PostgreSQL store, no
// data file yet, a running replyd holding it, an I/O error); 3 it is
// damaged: restore the last backup. 2 is any command's usage error.
const exitDamaged = 3

// exitError makes run exit with code after printing err.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// cmdCheck runs `replyd check`: the marker's rule (a data file missing or
// empty where replyd has run), the file's structure read without mapping it
// (bolt.VerifyFile, inside Open), then bbolt's own consistency check.
func cmdCheck(args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cfg, _, err := LoadConfig("check", args, getenv, stderr)
	if err != nil {
		return err
	}
	if cfg.StoreURL != "" {
		return errPostgresManaged("check", "check its indexes with pg_amcheck (Debian's postgresql package)")
	}
	path := dbPath(cfg)
	damaged := func(err error) error {
		if errors.Is(err, bolt.ErrDamaged) {
			return &exitError{code: exitDamaged, err: fmt.Errorf("check: %w", err)}
		}
		return fmt.Errorf("check: %w", err)
	}
	if err := bolt.CheckInstall(path); err != nil {
		return damaged(err)
	}
	db, err := bolt.Open(path, bolt.Options{Timeout: time.Second, ReadOnly: true})
	if errors.Is(err, store.ErrLocked) {
		return fmt.Errorf("check: %s is held by a running replyd (which checked it when it started): stop it first to check it now", path)
	}
	if err != nil {
		return damaged(err)
	}
	defer db.Close()
	if err := db.Check(); err != nil {
		return &exitError{code: exitDamaged, err: fmt.Errorf("check: %s is damaged: %w. %s", path, err, bolt.RestoreAdvice)}
	}
	fmt.Fprintf(stdout, "check: %s is consistent\n", path)
	return nil
}
