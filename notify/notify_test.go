package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// Every channel has the method set of api.Notifier.
var (
	_ Notifier = (*Console)(nil)
	_ Notifier = (*Webhook)(nil)
	_ Notifier = (*Telegram)(nil)
	_ Notifier = (*Ntfy)(nil)
	_ Notifier = (*Gotify)(nil)
)

const (
	code  = "493817"
	text  = "replyd admin code 493817, valid 5 minutes"
	token = "123456:SECRET-bot-token"
)

var expires = time.Date(2026, 11, 22, 1, 15, 0, 0, time.FixedZone("CET", 3600))

// recorded is what a test server saw.
type recorded struct {
	Method, Path, Query, ContentType string
	Header                           http.Header
	Body                             string
}

// MustServer starts a server that records one request and answers status
// with answer, and returns it with a function yielding the record.
func MustServer(tb testing.TB, status int, answer string) (*httptest.Server, func() recorded) {
	tb.Helper()
	var mu sync.Mutex
	var got recorded
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = recorded{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, ContentType: r.Header.Get("Content-Type"), Header: r.Header.Clone(), Body: string(body)}
		mu.Unlock()
		w.WriteHeader(status)
		_, _ = io.WriteString(w, answer)
	}))
	tb.Cleanup(srv.Close)
	return srv, func() recorded { mu.Lock(); defer mu.Unlock(); return got }
}

// MustNew builds a Notifier or fails the test.
func MustNew(tb testing.TB, cfg Config) Notifier {
	tb.Helper()
	n, err := New(cfg)
	if err != nil {
		tb.Fatalf("New: %v", err)
	}
	return n
}

// assertNoSecrets fails when err's message holds any of the secrets.
func assertNoSecrets(t *testing.T, err error, secrets ...string) {
	t.Helper()
	if err == nil {
		t.Fatal("expected an error")
	}
	for _, s := range append(secrets, code, text) {
		if s != "" && strings.Contains(err.Error(), s) {
			t.Errorf("error %q contains secret %q", err, s)
		}
	}
}

func TestConsole(t *testing.T) {
	var buf bytes.Buffer
	n := MustNew(t, Config{Console: &buf})
	if n.Channel() != "console" {
		t.Errorf("Channel = %q", n.Channel())
	}
	if err := n.Send(context.Background(), code, text, expires); err != nil {
		t.Fatal(err)
	}
	if err := n.Send(context.Background(), code, "", expires); err != nil {
		t.Fatal(err)
	}
	want := text + "\n" + "replyd admin login code: 493817 (valid until 00:15:00 UTC)\n"
	if diff := cmp.Diff(want, buf.String()); diff != "" {
		t.Errorf("console output (-want +got):\n%s", diff)
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("write " + code) }

func TestConsoleWriteError(t *testing.T) {
	err := MustNew(t, Config{Channel: "console", Console: failWriter{}}).Send(context.Background(), code, text, expires)
	assertNoSecrets(t, err)
}

func TestWebhook(t *testing.T) {
	srv, got := MustServer(t, http.StatusNoContent, "")
	n := MustNew(t, Config{Channel: "webhook", WebhookURL: srv.URL + "/hooks/otp-secret-path"})
	if n.Channel() != "webhook" {
		t.Errorf("Channel = %q", n.Channel())
	}
	if err := n.Send(context.Background(), code, text, expires); err != nil {
		t.Fatal(err)
	}
	want := recorded{
		Method: "POST", Path: "/hooks/otp-secret-path", ContentType: "application/json",
		Body: `{"code":"493817","text":"replyd admin code 493817, valid 5 minutes","expires_at":"2026-11-22T00:15:00Z"}`,
	}
	r := got()
	r.Header = nil
	if diff := cmp.Diff(want, r); diff != "" {
		t.Errorf("request (-want +got):\n%s", diff)
	}
}

func TestTelegram(t *testing.T) {
	srv, got := MustServer(t, http.StatusOK, `{"ok":true,"result":{}}`)
	n := MustNew(t, Config{Channel: "telegram", TelegramToken: token, TelegramChatID: "-100200300", TelegramAPIURL: srv.URL + "/"})
	if n.Channel() != "telegram" {
		t.Errorf("Channel = %q", n.Channel())
	}
	if err := n.Send(context.Background(), code, text, expires); err != nil {
		t.Fatal(err)
	}
	want := recorded{
		Method: "POST", Path: "/bot" + token + "/sendMessage", ContentType: "application/json",
		Body: `{"chat_id":"-100200300","text":"replyd admin code 493817, valid 5 minutes"}`,
	}
	r := got()
	r.Header = nil
	if diff := cmp.Diff(want, r); diff != "" {
		t.Errorf("request (-want +got):\n%s", diff)
	}
}

func TestTelegramDefaultsToPublicAPI(t *testing.T) {
	n := MustNew(t, Config{Channel: "telegram", TelegramToken: token, TelegramChatID: "1"})
	if base := n.(*Telegram).base; base != DefaultTelegramAPIURL {
		t.Errorf("base = %q", base)
	}
}

func TestTelegramOKFalse(t *testing.T) {
	srv, _ := MustServer(t, http.StatusOK, `{"ok":false,"description":"chat not found"}`)
	err := MustNew(t, Config{Channel: "telegram", TelegramToken: token, TelegramChatID: "1", TelegramAPIURL: srv.URL}).
		Send(context.Background(), code, text, expires)
	assertNoSecrets(t, err, token, srv.URL)
}

func TestNtfy(t *testing.T) {
	srv, got := MustServer(t, http.StatusOK, `{"id":"x"}`)
	for _, tc := range []struct {
		name, token, auth string
	}{
		{"anonymous", "", ""},
		{"with token", "tk_secret", "Bearer tk_secret"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := MustNew(t, Config{Channel: "ntfy", NtfyURL: srv.URL + "/replyd-admin", NtfyToken: tc.token})
			if n.Channel() != "ntfy" {
				t.Errorf("Channel = %q", n.Channel())
			}
			if err := n.Send(context.Background(), code, text, expires); err != nil {
				t.Fatal(err)
			}
			r := got()
			want := recorded{Method: "POST", Path: "/replyd-admin", ContentType: "text/plain; charset=utf-8", Body: text}
			h := r.Header
			r.Header = nil
			if diff := cmp.Diff(want, r); diff != "" {
				t.Errorf("request (-want +got):\n%s", diff)
			}
			if h.Get("Title") != Title || h.Get("Priority") != "high" || h.Get("Authorization") != tc.auth {
				t.Errorf("headers Title=%q Priority=%q Authorization=%q", h.Get("Title"), h.Get("Priority"), h.Get("Authorization"))
			}
		})
	}
}

