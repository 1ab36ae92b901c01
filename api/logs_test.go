package api

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/replyd/replyd/internal/secret"
)

// seedTraffic makes four inference calls and one admin action at known
// times and leaves the clock at t0+2h.
func seedTraffic(t *testing.T, e *env) {
	t.Helper()
	e.addKey("valid", 60)
	e.addKey("other", 60)
	ok := func(key, user string) {
		t.Helper()
		rec := e.do(inferReq(t, key, payloadPart(`{"user_id":"`+user+`","messages":[{"role":"speaker","content":"secret dialog"}]}`)))
		if rec.Code != 200 {
			t.Fatalf("seed: %d %s", rec.Code, rec.Body)
		}
	}
	ok("valid", "alice")                                                              // t0
	e.do(inferReq(t, "valid", payloadPart(`{"messages":[{"role":"robot"}]}`)))        // t0, 400, subject = key hash
	e.clock.Advance(time.Hour)                                                        //
	ok("other", "bob")                                                                // t0+1h
	ok("other", "alice")                                                              // t0+1h: another key's alice, another user
	e.do(adminReq("POST", "/v1/admin/system-prompt", `{"prompt":"p","version":"a"}`)) // t0+1h admin
	e.clock.Advance(time.Hour)
}

func TestLogs(t *testing.T) {
	e := newEnv(t)
	seedTraffic(t, e)
	hv, ho := secret.Hash("valid"), secret.Hash("other")
	admin := `{"timestamp":"2026-01-02T04:04:05Z","level":"info","message":"system prompt changed to version a","resource_type":"admin","resource_id":"system-prompt:a","stream_name":"admin","node":"box-test"}`
	alice2 := `{"timestamp":"2026-01-02T04:04:05Z","level":"info","message":"infer ok: 3 candidates in 0 ms","resource_type":"api_key","resource_id":"` + ho + `","client_id":"tablet-other","stream_name":"infer","status":200,"node":"box-test"}`
	bob := `{"timestamp":"2026-01-02T04:04:05Z","level":"info","message":"infer ok: 3 candidates in 0 ms","resource_type":"api_key","resource_id":"` + ho + `","client_id":"tablet-other","stream_name":"infer","status":200,"node":"box-test"}`
	bad := `{"timestamp":"2026-01-02T03:04:05Z","level":"warn","message":"infer failed: invalid_request","resource_type":"api_key","resource_id":"` + hv + `","client_id":"tablet-valid","stream_name":"infer","status":400,"node":"box-test"}`
	alice1 := `{"timestamp":"2026-01-02T03:04:05Z","level":"info","message":"infer ok: 3 candidates in 0 ms","resource_type":"api_key","resource_id":"` + hv + `","client_id":"tablet-valid","stream_name":"infer","status":200,"node":"box-test"}`

	tests := []struct {
		query  string
		status int
		body   string
	}{
		{"", 200, `{"items":[` + admin + `,` + alice2 + `,` + bob + `,` + bad + `,` + alice1 + `],"count":5,"since":"2026-01-01T05:04:05Z","window_seconds":86400}`},
		{"limit=2", 200, `{"items":[` + admin + `,` + alice2 + `],"count":2,"since":"2026-01-01T05:04:05Z","window_seconds":86400}`},
		{"window=90m", 200, `{"items":[` + admin + `,` + alice2 + `,` + bob + `],"count":3,"since":"2026-01-02T03:34:05Z","window_seconds":5400}`},
		{"window=7d", 200, `{"items":[` + admin + `,` + alice2 + `,` + bob + `,` + bad + `,` + alice1 + `],"count":5,"since":"2025-12-26T05:04:05Z","window_seconds":604800}`},
		{"window=15m", 200, `{"items":[],"count":0,"since":"2026-01-02T04:49:05Z","window_seconds":900}`},
		{"since=2026-01-02T04:04:05Z&window=1m", 200, `{"items":[` + admin + `,` + alice2 + `,` + bob + `],"count":3,"since":"2026-01-02T04:04:05Z","window_seconds":3600}`},
		{"since=2026-01-02T05:04:05%2B01:00", 200, `{"items":[` + admin + `,` + alice2 + `,` + bob + `],"count":3,"since":"2026-01-02T04:04:05Z","window_seconds":3600}`},
		{"level=warn", 200, `{"items":[` + bad + `],"count":1,"since":"2026-01-01T05:04:05Z","window_seconds":86400}`},
		{"stream=admin", 200, `{"items":[` + admin + `],"count":1,"since":"2026-01-01T05:04:05Z","window_seconds":86400}`},
		{"since=2026-01-03T00:00:00Z", 200, `{"items":[],"count":0,"since":"2026-01-03T00:00:00Z","window_seconds":0}`},
		{"stream=infer&level=info&limit=1", 200, `{"items":[` + alice2 + `],"count":1,"since":"2026-01-01T05:04:05Z","window_seconds":86400}`},

		{"window=abc", 400, errJSON("invalid_request", "window must be a duration such as 15m, 24h or 7d, between 1s and 366d")},
		{"window=0s", 400, errJSON("invalid_request", "window must be a duration such as 15m, 24h or 7d, between 1s and 366d")},
		{"window=-1h", 400, errJSON("invalid_request", "window must be a duration such as 15m, 24h or 7d, between 1s and 366d")},
		{"window=400d", 400, errJSON("invalid_request", "window must be a duration such as 15m, 24h or 7d, between 1s and 366d")},
		{"since=yesterday", 400, errJSON("invalid_request", "since must be an RFC 3339 timestamp such as 2026-01-02T15:04:05Z")},
		{"since=2026-01-02", 400, errJSON("invalid_request", "since must be an RFC 3339 timestamp such as 2026-01-02T15:04:05Z")},
		{"limit=0", 400, errJSON("invalid_request", "limit must be an integer between 1 and 1000")},
		{"limit=1001", 400, errJSON("invalid_request", "limit must be an integer between 1 and 1000")},
		{"level=debug", 400, errJSON("invalid_request", "level must be one of info, warn, error")},
		{"stream=http", 400, errJSON("invalid_request", "stream must be one of infer, admin, auth, steer")},
	}
	for _, tc := range tests {
		t.Run(tc.query, func(t *testing.T) {
			wantJSON(t, e.do(adminReq("GET", "/v1/admin/logs?"+tc.query, "")), tc.status, tc.body)
		})
	}
}

