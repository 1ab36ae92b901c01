package main

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/replyd/replyd/internal/replydproc"
)

// server is a replyd process started by loadtest.
type server struct {
	*replydproc.Proc
	dir     string // temporary: data/ (with data/models/), replyd.log
	logPath string
	logFile *os.File
}

// startServer writes the demo models into the data directory's models
// folder (where the admin switches models), with a second language model
// when switching, starts `bin serve` on a free loopback port with that
// fresh data directory, a known admin key and extraEnv (NAME=value), and
// waits for /healthz to answer 200.
func startServer(ctx context.Context, bin string, extraEnv []string, switching bool) (*server, error) {
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
	s := &server{dir: dir, logPath: filepath.Join(dir, "replyd.log")}
	models := filepath.Join(dir, "data", "models")
	if err := replydproc.DemoModels(ctx, abs, models); err != nil {
		return nil, err
	}
	if switching {
		if err := copyDemoModel(models); err != nil {
			return nil, err
		}
	}
	env := map[string]string{}
	for _, kv := range extraEnv {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	if s.logFile, err = os.Create(s.logPath); err != nil {
		return nil, err
	}
	s.Proc, err = replydproc.Start(replydproc.Options{Bin: abs, DataDir: filepath.Join(dir, "data"),
		AdminKey: "loadtest-admin-" + replydproc.RandHex(24), Models: models, Env: env, Output: s.logFile})
	if err != nil {
		s.logFile.Close()
		return nil, err
	}
	if err := s.WaitReady(ctx, 3*time.Minute); err != nil {
		_ = s.stop()
		return nil, fmt.Errorf("%w\n(log: %s)", err, s.logPath)
	}
	return s, nil
}

// stop sends SIGTERM and waits for a graceful exit (a minute at most, then
// SIGKILL).
func (s *server) stop() error {
	defer s.logFile.Close()
	return s.Stop(time.Minute)
}

// check runs `replyd check` (bbolt's consistency check) on the data file.
func (s *server) check(ctx context.Context) (string, error) {
	return s.Run(ctx, "check")
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
