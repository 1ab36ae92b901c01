// Package testutil holds small helpers shared by replyd's tests.
package testutil

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/replyd/replyd/internal/replydproc"
)

// SyncBuffer is a bytes.Buffer that several goroutines may write to and
// read at once (see replydproc.SyncBuffer).
type SyncBuffer = replydproc.SyncBuffer

// OTPInbox is a webhook endpoint standing in for the administrator's
// messaging app: it records the codes replyd sends as JSON {"code": …} and,
// apart, the alerts (messages with an empty code, such as "login by code is
// paused").
type OTPInbox struct {
	URL    string
	mu     sync.Mutex
	codes  []string
	alerts []string
}

// NewOTPInbox starts an inbox that lives as long as t.
func NewOTPInbox(t testing.TB) *OTPInbox {
	in := &OTPInbox{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var m struct {
			Code string `json:"code"`
			Text string `json:"text"`
		}
		if err := json.NewDecoder(r.Body).Decode(&m); err != nil || (m.Code == "" && m.Text == "") ||
			r.Header.Get("Content-Type") != "application/json" {
			http.Error(w, "bad webhook body", http.StatusBadRequest)
			return
		}
		in.mu.Lock()
		if m.Code == "" {
			in.alerts = append(in.alerts, m.Text)
		} else {
			in.codes = append(in.codes, m.Code)
		}
		in.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	in.URL = srv.URL
	return in
}

// Alerts returns the alerts received so far.
func (in *OTPInbox) Alerts() []string {
	in.mu.Lock()
	defer in.mu.Unlock()
	return append([]string(nil), in.alerts...)
}

// Codes returns the number of codes received so far.
func (in *OTPInbox) Codes() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return len(in.codes)
}

// Next waits (30 s at most) for the n-th code (1-based) and returns it.
func (in *OTPInbox) Next(t testing.TB, n int) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		in.mu.Lock()
		if len(in.codes) >= n {
			c := in.codes[n-1]
			in.mu.Unlock()
			return c
		}
		in.mu.Unlock()
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no OTP code #%d reached the webhook", n)
	return ""
}

// Tool returns the path of an external program a test needs (a linter, an
// analyzer): the first of paths that exists, else name on $PATH. Without it
// the test skips, saying so, or fails when REPLYD_REQUIRE_TOOLS=1 (`make
// test`, after scripts/deps.sh test installed it).
func Tool(t testing.TB, name, why string, paths ...string) string {
	t.Helper()
	for _, p := range paths {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	msg := fmt.Sprintf("%s is not installed (scripts/deps.sh test installs it): %s is NOT checked", name, why)
	if os.Getenv("REPLYD_REQUIRE_TOOLS") == "1" {
		t.Fatal(msg)
	}
	t.Skip("SKIP: " + msg)
	return ""
}

// Logger is a text logger into w, for tests that read what was logged.
func Logger(w io.Writer) *slog.Logger { return slog.New(slog.NewTextHandler(w, nil)) }
