// Package testutil holds small helpers shared by replyd's tests.
package testutil

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
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
