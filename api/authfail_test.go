package api

import (
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/replyd/replyd/internal/secret"
	"github.com/replyd/replyd/store"
)

// TestFailedAuthIsThrottledNotLogged: bad API keys write nothing per
// request; past the per-address limit they get 429 with Retry-After, while
// a valid key from the same address is still served and another address is
// not throttled. One aggregated entry per address closes each minute.
func TestFailedAuthIsThrottledNotLogged(t *testing.T) {
	e := newEnv(t)
	good := e.addKey("valid", 0)
	bad := func(addr string) *httptest.ResponseRecorder {
		req := inferReq(t, "made-up-"+addr, payloadPart(simplePayload))
		req.RemoteAddr = addr + ":3000"
		return e.do(req)
	}
	for i := 0; i < 10; i++ {
		wantJSON(t, bad("10.9.0.1"), 401, errJSON("unauthorized", "X-API-KEY is not a valid API key"))
	}
	e.clock.Advance(20 * time.Second)
	for i := 0; i < 5; i++ {
		rec := bad("10.9.0.1")
		wantJSON(t, rec, 429, errJSON("rate_limited", "too many failed authentications from this address; retry in 40 s"))
		if rec.Header().Get("Retry-After") != "40" {
			t.Errorf("Retry-After %q", rec.Header().Get("Retry-After"))
		}
	}
	// A valid key from the throttled address is served.
	req := inferReq(t, good, payloadPart(simplePayload))
	req.RemoteAddr = "10.9.0.1:3001"
	if rec := e.do(req); rec.Code != 200 {
		t.Fatalf("valid key from a throttled address: %d %s", rec.Code, rec.Body)
	}
	// Another address is not throttled; X-Forwarded-For from an untrusted
	// peer does not make the throttled address look like another one.
	wantJSON(t, bad("10.9.0.2"), 401, errJSON("unauthorized", "X-API-KEY is not a valid API key"))
	req = inferReq(t, "made-up", payloadPart(simplePayload))
	req.RemoteAddr = "10.9.0.1:3002"
	req.Header.Set("X-Forwarded-For", "10.9.0.77")
	if rec := e.do(req); rec.Code != 429 {
		t.Errorf("a forged X-Forwarded-For escaped the throttle: %d", rec.Code)
	}

	// Only the valid call is in the log so far: nothing for 18 failures.
	logs := e.st.logsCopy()
	if len(logs) != 1 || logs[0].Status != 200 {
		t.Fatalf("log after failed authentications: %+v", logs)
	}
	// The windows close: one entry per address, with the count. The next
	// failure flushes them (the timer does it when none comes).
	e.clock.Advance(41 * time.Second)
	wantJSON(t, bad("10.9.0.3"), 401, errJSON("unauthorized", "X-API-KEY is not a valid API key"))
	var got []string
	for _, l := range e.st.logsCopy() {
		if l.StreamName == store.StreamAuth {
			if l.Level != store.LevelWarn || l.ResourceType != store.ResourceClient || !l.Timestamp.Equal(t0.Add(time.Minute)) || l.Node != "box-test" {
				t.Errorf("entry %+v", l)
			}
			got = append(got, l.ResourceID+": "+l.Message)
		}
	}
	// (10.9.0.2's window, opened 20 s later, is still open.)
	want := []string{
		"10.9.0.1: 16 failed authentications from 10.9.0.1 in one minute (api key 16)",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("aggregated entries:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// No active user was created by the failures.
	rec := e.do(adminReq("GET", "/v1/admin/stats?window=1h", ""))
	if !strings.Contains(rec.Body.String(), `"total_requests":1,"active_users":1`) {
		t.Errorf("stats: %s", rec.Body)
	}
	// Close logs the windows still open.
	e.srv.Close()
	logs = e.st.logsCopy()
	if len(logs) != 4 || logs[2].ResourceID != "10.9.0.2" || logs[3].ResourceID != "10.9.0.3" || !strings.HasPrefix(logs[3].Message, "1 failed authentications") {
		t.Errorf("entries at Close: %+v", logs[2:])
	}
}

// TestFailedAuthAddressesAreBounded: failures from more addresses than are
// tracked one by one end up in one entry; IPv6 counts by /64.
func TestFailedAuthAddressesAreBounded(t *testing.T) {
	f := newAuthFailures(3)
	now := t0
	for i := 0; i < maxTrackedAddrs+50; i++ {
		f.record(fmt.Sprintf("10.%d.%d.1", i/250, i%250), failAPIKey, now)
	}
	for i := 0; i < 5; i++ {
		f.record(fmt.Sprintf("2001:db8:1:2::%x", i+1), failAdmin, now)
	}
	sums := f.flush(now.Add(time.Minute), false)
	if len(sums) != maxTrackedAddrs+1 {
		t.Fatalf("%d summaries, want %d", len(sums), maxTrackedAddrs+1)
	}
	var other failSummary
	for _, s := range sums {
		if s.nAddrs > 0 {
			other = s
		}
	}
	if other.count != 55 || other.nAddrs != 51 || other.message() != "55 failed authentications from 51 other addresses in one minute (admin credential 5, api key 50)" {
		t.Errorf("other: %+v %q", other, other.message())
	}
	g := newAuthFailures(3)
	for i := 0; i < 3; i++ {
		g.record(fmt.Sprintf("2001:db8:1:2::%x", i+1), failAdmin, now)
	}
	if b, _ := g.blocked("2001:db8:1:2:aaaa::1", now); !b {
		t.Error("three failures in one IPv6 /64 do not block it")
	}
	if b, _ := g.blocked("2001:db8:1:3::1", now); b {
		t.Error("another /64 is blocked")
	}
}

// TestAdminKeyKDF: a wrong admin key is throttled per address before the
// KDF runs; the right key, once verified, is recognised without it; a
// legacy SHA-256 hash is upgraded to Argon2id on first use.
func TestAdminKeyKDF(t *testing.T) {
	e := newEnv(t)
	adminFrom := func(key, addr string) *httptest.ResponseRecorder {
		req := adminReq("GET", "/v1/admin/keys", "")
		req.Header.Set(HeaderAdminKey, key)
		req.RemoteAddr = addr + ":4000"
		return e.do(req)
	}
	// First use: the legacy hash matches and is replaced by Argon2id.
	if rec := adminFrom(testAdminKey, "10.8.0.1"); rec.Code != 200 {
		t.Fatalf("admin key: %d %s", rec.Code, rec.Body)
	}
	stored, _ := e.st.AdminKeyHash()
	if !strings.HasPrefix(stored, "$argon2id$") {
		t.Fatalf("stored hash %q was not upgraded", stored)
	}
	if ok, _ := secret.CheckAdminKey(testAdminKey, stored); !ok {
		t.Fatal("the upgraded hash does not match the key")
	}
	// Wrong keys: 401 ten times, then 429 without the KDF.
	for i := 0; i < 10; i++ {
		wantJSON(t, adminFrom(fmt.Sprintf("wrong-%d", i), "10.8.0.2"), 401, errJSON("unauthorized", msgBadAdminCred))
	}
	wantJSON(t, adminFrom("wrong-again", "10.8.0.2"), 429, errJSON("rate_limited", "too many failed authentications from this address; retry in 60 s"))
	wantJSON(t, adminFrom(testAdminKey+"x", "10.8.0.2"), 429, errJSON("rate_limited", "too many failed authentications from this address; retry in 60 s"))
	// The verified key is still served from the throttled address: it is
	// recognised by its SHA-256 alone.
	if rec := adminFrom(testAdminKey, "10.8.0.2"); rec.Code != 200 {
		t.Fatalf("verified admin key from a throttled address: %d %s", rec.Code, rec.Body)
	}
	// A reset admin key (another stored hash) is verified again.
	h, err := secret.HashAdminKey("a-new-admin-key-4f9c2e7a1b")
	if err != nil {
		t.Fatal(err)
	}
	if err := e.st.SetAdminKeyHash(h); err != nil {
		t.Fatal(err)
	}
	wantJSON(t, adminFrom(testAdminKey, "10.8.0.3"), 401, errJSON("unauthorized", msgBadAdminCred))
	if rec := adminFrom("a-new-admin-key-4f9c2e7a1b", "10.8.0.3"); rec.Code != 200 {
		t.Fatalf("new admin key: %d %s", rec.Code, rec.Body)
	}
}
