// Package replydproc starts and drives the real replyd binary: the fault
// tests, the end-to-end test and the load test all run replyd this way. It
// does not import "testing" (cmd/loadtest is an ordinary program); the thin
// testing wrapper is testutil.Replyd.
//
// Every process listens on 127.0.0.1 only, starts from the caller's
// environment without any REPLYD_* variable (so a developer's settings never
// leak into a test), and has its stdout and stderr kept in memory.
package replydproc

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"mime/multipart"
	"net"
	"net/http"
	"net/textproto"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Options configure one replyd process.
type Options struct {
	// Bin is the replyd binary, or a test binary that acts as replyd.
	Bin string
	// Args are the arguments; empty means "serve".
	Args []string
	// DataDir is REPLYD_DATA_DIR; it must be set.
	DataDir string
	// AdminKey is REPLYD_ADMIN_KEY; a random one is made when empty.
	AdminKey string
	// Models, when set, is a directory holding the demo models
	// (llm-demo.gguf and whisper-demo.bin, see DemoModels).
	Models string
	// Env adds or overrides REPLYD_* variables; it is applied last.
	Env map[string]string
	// Output, when set, receives a copy of stdout and stderr.
	Output io.Writer
}

// Proc is one running replyd process.
type Proc struct {
	URL      string // http://127.0.0.1:port
	Addr     string // 127.0.0.1:port
	DataDir  string
	AdminKey string

	bin     string
	env     map[string]string // the REPLYD_* variables it was started with
	cmd     *exec.Cmd
	out     SyncBuffer
	done    chan struct{}
	waitErr error
}

