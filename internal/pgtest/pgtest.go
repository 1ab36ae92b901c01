// Package pgtest starts a real PostgreSQL server for tests: Debian's
// postgresql package (scripts/deps.sh installs it), a cluster made by initdb
// in a fresh temporary directory, owned and run by an unprivileged user when
// the tests run as root (initdb and postgres refuse root), listening on a free
// port of 127.0.0.1 only, stopped and removed when the test ends. The store
// tests, the two-box tests and the HAProxy test share it; nothing mocks
// PostgreSQL.
//
// Without PostgreSQL installed the tests that need it skip with a message
// naming scripts/deps.sh, unless REPLYD_REQUIRE_POSTGRES is set (make test
// and CI set it), in which case they fail.
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Server is one running (or stopped) PostgreSQL cluster in a temp dir.
type Server struct {
	tb      testing.TB
	bin     string // directory of initdb and postgres
	dir     string // the temp dir: data/ and postgres.log
	port    int
	cred    *syscall.Credential // nil unless running as root
	opts    Options
	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{}
	dbCount atomic.Int64
}

// Options tune the server. The zero value is a durable server (fsync on) as
// a hospital would run it.
type Options struct {
	// Settings are extra `-c name=value` server settings.
	Settings map[string]string
}

// Start initialises and starts a server for tb, or skips tb (fails it when
// REPLYD_REQUIRE_POSTGRES is set) when PostgreSQL is not installed. The
// server is stopped and its directory removed when tb ends.
func Start(tb testing.TB) *Server { return StartWith(tb, Options{}) }

// StartWith is Start with options.
func StartWith(tb testing.TB, opts Options) *Server {
	tb.Helper()
	bin, err := findBin()
	if err != nil {
		if os.Getenv("REPLYD_REQUIRE_POSTGRES") != "" {
			tb.Fatalf("pgtest: %v (REPLYD_REQUIRE_POSTGRES is set)", err)
		}
		tb.Skipf("pgtest: SKIPPING: %v; run scripts/deps.sh to install Debian's postgresql", err)
	}
	dir, err := os.MkdirTemp("", "replyd-pgtest-")
	if err != nil {
		tb.Fatal(err)
	}
	s := &Server{tb: tb, bin: bin, dir: dir, opts: opts}
	tb.Cleanup(func() {
		s.stop(syscall.SIGQUIT) // immediate shutdown: nothing to keep
		if tb.Failed() {
			tb.Logf("pgtest: PostgreSQL log (%s):\n%s", s.logPath(), s.LogTail(40))
		}
		_ = os.RemoveAll(dir)
	})
	if os.Geteuid() == 0 {
		cred, err := unprivileged()
		if err != nil {
			tb.Fatalf("pgtest: %v", err)
		}
		s.cred = cred
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			tb.Fatalf("pgtest: %v", err)
		}
	}
	out, err := s.command(filepath.Join(bin, "initdb"), "-D", s.dataDir(), "-U", "postgres", "--auth=trust",
		"-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions").CombinedOutput()
	if err != nil {
		tb.Fatalf("pgtest: initdb: %v\n%s", err, out)
	}
	s.Start()
	return s
}

// findBin returns the directory holding initdb and postgres: the newest
// /usr/lib/postgresql/N/bin (Debian keeps them off PATH), else PATH.
func findBin() (string, error) {
	if d := os.Getenv("REPLYD_PG_BIN"); d != "" {
		return d, nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int {
		va, _ := strconv.Atoi(filepath.Base(filepath.Dir(a)))
		vb, _ := strconv.Atoi(filepath.Base(filepath.Dir(b)))
		return vb - va
	})
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), nil
	}
	return "", errors.New("PostgreSQL's initdb was found neither in /usr/lib/postgresql/*/bin nor on PATH")
}

// unprivileged picks the user that owns and runs the cluster when the tests
// run as root: Debian's postgres user, else nobody.
func unprivileged() (*syscall.Credential, error) {
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, err1 := strconv.Atoi(u.Uid)
		gid, err2 := strconv.Atoi(u.Gid)
		if err1 == nil && err2 == nil && uid != 0 {
			return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
		}
	}
	return nil, errors.New("running as root and neither a postgres nor a nobody user exists to run PostgreSQL as")
}

func (s *Server) dataDir() string { return filepath.Join(s.dir, "data") }
func (s *Server) logPath() string { return filepath.Join(s.dir, "postgres.log") }