// noOutcomes is the outcome fields of a set without feedback.
const noOutcomes = `"outcomes":0,"accepted":0,"acceptance_rate":null,"rank_counts":{},"none_fit":0,"time_to_choice_ms":{"p50":null,"p95":null},"keystrokes_saved":0`

// byKey renders by_key entries without outcomes, ordered as the API orders
// them: most requests first, then by hash.
func byKey(entries ...keyStatsJSON) string {
	slices.SortFunc(entries, func(a, b keyStatsJSON) int {
		if a.Requests != b.Requests {
			return b.Requests - a.Requests
		}
		return strings.Compare(a.APIKeyHash, b.APIKeyHash)
	})
	var parts []string
	for _, k := range entries {
		parts = append(parts, fmt.Sprintf(`{"api_key_hash":%q,"client_id":%q,"requests":%d,"errors":%d,%s}`, k.APIKeyHash, k.ClientID, k.Requests, k.Errors, noOutcomes))
	}
	return `"by_key":[` + strings.Join(parts, ",") + `]`
}

func TestStats(t *testing.T) {
	e := newEnv(t)
	seedTraffic(t, e)
	hv, ho := secret.Hash("valid"), secret.Hash("other")
	all := `"errors":{"invalid_request":1},"latency_ms":{"p50":0,"p95":0},` + noOutcomes + `,` +
		byKey(keyStatsJSON{APIKeyHash: hv, ClientID: "tablet-valid", Requests: 2, Errors: 1}, keyStatsJSON{APIKeyHash: ho, ClientID: "tablet-other", Requests: 2}) +
		`,"by_prompt_version":[{"version":"1","inferences":3,"outcomes":0,"accepted":0,"acceptance_rate":null}],"by_model":[],"ksr":[]`
	late := `"errors":{},"latency_ms":{"p50":0,"p95":0},` + noOutcomes + `,` + byKey(keyStatsJSON{APIKeyHash: ho, ClientID: "tablet-other", Requests: 2}) +
		`,"by_prompt_version":[{"version":"1","inferences":2,"outcomes":0,"accepted":0,"acceptance_rate":null}],"by_model":[],"ksr":[]`
	none := `"errors":{},"latency_ms":{"p50":null,"p95":null},` + noOutcomes + `,"by_key":[],"by_prompt_version":[],"by_model":[],"ksr":[]`
	tests := []struct {
		query  string
		status int
		body   string
	}{
		// alice (hashed), the key hash of the failed call, bob: 3 users in 4 calls.
		{"", 200, `{"since":"2026-01-01T05:04:05Z","window_seconds":86400,"total_requests":4,"active_users":4,` + all + `}`},
		{"window=90m", 200, `{"since":"2026-01-02T03:34:05Z","window_seconds":5400,"total_requests":2,"active_users":2,` + late + `}`},
		{"since=" + url.QueryEscape("2026-01-02T03:04:05Z") + "&window=1m", 200, `{"since":"2026-01-02T03:04:05Z","window_seconds":7200,"total_requests":4,"active_users":4,` + all + `}`},
		{"window=2h&bucket=1h", 200, `{"since":"2026-01-02T03:04:05Z","window_seconds":7200,"total_requests":4,"active_users":4,` + all + `,
		  "series":[{"start":"2026-01-02T03:04:05Z","total_requests":2,"active_users":2,"outcomes":0,"accepted":0},{"start":"2026-01-02T04:04:05Z","total_requests":2,"active_users":2,"outcomes":0,"accepted":0}]}`},
		{"window=5m", 200, `{"since":"2026-01-02T04:59:05Z","window_seconds":300,"total_requests":0,"active_users":0,` + none + `}`},
		// A clock ahead of the box's: an empty window, not an error.
		{"since=2026-01-03T00:00:00Z", 200, `{"since":"2026-01-03T00:00:00Z","window_seconds":0,"total_requests":0,"active_users":0,` + none + `}`},
		{"since=2026-01-03T00:00:00Z&bucket=1h", 200, `{"since":"2026-01-03T00:00:00Z","window_seconds":0,"total_requests":0,"active_users":0,` + none + `,"series":[]}`},

		{"window=1x", 400, errJSON("invalid_request", "window must be a duration such as 15m, 24h or 7d, between 1s and 366d")},
		{"since=2026-13-01T00:00:00Z", 400, errJSON("invalid_request", "since must be an RFC 3339 timestamp such as 2026-01-02T15:04:05Z")},
		{"bucket=10s", 400, errJSON("invalid_request", "bucket must be a duration of at least 1m, such as 1h or 1d")},
		{"bucket=soon", 400, errJSON("invalid_request", "bucket must be a duration of at least 1m, such as 1h or 1d")},
		{"window=30d&bucket=1m", 400, errJSON("invalid_request", "bucket is too small for the window: at most 1000 buckets")},
	}
	for _, tc := range tests {
		t.Run(tc.query, func(t *testing.T) {
			wantJSON(t, e.do(adminReq("GET", "/v1/admin/stats?"+tc.query, "")), tc.status, tc.body)
		})
	}
}

func TestParseDuration(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"15m": 15 * time.Minute, "24h": 24 * time.Hour, "7d": 7 * 24 * time.Hour, "2w": 14 * 24 * time.Hour, "1h30m": 90 * time.Minute,
	} {
		if got, ok := parseDuration(in); !ok || got != want {
			t.Errorf("parseDuration(%q) = %v, %v; want %v", in, got, ok, want)
		}
	}
	for _, in := range []string{"", "d", "7", "x d", "1.5d", "-1d", "7dd", "999999999d"} {
		if _, ok := parseDuration(in); ok {
			t.Errorf("parseDuration(%q) accepted", in)
		}
	}
}
