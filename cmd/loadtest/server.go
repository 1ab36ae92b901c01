package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// server is a replyd process started by loadtest.
type server struct {
	bin      string
	dir      string // temporary: models/, data/, replyd.log
	dataDir  string
	logPath  string
	url      string
	adminKey string
	cmd      *exec.Cmd
	done     chan error
	logFile  *os.File
}

// startServer writes the demo models, starts `bin serve` on a free loopback
// port with a fresh data directory, a known admin key and extraEnv, and waits
// for /healthz to answer 200.
func startServer(ctx context.Context, bin string, extraEnv []string) (*server, error) {
	abs, err := filepath.Abs(bin)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(abs); err != nil {
		return nil, fmt.Errorf("replyd binary: %w (build it with `make build`)", err)
	}
	dir, err := os.MkdirTemp("", "replyd-loadtest-")
	if err != nil {
		return nil, err
	}
	s := &server{bin: abs, dir: dir, dataDir: filepath.Join(dir, "data"), logPath: filepath.Join(dir, "replyd.log")}
	models := filepath.Join(dir, "models")
	if out, err := exec.CommandContext(ctx, abs, "models", "demo", "--dir", models).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("replyd models demo: %v\n%s", err, out)
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	key := make([]byte, 24)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	s.adminKey = "loadtest-admin-" + hex.EncodeToString(key)
	addr := net.JoinHostPort("127.0.0.1", fmt.Sprint(port))
	s.url = "http://" + addr

	s.logFile, err = os.Create(s.logPath)
	if err != nil {
		return nil, err
	}
	s.cmd = exec.Command(abs, "serve")
	s.cmd.Env = append(withoutReplydEnv(os.Environ()),
		"REPLYD_ADDR="+addr,
		"REPLYD_DATA_DIR="+s.dataDir,
		"REPLYD_ADMIN_KEY="+s.adminKey,
		"REPLYD_LLM_MODEL="+filepath.Join(models, "llm-demo.gguf"),
		"REPLYD_WHISPER_MODEL="+filepath.Join(models, "whisper-demo.bin"),
		"REPLYD_TLS=off",
		"REPLYD_OTP_CHANNEL=console",
	)
	s.cmd.Env = append(s.cmd.Env, extraEnv...) // later entries win
	s.cmd.Stdout, s.cmd.Stderr = s.logFile, s.logFile
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	s.done = make(chan error, 1)
	go func() { s.done <- s.cmd.Wait() }()

	deadline := time.Now().Add(3 * time.Minute)
	client := &http.Client{Timeout: 2 * time.Second}
	for {
		resp, err := client.Get(s.url + "/healthz")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s, nil
			}
		}
		select {
		case err := <-s.done:
			s.done <- err
			log, _ := os.ReadFile(s.logPath)
			return nil, fmt.Errorf("replyd exited before it was ready (%v); its log:\n%s", err, tail(log, 40))
		case <-ctx.Done():
			_ = s.stop()
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = s.stop()
			return nil, fmt.Errorf("replyd did not answer /healthz 200 within 3 minutes (log: %s)", s.logPath)
		}
	}
}

// stop sends SIGTERM and waits for a graceful exit (a minute at most, then
// SIGKILL).
func (s *server) stop() error {
	if s.cmd == nil || s.cmd.Process == nil {
		return nil
	}
	defer s.logFile.Close()
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-s.done:
		s.done <- err
		if err != nil {
			return fmt.Errorf("replyd exited with %v after SIGTERM", err)
		}
		return nil
	case <-time.After(time.Minute):
		_ = s.cmd.Process.Kill()
		return errors.New("replyd did not stop within a minute of SIGTERM; killed")
	}
}

// check runs `replyd check` (bbolt's consistency check) on the data file.
func (s *server) check(ctx context.Context) (string, error) {
	cmd := exec.CommandContext(ctx, s.bin, "check")
	cmd.Env = append(withoutReplydEnv(os.Environ()), "REPLYD_DATA_DIR="+s.dataDir)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func withoutReplydEnv(env []string) []string {
	out := env[:0:0]
	for _, e := range env {
		if !strings.HasPrefix(e, "REPLYD_") {
			out = append(out, e)
		}
	}
	return out
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// requireLoopback refuses a base URL whose host is not a loopback address,
// so that a load test never floods a machine by mistake.
func requireLoopback(base string) error {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("-url %q is not an http(s) URL", base)
	}
	host := u.Hostname()
	var ips []net.IP
	if ip := net.ParseIP(host); ip != nil {
		ips = []net.IP{ip}
	} else if host == "localhost" {
		ips = []net.IP{net.IPv4(127, 0, 0, 1)}
	} else {
		return fmt.Errorf("-url host %q is not a loopback address: loadtest only sends traffic to 127.0.0.1/::1/localhost", host)
	}
	for _, ip := range ips {
		if !ip.IsLoopback() {
			return fmt.Errorf("-url host %q is not a loopback address: loadtest only sends traffic to 127.0.0.1/::1/localhost", host)
		}
	}
	return nil
}

func tail(b []byte, lines int) string {
	ls := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(ls) > lines {
		ls = ls[len(ls)-lines:]
	}
	return string(bytes.Join(ls, []byte("\n")))
}