func TestGotify(t *testing.T) {
	srv, got := MustServer(t, http.StatusOK, `{"id":1}`)
	n := MustNew(t, Config{Channel: "gotify", GotifyURL: srv.URL + "/gotify/", GotifyToken: "A+b/c"})
	if n.Channel() != "gotify" {
		t.Errorf("Channel = %q", n.Channel())
	}
	if err := n.Send(context.Background(), code, text, expires); err != nil {
		t.Fatal(err)
	}
	r := got()
	r.Header = nil
	want := recorded{Method: "POST", Path: "/gotify/message", Query: "token=A%2Bb%2Fc", ContentType: "application/json"}
	var body map[string]any
	if err := json.Unmarshal([]byte(r.Body), &body); err != nil {
		t.Fatalf("body %q: %v", r.Body, err)
	}
	r.Body = ""
	if diff := cmp.Diff(want, r); diff != "" {
		t.Errorf("request (-want +got):\n%s", diff)
	}
	wantBody := map[string]any{"title": Title, "message": text, "priority": float64(8)}
	if diff := cmp.Diff(wantBody, body); diff != "" {
		t.Errorf("body (-want +got):\n%s", diff)
	}
}

// channelConfigs returns a config per HTTP channel pointing at base.
func channelConfigs(base string) map[string]Config {
	return map[string]Config{
		"webhook":  {Channel: "webhook", WebhookURL: base + "/hook-secret"},
		"telegram": {Channel: "telegram", TelegramToken: token, TelegramChatID: "1", TelegramAPIURL: base},
		"ntfy":     {Channel: "ntfy", NtfyURL: base + "/topic-secret", NtfyToken: "tk_secret"},
		"gotify":   {Channel: "gotify", GotifyURL: base, GotifyToken: "gotify-secret"},
	}
}

func TestNon2xxIsErrorWithoutSecrets(t *testing.T) {
	for _, status := range []int{http.StatusFound, http.StatusUnauthorized, http.StatusInternalServerError} {
		// The server echoes the code; that must not reach the error either.
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Location", "http://elsewhere.invalid/")
			w.WriteHeader(status)
			_, _ = io.WriteString(w, "bad code "+code)
		}))
		for name, cfg := range channelConfigs(srv.URL) {
			err := MustNew(t, cfg).Send(context.Background(), code, text, expires)
			assertNoSecrets(t, err, token, "hook-secret", "topic-secret", "tk_secret", "gotify-secret", srv.URL)
			var se *StatusError
			if !errors.As(err, &se) || se.StatusCode != status || se.Channel != name {
				t.Errorf("%s, status %d: error %v is not a StatusError for it", name, status, err)
			}
			if !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), http.StatusText(status)) {
				t.Errorf("%s: error %q does not name channel and status", name, err)
			}
		}
		srv.Close()
	}
}

func TestTransportErrorWithoutSecrets(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	base := srv.URL
	srv.Close() // connection refused from now on
	for name, cfg := range channelConfigs(base) {
		err := MustNew(t, cfg).Send(context.Background(), code, text, expires)
		assertNoSecrets(t, err, token, "hook-secret", "topic-secret", "tk_secret", "gotify-secret", base+"/")
		if !strings.Contains(err.Error(), name) {
			t.Errorf("%s: error %q does not name the channel", name, err)
		}
	}
}

