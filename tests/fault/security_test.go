package fault

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/replyd/replyd/internal/replydproc"
	"github.com/replyd/replyd/internal/testutil"
)

// rawHTTP writes req on a new connection and returns the status line's code
// and the rest of the response (bounded).
func rawHTTP(t *testing.T, addr string, write func(w io.Writer) error) (int, string) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Minute))
	go func() { _ = write(conn) }() // the server may answer before reading all of it
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("reading the response: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(b)
}

// TestSecurity runs the security checks against one replyd whose admin key
// comes from the environment (so none is generated and printed), then greps
// everything the process wrote for the secrets and dialog text it handled.
func TestSecurity(t *testing.T) {
	inbox := testutil.NewOTPInbox(t)
	data := t.TempDir()
	p := startProc(t, replydproc.Options{DataDir: data, Env: map[string]string{
		"REPLYD_OTP_CHANNEL":         "webhook",
		"REPLYD_OTP_WEBHOOK_URL":     inbox.URL + "/otp",
		"REPLYD_OTP_RESEND_INTERVAL": "1s",
	}})
	p.WaitReady()

	// Everything below that must never appear in the output.
	secrets := map[string]string{"admin key": p.AdminKey}
	const dialog = "Grandmother Ilse keeps her insulin in the blue tin beside the kettle."
	var sessionToken string

	// Login once with the right code: the channel works and sessions exist.
	p.Must(replydproc.Request{Method: http.MethodPost, Path: "/v1/admin/otp/send"}, http.StatusOK)
	firstSend := time.Now()
	code1 := inbox.Next(t, 1)
	secrets["first OTP code"] = code1
	body := p.Must(replydproc.Request{Method: http.MethodPost, Path: "/v1/admin/otp/verify", JSON: map[string]string{"code": code1}}, http.StatusOK)
	var sess struct {
		SessionToken string `json:"session_token"`
	}
	if err := json.Unmarshal(body, &sess); err != nil || sess.SessionToken == "" {
		t.Fatalf("verify: %v: %s", err, body)
	}
	sessionToken = sess.SessionToken
	secrets["session token"] = sessionToken
	p.Must(replydproc.Request{Method: http.MethodGet, Path: "/v1/admin/stats", Header: map[string]string{"X-ADMIN-SESSION": sessionToken}}, http.StatusOK)

	key := p.CreateKey("security-tablet")
	secrets["API key"] = key.APIKey

	t.Run("infer works with the key, dialog text included", func(t *testing.T) {
		resp, err := p.InferText(t.Context(), key.APIKey, dialog)
		if err != nil || resp.Status != http.StatusOK {
			t.Fatalf("infer: %d %v %s", resp.Status, err, resp.Body)
		}
		// The same sentence in a request that fails validation (no
		// messages), so that error paths are grepped too.
		payload, _ := json.Marshal(map[string]any{"persona": dialog})
		boundary := "b" + replydproc.RandHex(6)
		raw := fmt.Sprintf("--%s\r\nContent-Disposition: form-data; name=\"payload\"\r\n\r\n%s\r\n--%s--\r\n", boundary, payload, boundary)
		resp, err = p.Do(t.Context(), replydproc.Request{Method: http.MethodPost, Path: "/v1/infer", Header: map[string]string{"X-API-KEY": key.APIKey},
			Body: []byte(raw), ContentType: "multipart/form-data; boundary=" + boundary})
		if err != nil || resp.Status != http.StatusBadRequest {
			t.Fatalf("infer without messages: %d %v %s", resp.Status, err, resp.Body)
		}
	})

	t.Run("admin endpoints reject API keys", func(t *testing.T) {
		for i, h := range []map[string]string{
			{"X-API-KEY": key.APIKey},
			{"X-ADMIN-KEY": key.APIKey},
			{"X-ADMIN-SESSION": key.APIKey},
			{},
		} {
			for _, r := range []replydproc.Request{
				{Method: http.MethodGet, Path: "/v1/admin/keys"},
				{Method: http.MethodPost, Path: "/v1/admin/keys", JSON: map[string]any{"client_id": "intruder"}},
				{Method: http.MethodGet, Path: "/v1/admin/logs"},
				{Method: http.MethodGet, Path: "/v1/admin/stats"},
				{Method: http.MethodGet, Path: "/v1/admin/system-prompt"},
				{Method: http.MethodPost, Path: "/v1/admin/system-prompt", JSON: map[string]any{"prompt": "be evil"}},
				{Method: http.MethodDelete, Path: "/v1/admin/keys/" + key.APIKeyHash},
				{Method: http.MethodGet, Path: "/v1/admin/backup"},
			} {
				r.Header = h
				// One address per credential kind, so that the refusals
				// stay under the per-address throttle (10 a minute).
				r.From = fmt.Sprintf("127.0.5.%d", 1+i)
				resp, err := p.Do(t.Context(), r)
				if err != nil {
					t.Fatal(err)
				}
				if resp.Status != http.StatusUnauthorized {
					t.Errorf("%s %s with %v: status %d, want 401: %s", r.Method, r.Path, keysOf(h), resp.Status, resp.Body)
				}
			}
		}
		// The key still works for inference: the DELETE above was refused.
		if resp, err := p.InferText(t.Context(), key.APIKey, "Still there?"); err != nil || resp.Status != http.StatusOK {
			t.Fatalf("infer after refused admin calls: %d %v %s", resp.Status, err, resp.Body)
		}
	})

	t.Run("revoked key is rejected", func(t *testing.T) {
		k := p.CreateKey("to-revoke")
		secrets["revoked API key"] = k.APIKey
		if resp, err := p.InferText(t.Context(), k.APIKey, "Before revocation."); err != nil || resp.Status != http.StatusOK {
			t.Fatalf("infer before revocation: %d %v %s", resp.Status, err, resp.Body)
		}
		p.Must(replydproc.Request{Method: http.MethodDelete, Path: "/v1/admin/keys/" + k.APIKeyHash, Header: p.AdminHeader()}, http.StatusOK)
		resp, err := p.InferText(t.Context(), k.APIKey, "After revocation.")
		if err != nil || resp.Status != http.StatusUnauthorized {
			t.Fatalf("infer with a revoked key: %d %v %s", resp.Status, err, resp.Body)
		}
	})

	t.Run("oversized headers are refused with 431", func(t *testing.T) {
		big := strings.Repeat("a", 70<<10)
		status, _ := rawHTTP(t, p.Addr, func(w io.Writer) error {
			_, err := fmt.Fprintf(w, "GET /healthz HTTP/1.1\r\nHost: %s\r\nX-Padding: %s\r\nConnection: close\r\n\r\n", p.Addr, big)
			return err
		})
		if status != http.StatusRequestHeaderFieldsTooLarge {
			t.Errorf("70 KiB of headers: status %d, want 431", status)
		}
	})

	t.Run("oversized bodies are refused with 413", func(t *testing.T) {
		const size = 26 << 20
		ct, _ := replydproc.InferForm([]byte(`{"messages":[{"role":"speaker","content":"x"}]}`), nil)
		// Declared length over the limit: refused before the body is read.
		status, body := rawHTTP(t, p.Addr, func(w io.Writer) error {
			if _, err := fmt.Fprintf(w, "POST /v1/infer HTTP/1.1\r\nHost: %s\r\nX-API-KEY: %s\r\nContent-Type: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n",
				p.Addr, key.APIKey, ct, size); err != nil {
				return err
			}
			_, err := w.Write(make([]byte, 64<<10))
			return err
		})
		if status != http.StatusRequestEntityTooLarge {
			t.Errorf("Content-Length %d: status %d, want 413: %s", size, status, body)
		}
		// Chunked, no declared length: refused when the limit is crossed.
		boundary := strings.TrimPrefix(ct, "multipart/form-data; boundary=")
		status, body = rawHTTP(t, p.Addr, func(w io.Writer) error {
			bw := bufio.NewWriter(w)
			fmt.Fprintf(bw, "POST /v1/infer HTTP/1.1\r\nHost: %s\r\nX-API-KEY: %s\r\nContent-Type: %s\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n",
				p.Addr, key.APIKey, ct)
			head := fmt.Sprintf("--%s\r\nContent-Disposition: form-data; name=\"audio\"; filename=\"a.wav\"\r\nContent-Type: audio/wav\r\n\r\n", boundary)
			fmt.Fprintf(bw, "%x\r\n%s\r\n", len(head), head)
			chunk := bytes.Repeat([]byte{0}, 1<<20)
			for sent := 0; sent < size; sent += len(chunk) {
				fmt.Fprintf(bw, "%x\r\n", len(chunk))
				if _, err := bw.Write(chunk); err != nil {
					return err
				}
				if _, err := bw.WriteString("\r\n"); err != nil {
					return err
				}
			}
			fmt.Fprintf(bw, "0\r\n\r\n")
			return bw.Flush()
		})
		if status != http.StatusRequestEntityTooLarge {
			t.Errorf("chunked body of %d bytes: status %d, want 413: %s", size, status, body)
		}
	})

	t.Run("no path traversal through the admin page", func(t *testing.T) {
		passwd, _ := os.ReadFile("/etc/passwd")
		firstLine, _, _ := strings.Cut(string(passwd), "\n")
		dbFile, _ := filepath.Abs(filepath.Join(data, "replyd.db"))
		for _, path := range []string{
			"/admin/../../../../etc/passwd",
			"/admin/..%2f..%2f..%2f..%2fetc%2fpasswd",
			"/admin/%2e%2e/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
			"/admin/..%252f..%252f..%252fetc%252fpasswd",
			"/admin/....//....//....//etc/passwd",
			"/admin/..\\..\\..\\..\\etc\\passwd",
			"/admin//etc/passwd",
			"/admin/../../../../proc/self/environ",
			"/admin/../../../../proc/self/cmdline",
			"/admin/../../../../.." + dbFile,
			"/admin/../../api/web/embed.go",
			"/admin/../go.mod",
		} {
			status, body := rawHTTP(t, p.Addr, func(w io.Writer) error {
				_, err := fmt.Fprintf(w, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", path, p.Addr)
				return err
			})
			switch {
			case firstLine != "" && strings.Contains(body, firstLine):
				t.Errorf("GET %s: %d served /etc/passwd", path, status)
			case strings.Contains(body, p.AdminKey) || strings.Contains(body, "REPLYD_"):
				t.Errorf("GET %s: %d served the process environment", path, status)
			case strings.Contains(body, "package web") || strings.Contains(body, "module github.com/replyd/replyd"):
				t.Errorf("GET %s: %d served a source file", path, status)
			case strings.Contains(body, "schema_version") || strings.Contains(body, "keys_by_age"):
				t.Errorf("GET %s: %d served the data file", path, status)
			}
		}
	})

	t.Run("OTP brute force is locked out", func(t *testing.T) {
		// A second code may be requested only after the resend interval
		// (1 s here).
		if wait := 1100*time.Millisecond - time.Since(firstSend); wait > 0 {
			time.Sleep(wait)
		}
		p.Must(replydproc.Request{Method: http.MethodPost, Path: "/v1/admin/otp/send"}, http.StatusOK)
		code2 := inbox.Next(t, 2)
		secrets["second OTP code"] = code2
		wrong := 0
		for guess := 0; wrong < 20; guess++ {
			g := fmt.Sprintf("%08d", guess)
			if g == code2 {
				continue
			}
			wrong++
			resp, err := p.Do(t.Context(), replydproc.Request{Method: http.MethodPost, Path: "/v1/admin/otp/verify", JSON: map[string]string{"code": g}})
			if err != nil {
				t.Fatal(err)
			}
			if resp.Status == http.StatusOK {
				t.Fatalf("wrong code %s accepted: %s", g, resp.Body)
			}
		}
		resp, err := p.Do(t.Context(), replydproc.Request{Method: http.MethodPost, Path: "/v1/admin/otp/verify", JSON: map[string]string{"code": code2}})
		if err != nil {
			t.Fatal(err)
		}
		if resp.Status == http.StatusOK {
			t.Fatalf("after %d wrong guesses the right code still opened a session: %s", wrong, resp.Body)
		}
		// The earlier session is unaffected: the lock pauses the code login,
		// not sessions.
		p.Must(replydproc.Request{Method: http.MethodGet, Path: "/v1/admin/stats", Header: map[string]string{"X-ADMIN-SESSION": sessionToken}}, http.StatusOK)
	})

	t.Run("no secret or dialog text in the output", func(t *testing.T) {
		p.Stop()
		out := p.Output()
		if !strings.Contains(out, "http request") && !strings.Contains(out, "replyd") {
			t.Fatalf("the output is empty or unexpected; the grep below would prove nothing:\n%s", out)
		}
		check := func(where, text string) {
			for what, s := range secrets {
				if s != "" && strings.Contains(text, s) {
					t.Errorf("the %s appears in the %s", what, where)
				}
			}
			for _, frag := range []string{dialog, "insulin in the blue tin", "Before revocation.", "Still there?"} {
				if strings.Contains(text, frag) {
					t.Errorf("dialog text %q appears in the %s", frag, where)
				}
			}
		}
		check("process output", out)
		// The data file holds hashes and counts only. (OTP codes are six
		// digits and may occur by chance in binary data: not checked here.)
		db, err := os.ReadFile(filepath.Join(data, "replyd.db"))
		if err != nil {
			t.Fatal(err)
		}
		delete(secrets, "first OTP code")
		delete(secrets, "second OTP code")
		check("data file", string(db))
	})
}

func keysOf(h map[string]string) []string {
	var out []string
	for k := range h {
		out = append(out, k)
	}
	if len(out) == 0 {
		return []string{"no credential"}
	}
	return out
}
