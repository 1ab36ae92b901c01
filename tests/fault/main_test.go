// Package fault runs the real replyd binary through the failures an
// appliance meets (kill -9 mid-write, a read-only or full data directory, a
// second instance on the same data) and through the security properties the
// API promises (OTP lockout, revoked keys, admin-only endpoints, size limits,
// no path traversal, no secrets or dialog text in the log output).
//
// The binary is $REPLYD_BIN when set; otherwise TestMain builds ./cmd/replyd
// with the cgo flags of scripts/cgo-env.sh (the Makefile's flags, so the
// build cache is shared and llama.cpp is not rebuilt). Every server listens
// on 127.0.0.1 only.
package fault

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/replyd/replyd/internal/testutil"
)

var (
	replydBin string // the binary under test
	demoDir   string // llm-demo.gguf and whisper-demo.bin
	repoRoot  string
)

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	var err error
	repoRoot, err = filepath.Abs("../..")
	if err != nil {
		fmt.Fprintln(os.Stderr, "fault:", err)
		return 1
	}
	tmp, err := os.MkdirTemp("", "replyd-fault-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "fault:", err)
		return 1
	}
	defer os.RemoveAll(tmp)

	replydBin = os.Getenv("REPLYD_BIN")
	if replydBin == "" {
		replydBin = filepath.Join(tmp, "replyd")
		// Same flags as `make build` (the cgo flags of scripts/cgo-env.sh,
		// no -trimpath): the compiled llama.cpp comes from the cache.
		build := exec.Command("bash", "-c", `source scripts/cgo-env.sh && exec go build -o "$0" ./cmd/replyd`, replydBin)
		build.Dir = repoRoot
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		fmt.Fprintln(os.Stderr, "fault: building ./cmd/replyd (set REPLYD_BIN to use a built binary)")
		if err := build.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "fault: building replyd failed:", err)
			return 1
		}
	} else if replydBin, err = filepath.Abs(replydBin); err != nil {
		fmt.Fprintln(os.Stderr, "fault:", err)
		return 1
	}
	demoDir = filepath.Join(tmp, "models")
	if out, err := exec.Command(replydBin, "models", "demo", "--dir", demoDir).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "fault: replyd models demo: %v\n%s", err, out)
		return 1
	}
	return m.Run()
}

// proc is one replyd process.
type proc struct {
	t        *testing.T
	cmd      *exec.Cmd
	out      *testutil.SyncBuffer // stdout and stderr together
	url      string
	addr     string
	dataDir  string
	adminKey string
	done     chan struct{}
	waitErr  error
}

// procOpts configure a replyd process. Env adds or overrides REPLYD_*
// variables.
type procOpts struct {
	dataDir  string
	adminKey string
	env      map[string]string
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startProc starts `replyd serve` on a free loopback port. It does not wait
// for readiness: see waitReady. The process is killed at the end of the test
// if it still runs.
func startProc(t *testing.T, o procOpts) *proc {
	t.Helper()
	addr := freeAddr(t)
	if o.adminKey == "" {
		o.adminKey = "fault-admin-" + randHex(t, 16)
	}
	env := map[string]string{
		"REPLYD_ADDR":          addr,
		"REPLYD_DATA_DIR":      o.dataDir,
		"REPLYD_ADMIN_KEY":     o.adminKey,
		"REPLYD_LLM_MODEL":     filepath.Join(demoDir, "llm-demo.gguf"),
		"REPLYD_WHISPER_MODEL": filepath.Join(demoDir, "whisper-demo.bin"),
		"REPLYD_TLS":           "off",
		"REPLYD_OTP_CHANNEL":   "console",
	}
	for k, v := range o.env {
		env[k] = v
	}
	p := &proc{t: t, out: &testutil.SyncBuffer{}, url: "http://" + addr, addr: addr, dataDir: o.dataDir,
		adminKey: o.adminKey, done: make(chan struct{})}
	p.cmd = exec.Command(replydBin, "serve")
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "REPLYD_") {
			p.cmd.Env = append(p.cmd.Env, e)
		}
	}
	for k, v := range env {
		p.cmd.Env = append(p.cmd.Env, k+"="+v)
	}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.waitErr = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("replyd output (%s):\n%s", p.addr, lastLines(p.out.String(), 60))
		}
	})
	return p
}

// waitReady waits (two minutes at most) for /healthz to answer 200.
func (p *proc) waitReady() {
	p.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	c := &http.Client{Timeout: 2 * time.Second}
	for time.Now().Before(deadline) {
		select {
		case <-p.done:
			p.t.Fatalf("replyd exited before it was ready (%v):\n%s", p.waitErr, lastLines(p.out.String(), 40))
		default:
		}
		resp, err := c.Get(p.url + "/healthz")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	p.t.Fatalf("replyd did not answer /healthz 200 within 2 minutes:\n%s", lastLines(p.out.String(), 40))
}

// waitExit waits up to limit for the process to exit and returns its exit
// code; it fails the test when the process is still running.
func (p *proc) waitExit(limit time.Duration) int {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(limit):
		p.t.Fatalf("replyd still running after %s; output:\n%s", limit, lastLines(p.out.String(), 40))
	}
	if ee, ok := p.waitErr.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	if p.waitErr != nil {
		p.t.Fatalf("waiting for replyd: %v", p.waitErr)
	}
	return 0
}