// command prepares a command that runs as the cluster's owner.
func (s *Server) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: s.cred, Pdeathsig: syscall.SIGKILL}
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	return cmd
}

// Start starts the server (again, after Stop) on its port, choosing a free
// port the first time, and waits until it accepts connections.
func (s *Server) Start() {
	s.tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		s.tb.Fatal("pgtest: Start: the server is running")
	}
	// A restart keeps the port: clients hold the URL.
	fixed := s.port != 0
	var lastErr error
	for attempt := 0; attempt < 10; attempt++ {
		if !fixed {
			s.port = freePort(s.tb)
		}
		if lastErr = s.launch(); lastErr == nil {
			break
		}
		if fixed {
			// After a kill, the old backends may still be detaching from
			// the shared memory block ("pre-existing shared memory block
			// is still in use"): give them a moment on a loaded machine.
			time.Sleep(300 * time.Millisecond)
		}
	}
	if lastErr == nil {
		return
	}
	s.tb.Fatalf("pgtest: starting postgres: %v\n%s", lastErr, s.LogTail(30))
}

func (s *Server) launch() error {
	args := []string{"-D", s.dataDir(), "-p", strconv.Itoa(s.port),
		"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=",
		"-c", "max_connections=400", "-c", "shared_buffers=32MB",
		"-c", "log_min_messages=warning", "-c", "log_min_error_statement=panic"}
	keys := make([]string, 0, len(s.opts.Settings))
	for k := range s.opts.Settings {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		args = append(args, "-c", k+"="+s.opts.Settings[k])
	}
	logf, err := os.OpenFile(s.logPath(), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	cmd := s.command(filepath.Join(s.bin, "postgres"), args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(done) }()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-done:
			return fmt.Errorf("postgres exited during start")
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		conn, err := pgx.Connect(ctx, s.url("postgres"))
		if err == nil {
			_ = conn.Close(ctx)
			cancel()
			s.cmd, s.done = cmd, done
			return nil
		}
		cancel()
		time.Sleep(50 * time.Millisecond)
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-done
	return errors.New("postgres did not accept connections within 60 s")
}

// Stop shuts the server down (fast: sessions are ended, the data stays) and
// waits for it to be gone. Start brings it back on the same port.
func (s *Server) Stop() { s.stop(syscall.SIGINT) }

// Kill stops the server with SIGKILL, as a crash would; Start recovers it.
func (s *Server) Kill() { s.stop(syscall.SIGKILL) }

func (s *Server) stop(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(sig)
	if sig == syscall.SIGKILL {
		// The backends notice the postmaster's death; make sure.
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	}
	select {
	case <-s.done:
	case <-time.After(30 * time.Second):
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-s.done
	}
	if sig == syscall.SIGKILL {
		// Wait (5 s at most) until every process of the group is gone, so
		// that none still holds the shared memory block.
		for i := 0; i < 100 && syscall.Kill(-s.cmd.Process.Pid, 0) == nil; i++ {
			time.Sleep(50 * time.Millisecond)
		}
		// Wait until the port is free of the killed backends.
		for i := 0; i < 100; i++ {
			if c, err := net.DialTimeout("tcp", s.addr(), 100*time.Millisecond); err != nil {
				break
			} else {
				c.Close()
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	s.cmd, s.done = nil, nil
}

func (s *Server) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// url is the connection URL of database db as the superuser postgres.
func (s *Server) url(db string) string {
	return fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable", s.addr(), db)
}

// DataDir is the cluster's data directory (PGDATA): a test may read the
// relation files under base/ (pg_relation_filepath names them) and the
// write-ahead log under pg_wal/.
func (s *Server) DataDir() string { return s.dataDir() }

// Addr is the server's host:port.
func (s *Server) Addr() string { return s.addr() }

// NewDatabase creates a fresh, empty database and returns its URL. Each
// store under test gets its own, so tests run in parallel without sharing
// state.
func (s *Server) NewDatabase(tb testing.TB) string {
	tb.Helper()
	name := fmt.Sprintf("replyd_test_%d", s.dbCount.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.url("postgres"))
	if err != nil {
		tb.Fatalf("pgtest: connect: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		tb.Fatalf("pgtest: create database %s: %v", name, err)
	}
	return s.url(name)
}

// LogTail returns the last n lines of the server's log.
func (s *Server) LogTail(n int) string {
	b, _ := os.ReadFile(s.logPath())
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// freePort returns a port of 127.0.0.1 that was free a moment ago.
func freePort(tb testing.TB) int {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
