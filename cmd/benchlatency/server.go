package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// server is one replyd process started for the benchmark.
type server struct {
	dir      string
	url      string
	adminKey string
	cmd      *exec.Cmd
	done     chan error
	log      *os.File
}

// startServer starts `bin serve` on a free loopback port with a temporary
// data directory and env, and waits until /healthz answers 200 (both models
// loaded and warmed up).
func startServer(ctx context.Context, bin string, env []string) (*server, error) {
	dir, err := os.MkdirTemp("", "replyd-benchlatency-")
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	key := make([]byte, 16)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	s := &server{dir: dir, url: "http://" + addr, adminKey: "bench-" + hex.EncodeToString(key), done: make(chan error, 1)}
	if s.log, err = os.Create(filepath.Join(dir, "replyd.log")); err != nil {
		return nil, err
	}
	s.cmd = exec.Command(bin, "serve")
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "REPLYD_") {
			s.cmd.Env = append(s.cmd.Env, e)
		}
	}
	s.cmd.Env = append(s.cmd.Env, "REPLYD_ADDR="+addr, "REPLYD_DATA_DIR="+filepath.Join(dir, "data"),
		"REPLYD_ADMIN_KEY="+s.adminKey, "REPLYD_TLS=off", "REPLYD_OTP_CHANNEL=console")
	s.cmd.Env = append(s.cmd.Env, env...)
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { s.done <- s.cmd.Wait() }()
	client := &http.Client{Timeout: 2 * time.Second}
	for deadline := time.Now().Add(5 * time.Minute); time.Now().Before(deadline); {
		if resp, err := client.Get(s.url + "/healthz"); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s, nil
			}
		}
		select {
		case err := <-s.done:
			s.done <- err
			out, _ := os.ReadFile(s.log.Name())
			return nil, fmt.Errorf("replyd exited before it was ready (%v):\n%s", err, out)
		case <-ctx.Done():
			s.stop()
			return nil, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	s.stop()
	return nil, fmt.Errorf("replyd was not ready within 5 minutes (log %s)", s.log.Name())
}

// apiKey creates an API key through the admin API.
func (s *server) apiKey(ctx context.Context) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url+"/v1/admin/keys", strings.NewReader(`{"client_id":"benchlatency","rate_limit_per_minute":1000}`))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-ADMIN-KEY", s.adminKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var out struct {
		APIKey string `json:"api_key"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || out.APIKey == "" {
		return "", fmt.Errorf("creating an API key: status %d, %v", resp.StatusCode, err)
	}
	return out.APIKey, nil
}

// peakRSS returns the process's peak resident set (VmHWM).
func (s *server) peakRSS() (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", s.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if kb, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(kb), "kB")), 10, 64)
			return n << 10, err
		}
	}
	return 0, errors.New("no VmHWM line")
}

// stop ends the process (SIGTERM, then SIGKILL after 30 s) and removes its
// directory.
func (s *server) stop() error {
	defer os.RemoveAll(s.dir)
	defer s.log.Close()
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-s.done:
		s.done <- err
		return nil
	case <-time.After(30 * time.Second):
		return s.cmd.Process.Kill()
	}
}

// loadAverage is the host's 1-minute load average, to judge the figures by.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return string(bytes.Fields(b)[0])
}