func TestTimeout(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	for name, cfg := range channelConfigs(srv.URL) {
		cfg.Timeout = 20 * time.Millisecond
		err := MustNew(t, cfg).Send(context.Background(), code, text, expires)
		assertNoSecrets(t, err, token, "hook-secret", "topic-secret", "tk_secret", "gotify-secret", srv.URL)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s: %v, want DeadlineExceeded", name, err)
		}
	}
}

func TestCanceledContext(t *testing.T) {
	srv, _ := MustServer(t, http.StatusOK, "")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := MustNew(t, Config{Channel: "webhook", WebhookURL: srv.URL}).Send(ctx, code, text, expires)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Send with canceled ctx: %v", err)
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want string // "" = valid
	}{
		{"default console", Config{}, ""},
		{"console", Config{Channel: "console"}, ""},
		{"unknown", Config{Channel: "sms"}, `unknown channel "sms"`},
		{"webhook missing", Config{Channel: "webhook"}, EnvWebhookURL},
		{"webhook relative", Config{Channel: "webhook", WebhookURL: "/hook"}, EnvWebhookURL + " must be an absolute"},
		{"webhook ftp", Config{Channel: "webhook", WebhookURL: "ftp://h/x"}, EnvWebhookURL},
		{"webhook ok", Config{Channel: "webhook", WebhookURL: "https://h/x"}, ""},
		{"telegram no token", Config{Channel: "telegram", TelegramChatID: "1"}, EnvTelegramToken},
		{"telegram bad token", Config{Channel: "telegram", TelegramToken: "a/b", TelegramChatID: "1"}, EnvTelegramToken},
		{"telegram no chat", Config{Channel: "telegram", TelegramToken: "t"}, EnvTelegramChatID},
		{"telegram bad api", Config{Channel: "telegram", TelegramToken: "t", TelegramChatID: "1", TelegramAPIURL: "relay"}, EnvTelegramAPIURL},
		{"telegram ok", Config{Channel: "telegram", TelegramToken: "t", TelegramChatID: "1"}, ""},
		{"ntfy missing", Config{Channel: "ntfy"}, EnvNtfyURL},
		{"ntfy ok", Config{Channel: "ntfy", NtfyURL: "http://ntfy.lan/replyd-admin"}, ""},
		{"gotify no url", Config{Channel: "gotify", GotifyToken: "t"}, EnvGotifyURL},
		{"gotify no token", Config{Channel: "gotify", GotifyURL: "http://g.lan"}, EnvGotifyToken},
		{"gotify ok", Config{Channel: "gotify", GotifyURL: "http://g.lan", GotifyToken: "t"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			_, newErr := New(tc.cfg)
			if tc.want == "" {
				if err != nil || newErr != nil {
					t.Fatalf("Validate = %v, New = %v; want valid", err, newErr)
				}
				return
			}
			if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate = %v; want ErrConfig mentioning %q", err, tc.want)
			}
			if !errors.Is(newErr, ErrConfig) {
				t.Errorf("New = %v; want ErrConfig", newErr)
			}
			for _, v := range []string{tc.cfg.WebhookURL, tc.cfg.TelegramToken, tc.cfg.TelegramAPIURL} {
				if len(v) > 3 && strings.Contains(err.Error(), v) {
					t.Errorf("Validate error %q echoes the value %q", err, v)
				}
			}
		})
	}
}

func TestConsoleFile(t *testing.T) {
	var buf bytes.Buffer
	file := filepath.Join(t.TempDir(), "otp-code.txt")
	n := MustNew(t, Config{Console: &buf, ConsoleFile: file})
	for _, c := range []string{"11111111", code} {
		if err := n.Send(context.Background(), c, "the code is "+c, expires); err != nil {
			t.Fatal(err)
		}
	}
	if err := n.Send(context.Background(), "", "login paused", expires); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if want := "the code is " + code + "\nlogin paused\n"; string(got) != want {
		t.Errorf("file holds %q, want %q", got, want)
	}
	if fi, _ := os.Stat(file); fi.Mode().Perm() != 0o600 {
		t.Errorf("file mode %v, want 0600", fi.Mode().Perm())
	}
	if strings.Contains(buf.String(), code) || strings.Contains(buf.String(), "11111111") || !strings.Contains(buf.String(), file) {
		t.Errorf("console output %q: it must name the file and hold no code", buf.String())
	}
	// A file that cannot be written is an error naming no code.
	bad := MustNew(t, Config{Console: &buf, ConsoleFile: filepath.Join(t.TempDir(), "missing", "otp-code.txt")})
	err = bad.Send(context.Background(), code, "the code is "+code, expires)
	if err == nil {
		t.Fatal("writing into a missing directory did not fail")
	}
	assertNoSecrets(t, err)
}
