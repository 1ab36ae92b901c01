// Package testutil holds small helpers shared by replyd's tests.
package testutil

import (
	"encoding/json"
	"fmt"
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
// messaging app: it records the codes replyd sends as JSON {"code": …}.
type OTPInbox struct {
	URL   string
	mu    sync.Mutex
	codes []string
}

// NewOTPInbox starts an inbox that lives as long as t.
func NewOTPInbox(t testing.TB) *OTPInbox {
	in := &OTPInbox{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var m struct {
			Code string `json:"code"`
		}
		if err := json.NewDecoder(r.Body).Decode(&m); err != nil || m.Code == "" ||
			r.Header.Get("Content-Type") != "application/json" {
			http.Error(w, "bad webhook body", http.StatusBadRequest)
			return
		}
		in.mu.Lock()
		in.codes = append(in.codes, m.Code)
		in.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	in.URL = srv.URL
	return in
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
