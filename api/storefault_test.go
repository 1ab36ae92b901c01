package api

import (
	"fmt"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/replyd/replyd/store"
)

// unreachable is what a PostgreSQL store returns while the database is down.
var unreachable = fmt.Errorf("store postgres://replyd@db:5432/replyd: get key: %w: dial tcp: connection refused", store.ErrUnavailable)

// TestStoreUnavailable: while the store cannot be reached, requests that
// need it get 503 store_unavailable with Retry-After (no internals in the
// body), /healthz stays 200 but says degraded, and both recover with the
// store.
func TestStoreUnavailable(t *testing.T) {
	e := newEnv(t)
	e.addKey("valid", 60)
	wantJSON(t, e.do(inferReq(t, "valid", payloadPart(simplePayload))), 200, okTextOnly)

	e.st.fail(unreachable)
	want := errJSON("store_unavailable", "the database is unreachable; retry shortly")
	for name, rec := range map[string]*httptest.ResponseRecorder{
		"infer":      e.do(inferReq(t, "valid", payloadPart(simplePayload))),
		"admin keys": e.do(adminReq("POST", "/v1/admin/keys", `{"client_id":"x"}`)),
	} {
		wantJSON(t, rec, 503, want)
		if got := rec.Header().Get("Retry-After"); got != "5" {
			t.Errorf("%s: Retry-After = %q, want 5", name, got)
		}
	}
	wantJSON(t, e.do(httptest.NewRequest("GET", "/healthz", nil)), 200,
		`{"status":"degraded","reason":"the store (database) cannot be reached","node":"box-test","demo_models":false,"engines":[{"name":"llm","ready":true,"demo":false},{"name":"stt","ready":true,"demo":false}],"m4a":false,"storage":{"writable":false,"problem":"the store (database) cannot be reached"}}`)

	e.st.fail(nil)
	wantJSON(t, e.do(inferReq(t, "valid", payloadPart(simplePayload))), 200, strings.Replace(okTextOnly, testID(1), testID(2), 1))
	wantJSON(t, e.do(httptest.NewRequest("GET", "/healthz", nil)), 200,
		`{"status":"ok","node":"box-test","demo_models":false,"engines":[{"name":"llm","ready":true,"demo":false},{"name":"stt","ready":true,"demo":false}],"m4a":false,"storage":{"writable":true}}`)
}

// failingLimiter is a store whose shared rate limiter cannot be reached.
type failingLimiter struct{ Store }

func (failingLimiter) Allow(string, int, time.Time) (bool, time.Duration, error) {
	return false, 0, unreachable
}

func (failingLimiter) Refund(string, time.Time) error { return unreachable }

// TestSharedLimiterUnavailable: a key is not admitted when the shared rate
// limit cannot be checked.
func TestSharedLimiterUnavailable(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.Store = failingLimiter{o.Store} })
	e.addKey("valid", 60)
	wantJSON(t, e.do(inferReq(t, "valid", payloadPart(simplePayload))), 503, errJSON("store_unavailable", "the database is unreachable; retry shortly"))
	if n := e.inf.count(); n != 0 {
		t.Errorf("%d inferences ran without a rate-limit check", n)
	}
}

// notSupportedStore is a store that cannot stream a backup (PostgreSQL).
type notSupportedStore struct{ Store }

func (notSupportedStore) Backup(w io.Writer) (int64, error) {
	return 0, fmt.Errorf("store: backup: %w: use pg_dump", store.ErrNotSupported)
}

// TestBackupNotSupported: on PostgreSQL the backup endpoint explains pg_dump
// with 501 instead of sending a file.
func TestBackupNotSupported(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.Store = notSupportedStore{o.Store} })
	rec := e.do(adminReq("GET", "/v1/admin/backup", ""))
	wantJSON(t, rec, 501, errJSON("not_supported", "this replyd keeps its data in PostgreSQL, which is backed up with pg_dump, not downloaded here (see the README: two boxes, one PostgreSQL)"))
	if cd := rec.Header().Get("Content-Disposition"); cd != "" {
		t.Errorf("Content-Disposition %q on an error", cd)
	}
}