// Start starts replyd on a free loopback port (unless o.Env names
// REPLYD_ADDR) with REPLYD_TLS=off, REPLYD_OTP_CHANNEL=console and the
// options' data directory, admin key and models. It does not wait for
// readiness: see WaitReady. The caller must end the process (Stop or Kill).
func Start(o Options) (*Proc, error) {
	if o.Bin == "" || o.DataDir == "" {
		return nil, errors.New("replydproc: Bin and DataDir must be set")
	}
	if o.AdminKey == "" {
		o.AdminKey = "test-admin-" + RandHex(16)
	}
	env := map[string]string{
		"REPLYD_DATA_DIR":    o.DataDir,
		"REPLYD_ADMIN_KEY":   o.AdminKey,
		"REPLYD_TLS":         "off",
		"REPLYD_OTP_CHANNEL": "console",
	}
	if o.Models != "" {
		env["REPLYD_LLM_MODEL"] = filepath.Join(o.Models, "llm-demo.gguf")
		env["REPLYD_WHISPER_MODEL"] = filepath.Join(o.Models, "whisper-demo.bin")
	}
	maps.Copy(env, o.Env)
	if env["REPLYD_ADDR"] == "" {
		addr, err := FreeAddr()
		if err != nil {
			return nil, err
		}
		env["REPLYD_ADDR"] = addr
	}
	args := o.Args
	if len(args) == 0 {
		args = []string{"serve"}
	}
	p := &Proc{URL: "http://" + env["REPLYD_ADDR"], Addr: env["REPLYD_ADDR"], DataDir: o.DataDir,
		AdminKey: o.AdminKey, bin: o.Bin, env: env, done: make(chan struct{})}
	p.cmd = exec.Command(o.Bin, args...)
	p.cmd.Env = environ(env)
	var out io.Writer = &p.out
	if o.Output != nil {
		out = io.MultiWriter(&p.out, o.Output)
	}
	p.cmd.Stdout, p.cmd.Stderr = out, out
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		p.waitErr = p.cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// Output returns everything the process wrote so far (stdout and stderr).
func (p *Proc) Output() string { return p.out.String() }

// Tail returns the last n lines of Output.
func (p *Proc) Tail(n int) string { return Tail(p.out.String(), n) }

// Pid returns the process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Done is closed when the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// WaitReady polls /healthz until it answers 200. It fails when the process
// exits first, when ctx ends, or after limit.
func (p *Proc) WaitReady(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	c := &http.Client{Timeout: 2 * time.Second}
	for {
		select {
		case <-p.done:
			return fmt.Errorf("replyd exited before it was ready (%v):\n%s", p.waitErr, p.Tail(40))
		default:
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.URL+"/healthz", nil)
		if err != nil {
			return err
		}
		if resp, err := c.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("replyd did not answer /healthz 200 within %s:\n%s", limit, p.Tail(40))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// WaitExit waits up to limit for the process to exit and returns its exit
// code. It is an error when the process still runs after limit (it is left
// running) or when waiting failed for another reason than an exit status.
func (p *Proc) WaitExit(limit time.Duration) (int, error) {
	select {
	case <-p.done:
	case <-time.After(limit):
		return 0, fmt.Errorf("replyd still running after %s:\n%s", limit, p.Tail(40))
	}
	var ee *exec.ExitError
	if errors.As(p.waitErr, &ee) {
		return ee.ExitCode(), nil
	}
	return 0, p.waitErr
}

// Kill sends SIGKILL and waits until the process is gone. It does nothing
// when the process has already exited.
func (p *Proc) Kill() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// Stop sends SIGTERM and waits up to limit for a clean exit. It is an error
// when the exit status is not 0, or when the process outlives limit (it is
// then killed).
func (p *Proc) Stop(limit time.Duration) error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	code, err := p.WaitExit(limit)
	if err != nil {
		p.Kill()
		return fmt.Errorf("replyd did not stop within %s of SIGTERM; killed: %w", limit, err)
	}
	if code != 0 {
		return fmt.Errorf("replyd exited with %d after SIGTERM:\n%s", code, p.Tail(40))
	}
	return nil
}

// Run runs a replyd subcommand (e.g. "check") of p's binary with the
// environment p was started with, and returns its combined output.
func (p *Proc) Run(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, p.bin, args...)
	cmd.Env = environ(p.env)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// Request is one HTTP exchange with a replyd. JSON, when set, is marshalled
// as the body with Content-Type application/json; otherwise Body is sent
// with ContentType.
type Request struct {
	Method      string
	Path        string
	Header      map[string]string
	JSON        any
	Body        []byte
	ContentType string
	Timeout     time.Duration // a minute when zero
	// From is the loopback address the request comes from (any of
	// 127.0.0.0/8 on Linux), so that one test can play several clients;
	// empty means the system's choice.
	From string
}

// Response is what replyd answered.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// Do sends r and returns replyd's answer. A transport error is returned (the
// kill tests expect them); the Response is then zero.
func (p *Proc) Do(ctx context.Context, r Request) (Response, error) {
	var body io.Reader
	ctype := r.ContentType
	if r.JSON != nil {
		b, err := json.Marshal(r.JSON)
		if err != nil {
			return Response{}, err
		}
		body, ctype = bytes.NewReader(b), "application/json"
	} else if r.Body != nil {
		body = bytes.NewReader(r.Body)
	}
	method := r.Method
	if method == "" {
		method = http.MethodGet
	}
	req, err := http.NewRequestWithContext(ctx, method, p.URL+r.Path, body)
	if err != nil {
		return Response{}, err
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	for k, v := range r.Header {
		req.Header.Set(k, v)
	}
	timeout := r.Timeout
	if timeout == 0 {
		timeout = time.Minute
	}
	client := &http.Client{Timeout: timeout}
	if r.From != "" {
		client = ClientFrom(r.From, timeout)
	}
	resp, err := client.Do(req)
	if err != nil {
		return Response{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return Response{}, err
	}
	return Response{Status: resp.StatusCode, Header: resp.Header, Body: b}, nil
}

// ClientFrom returns an HTTP client whose connections (one per request) come
// from the local address ip. A request with "Expect: 100-continue" waits up
// to 10 s for the server's go-ahead before it sends its body.
func ClientFrom(ip string, timeout time.Duration) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
	return &http.Client{Timeout: timeout, Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true,
		ExpectContinueTimeout: 10 * time.Second}}
}

// AdminHeader is the X-ADMIN-KEY header of p's admin key.
func (p *Proc) AdminHeader() map[string]string {
	return map[string]string{"X-ADMIN-KEY": p.AdminKey}
}

// CreateAPIKey creates an API key for clientID with a rate limit of
// perMinute requests through the admin API and returns the key.
func (p *Proc) CreateAPIKey(ctx context.Context, clientID string, perMinute int) (string, error) {
	resp, err := p.Do(ctx, Request{Method: http.MethodPost, Path: "/v1/admin/keys", Header: p.AdminHeader(),
		JSON: map[string]any{"client_id": clientID, "rate_limit_per_minute": perMinute}})
	if err != nil {
		return "", err
	}
	var out struct {
		APIKey string `json:"api_key"`
	}
	if err := json.Unmarshal(resp.Body, &out); err != nil || out.APIKey == "" {
		return "", fmt.Errorf("creating an API key: status %d: %s", resp.Status, resp.Body)
	}
	return out.APIKey, nil
}

// InferForm returns a multipart /v1/infer body: the payload part (JSON) and,
// when audio is not nil, an audio part holding a WAV recording.
func InferForm(payload, audio []byte) (contentType string, body []byte) {
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	part := func(disposition, ctype string, data []byte) {
		h := textproto.MIMEHeader{}
		h.Set("Content-Disposition", disposition)
		h.Set("Content-Type", ctype)
		w, _ := mw.CreatePart(h) // writes to a bytes.Buffer: no error
		_, _ = w.Write(data)
	}
	part(`form-data; name="payload"`, "application/json", payload)
	if audio != nil {
		part(`form-data; name="audio"; filename="partner.wav"`, "audio/wav", audio)
	}
	_ = mw.Close()
	return mw.FormDataContentType(), b.Bytes()
}

// Build builds ./cmd/replyd of the module at repoRoot into out with the cgo
// flags of scripts/cgo-env.sh (the Makefile's, so the compiled llama.cpp
// comes from the build cache). The compiler's output goes to stderr.
func Build(ctx context.Context, repoRoot, out string, stderr io.Writer) error {
	cmd := exec.CommandContext(ctx, "bash", "-c", `source scripts/cgo-env.sh && exec go build -o "$0" ./cmd/replyd`, out)
	cmd.Dir = repoRoot
	cmd.Stdout, cmd.Stderr = stderr, stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("building ./cmd/replyd: %w", err)
	}
	return nil
}

// DemoModels writes the demo models into dir with `bin models demo`.
func DemoModels(ctx context.Context, bin, dir string) error {
	cmd := exec.CommandContext(ctx, bin, "models", "demo", "--dir", dir)
	cmd.Env = environ(nil)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("replyd models demo: %v\n%s", err, out)
	}
	return nil
}

// FreeAddr returns a 127.0.0.1 address with a port that was free a moment
// ago.
func FreeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// RandHex returns n random bytes, hex-encoded.
func RandHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails (crypto/rand's contract since Go 1.24)
	return hex.EncodeToString(b)
}

// Tail returns the last n lines of s.
func Tail(s string, n int) string {
	ls := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(ls) > n {
		ls = ls[len(ls)-n:]
	}
	return strings.Join(ls, "\n")
}

// environ is this process's environment without any REPLYD_* variable, plus
// env (sorted, so that a process's environment is reproducible).
func environ(env map[string]string) []string {
	var out []string
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "REPLYD_") {
			out = append(out, e)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(env)) {
		out = append(out, k+"="+env[k])
	}
	return out
}

// SyncBuffer is a bytes.Buffer that several goroutines (or C threads
// calling back into Go) may write to and read at once: a process's output,
// a logger's sink.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what has been written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