// kill9 sends SIGKILL and waits for the process to be gone.
func (p *proc) kill9() {
	p.t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		p.t.Fatal(err)
	}
	<-p.done
}

// stop sends SIGTERM and waits (a minute at most) for a clean exit.
func (p *proc) stop() {
	p.t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.waitExit(time.Minute); code != 0 {
		p.t.Errorf("replyd exited with %d after SIGTERM", code)
	}
}

// request is one HTTP exchange with a replyd.
type request struct {
	method  string
	path    string
	header  map[string]string
	json    any
	body    []byte
	ctype   string
	timeout time.Duration
	from    string // loopback source address (127.x.y.z); empty: the default
}

// clientFrom returns an HTTP client whose connections come from the
// loopback address ip, so that one test can play several clients: Linux
// routes all of 127.0.0.0/8 to the loopback interface.
func clientFrom(ip string, timeout time.Duration) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
	return &http.Client{Timeout: timeout, Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}}
}

// do sends r and returns the status and body. A transport error is returned,
// not fatal: the kill test expects them.
func (p *proc) do(ctx context.Context, r request) (int, []byte, error) {
	var body io.Reader
	ctype := r.ctype
	if r.json != nil {
		b, err := json.Marshal(r.json)
		if err != nil {
			return 0, nil, err
		}
		body, ctype = bytes.NewReader(b), "application/json"
	} else if r.body != nil {
		body = bytes.NewReader(r.body)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, p.url+r.path, body)
	if err != nil {
		return 0, nil, err
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	for k, v := range r.header {
		req.Header.Set(k, v)
	}
	timeout := r.timeout
	if timeout == 0 {
		timeout = time.Minute
	}
	client := &http.Client{Timeout: timeout}
	if r.from != "" {
		client = clientFrom(r.from, timeout)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// must is do that fails the test on a transport error or an unexpected
// status.
func (p *proc) must(r request, want int) []byte {
	p.t.Helper()
	status, body, err := p.do(context.Background(), r)
	if err != nil {
		p.t.Fatalf("%s %s: %v", r.method, r.path, err)
	}
	if status != want {
		p.t.Fatalf("%s %s: status %d, want %d: %s", r.method, r.path, status, want, body)
	}
	return body
}

func (p *proc) adminHeader() map[string]string {
	return map[string]string{"X-ADMIN-KEY": p.adminKey}
}

type createdKey struct {
	APIKey     string `json:"api_key"`
	APIKeyHash string `json:"api_key_hash"`
}

// createKey makes an API key through the admin API.
func (p *proc) createKey(clientID string) createdKey {
	p.t.Helper()
	body := p.must(request{method: http.MethodPost, path: "/v1/admin/keys", header: p.adminHeader(),
		json: map[string]any{"client_id": clientID, "rate_limit_per_minute": 100000}}, http.StatusOK)
	var k createdKey
	if err := json.Unmarshal(body, &k); err != nil || k.APIKey == "" || k.APIKeyHash == "" {
		p.t.Fatalf("create key: %v: %s", err, body)
	}
	return k
}

// inferBody is a multipart /v1/infer body with the given speaker line.
func inferBody(t *testing.T, line string) (string, []byte) {
	t.Helper()
	payload, err := json.Marshal(map[string]any{
		"messages": []map[string]any{{"role": "speaker", "content": line}},
		"options":  map[string]any{"max_candidates": 2},
	})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	boundary := "fault-" + randHex(t, 8)
	fmt.Fprintf(&b, "--%s\r\nContent-Disposition: form-data; name=\"payload\"\r\nContent-Type: application/json\r\n\r\n%s\r\n--%s--\r\n",
		boundary, payload, boundary)
	return "multipart/form-data; boundary=" + boundary, b.Bytes()
}

func (p *proc) infer(ctx context.Context, apiKey, line string) (int, []byte, error) {
	ct, body := inferBody(p.t, line)
	return p.do(ctx, request{method: http.MethodPost, path: "/v1/infer", header: map[string]string{"X-API-KEY": apiKey},
		body: body, ctype: ct, timeout: 2 * time.Minute})
}

func randHex(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func lastLines(s string, n int) string {
	ls := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(ls) > n {
		ls = ls[len(ls)-n:]
	}
	return strings.Join(ls, "\n")
}

// runReplyd runs a replyd subcommand with REPLYD_DATA_DIR set.
func runReplyd(t *testing.T, dataDir string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(replydBin, args...)
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "REPLYD_") {
			cmd.Env = append(cmd.Env, e)
		}
	}
	cmd.Env = append(cmd.Env, "REPLYD_DATA_DIR="+dataDir)
	out, err := cmd.CombinedOutput()
	return string(out), err
}
