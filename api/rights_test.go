package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/replyd/replyd/engine"
	"github.com/replyd/replyd/internal/secret"
	"github.com/replyd/replyd/store"
)

// closedWith reads c until it closes and returns the close code and the
// events that came before it.
func closedWith(t *testing.T, c *websocket.Conn) (websocket.StatusCode, []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var got []string
	for {
		_, b, err := c.Read(ctx)
		if err != nil {
			return websocket.CloseStatus(err), got
		}
		var ev gotEvent
		_ = json.Unmarshal(b, &ev)
		got = append(got, ev.Event)
	}
}

// waitHeld waits until work of key hash holds a grant (a session is
// counted before its upgrade, and holds its grant once upgraded).
func waitHeld(t *testing.T, s *Server, hash string) {
	t.Helper()
	waitFor(t, func() bool {
		s.rights.mu.Lock()
		defer s.rights.mu.Unlock()
		return len(s.rights.by[hash]) > 0
	})
}

// speakAfter sends a turn, ignoring write errors: the session may be
// closing.
func speakAfter(c *websocket.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	b := append(pcm(0.3, false), append(pcm(1.0, true), pcm(1.0, false)...)...)
	for len(b) > 0 {
		n := min(3200, len(b))
		if c.Write(ctx, websocket.MessageBinary, b[:n]) != nil {
			return
		}
		b = b[n:]
	}
}

// TestLiveRevokedKeyClosesSession: revoking a key closes its open session
// at once with 4401 (KeyRecheck is an hour: not by a re-check), and a turn
// spoken after the revocation gets nothing (no event, no engine work). Before this, the session stayed open and the
// next turn was transcribed and answered.
func TestLiveRevokedKeyClosesSession(t *testing.T) {
	le := newLiveEnv(t, func(o *Options) { o.Limits.KeyRecheck = time.Hour })
	c := le.open(t, livePayload)
	sendAudio(t, c, append(pcm(0.3, false), append(pcm(1.0, true), pcm(1.0, false)...)...))
	if names, _ := events(t, c, 4); strings.Join(names, ",") != "speech_start,end_of_turn,transcript,candidates" {
		t.Fatalf("events %v", names)
	}
	rec := le.do(adminReq(http.MethodDelete, "/v1/admin/keys/"+secret.Hash(liveKey), ""))
	if rec.Code != http.StatusOK {
		t.Fatalf("revoke: %d %s", rec.Code, rec.Body)
	}
	// Closed at once, without waiting for a turn or a re-check.
	code, evs := closedWith(t, c)
	if code != CloseRevoked || len(evs) != 0 {
		t.Errorf("after the revocation: events %v, close %d; want none and %d", evs, code, CloseRevoked)
	}
	speakAfter(c)
	if n := len(le.inf.requests()); n != 1 {
		t.Errorf("%d engine requests, want the one before the revocation", n)
	}
	waitFor(t, func() bool { return le.srv.live.count() == 0 })
}

// TestLiveRevokeDropsTurnInProgress: the turn being answered when the key
// is revoked is canceled (its engine work ends) and nothing of it is sent.
func TestLiveRevokeDropsTurnInProgress(t *testing.T) {
	le := newLiveEnv(t, func(o *Options) { o.Limits.KeyRecheck = time.Hour })
	le.inf.block = true
	le.inf.started = make(chan struct{}, 1)
	le.inf.canceled = make(chan error, 1)
	c := le.open(t, livePayload)
	sendAudio(t, c, append(pcm(0.3, false), append(pcm(1.0, true), pcm(1.0, false)...)...))
	if names, _ := events(t, c, 2); strings.Join(names, ",") != "speech_start,end_of_turn" {
		t.Fatalf("events %v", names)
	}
	<-le.inf.started
	le.do(adminReq(http.MethodDelete, "/v1/admin/keys/"+secret.Hash(liveKey), ""))
	select {
	case err := <-le.inf.canceled:
		if err == nil {
			t.Error("the turn's work ended without being canceled")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the turn's engine work was not canceled")
	}
	if code, evs := closedWith(t, c); code != CloseRevoked || len(evs) != 0 {
		t.Errorf("events %v, close %d; want none and %d", evs, code, CloseRevoked)
	}
}

// TestLiveKeyEndedOnAnotherBox: a change made through the store alone (as
// another box sharing it makes it, without this box's handlers) ends the
// session at its next turn, and a silent session at the next re-check
// (KeyRecheck): revoked is 4401, live listening or the scope taken away
// 4403; a key that cannot be read for rightsReadFailures re-checks in a
// row closes it with 1013.
func TestLiveKeyEndedOnAnotherBox(t *testing.T) {
	hash := secret.Hash(liveKey)
	revoke := func(t *testing.T, le *liveEnv) {
		if _, err := le.st.RevokeKey(hash, t0); err != nil {
			t.Fatal(err)
		}
	}
	liveOff := func(t *testing.T, le *liveEnv) {
		if err := le.st.SetLiveOff(hash, true); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name   string
		change func(*testing.T, *liveEnv)
		code   websocket.StatusCode
	}{
		{"revoked", revoke, CloseRevoked},
		{"live switched off", liveOff, CloseSwitchedOff},
	} {
		t.Run(c.name+", next turn", func(t *testing.T) {
			le := newLiveEnv(t, func(o *Options) { o.Limits.KeyRecheck = time.Hour })
			ws := le.open(t, livePayload)
			waitHeld(t, le.srv, hash)
			c.change(t, le)
			speakAfter(ws)
			if code, evs := closedWith(t, ws); code != c.code || len(evs) != 0 {
				t.Errorf("events %v, close %d; want none and %d", evs, code, c.code)
			}
			if n := len(le.inf.requests()); n != 0 {
				t.Errorf("%d engine requests after the change", n)
			}
		})
		t.Run(c.name+", silent", func(t *testing.T) {
			le := newLiveEnv(t, func(o *Options) { o.Limits.KeyRecheck = time.Hour })
			ws := le.open(t, livePayload)
			waitHeld(t, le.srv, hash)
			c.change(t, le)
			le.srv.recheckRights() // what the watcher does each KeyRecheck
			if code, evs := closedWith(t, ws); code != c.code || len(evs) != 0 {
				t.Errorf("events %v, close %d; want none and %d", evs, code, c.code)
			}
		})
	}
	t.Run("scope taken away", func(t *testing.T) {
		le := newLiveEnv(t, func(o *Options) { o.Limits.KeyRecheck = time.Hour })
		ws := le.open(t, livePayload)
		waitHeld(t, le.srv, hash)
		// No route changes a key's scopes; the store is where a future
		// one (or another version on another box) would.
		le.st.scopesOverride(hash, []string{})
		le.srv.recheckRights()
		if code, _ := closedWith(t, ws); code != CloseSwitchedOff {
			t.Errorf("close %d, want %d", code, CloseSwitchedOff)
		}
	})
	t.Run("watcher", func(t *testing.T) {
		le := newLiveEnv(t, func(o *Options) { o.Limits.KeyRecheck = 20 * time.Millisecond })
		ws := le.open(t, livePayload)
		waitHeld(t, le.srv, hash)
		revoke(t, le)
		if code, evs := closedWith(t, ws); code != CloseRevoked || len(evs) != 0 {
			t.Errorf("events %v, close %d; want none and %d", evs, code, CloseRevoked)
		}
		// With nothing held, the watcher stops.
		waitFor(t, func() bool {
			le.srv.rights.mu.Lock()
			defer le.srv.rights.mu.Unlock()
			return !le.srv.rights.watching
		})
	})
	t.Run("store unreachable", func(t *testing.T) {
		le := newLiveEnv(t, func(o *Options) { o.Limits.KeyRecheck = time.Hour })
		ws := le.open(t, livePayload)
		waitHeld(t, le.srv, hash)
		le.st.fail(fmt.Errorf("test: %w", store.ErrUnavailable), "GetKey")
		for range rightsReadFailures - 1 {
			le.srv.recheckRights()
		}
		if le.srv.live.count() != 1 {
			t.Fatalf("closed after %d failed re-checks", rightsReadFailures-1)
		}
		le.srv.recheckRights()
		if code, _ := closedWith(t, ws); code != websocket.StatusTryAgainLater {
			t.Errorf("close %d, want %d", code, websocket.StatusTryAgainLater)
		}
	})
}

// blockingInferer transcribes (calling OnTranscript when there is audio),
// says it started, then waits for its context to end.
func blockingInferer(started chan<- struct{}) func(context.Context, engine.Request) (engine.Result, error) {
	return func(ctx context.Context, req engine.Request) (engine.Result, error) {
		if req.Steer == nil && req.Audio == nil && len(req.Messages) > 0 && req.Messages[0].Content == "first" {
			return echoInferer(ctx, req)
		}
		if req.OnTranscript != nil {
			req.OnTranscript(engine.Heard{Transcript: "heard"})
		}
		started <- struct{}{}
		<-ctx.Done()
		return engine.Result{}, &engine.Error{Kind: engine.KindCanceled, Message: "canceled", Err: ctx.Err()}
	}
}

// TestInferEndsWithKey: a /v1/infer in progress (plain, streamed, steered;
// and the admin page's try as the key)
// is canceled when its key is revoked, here or on another box (the store
// changed alone, then a re-check), and answers 401 (a stream: an error
// event) instead of its candidates.
func TestInferEndsWithKey(t *testing.T) {
	for _, where := range []string{"here", "another box"} {
		for _, kind := range []string{"plain", "stream", "steered", "try"} {
			t.Run(where+"/"+kind, func(t *testing.T) {
				started := make(chan struct{}, 1)
				e := newEnv(t, func(o *Options) { o.Limits.KeyRecheck = time.Hour })
				e.inf.fn = blockingInferer(started)
				key := e.addKey("rpd_ending", 1000)
				hash := secret.Hash("rpd_ending")
				parts := []part{payloadPart(`{"messages":[{"role":"speaker","audio":true}]}`), audioPart([]byte("RIFF"))}
				if kind == "steered" {
					parent := e.infer(key, `{"messages":[{"role":"speaker","content":"first"}]}`)
					parts = []part{payloadPart(steerPayload(fmt.Sprintf(`,"steer":{"words":["i"]},"parent_inference_id":%q`, parent)))}
				}
				req := inferReq(t, key, parts...)
				switch kind {
				case "stream":
					req.Header.Set("Accept", MIMEEventStream)
				case "try":
					// The admin page's Try: the key's end is 403 there
					// (401 would read as the admin's session ending).
					req.URL.Path, req.URL.RawQuery = "/v1/admin/try", "api_key_hash="+hash
					req.Header.Del(HeaderAPIKey)
					req.Header.Set(HeaderAdminKey, testAdminKey)
				}
				done := make(chan *httptest.ResponseRecorder)
				go func() { done <- e.do(req) }()
				<-started
				if where == "here" {
					if rec := e.do(adminReq(http.MethodDelete, "/v1/admin/keys/"+hash, "")); rec.Code != 200 {
						t.Fatalf("revoke: %d", rec.Code)
					}
				} else {
					if _, err := e.st.RevokeKey(hash, t0); err != nil {
						t.Fatal(err)
					}
					e.srv.recheckRights()
				}
				var rec *httptest.ResponseRecorder
				select {
				case rec = <-done:
				case <-time.After(10 * time.Second):
					t.Fatal("the request went on after its key was revoked")
				}
				if kind == "stream" {
					want := "event: transcript\ndata: {\"transcript\":\"heard\"}\n\n" +
						"event: error\ndata: {\"error\":\"unauthorized\",\"message\":\"the API key has been revoked\"}\n\n"
					if rec.Code != 200 || rec.Body.String() != want {
						t.Errorf("stream %d %q, want %q", rec.Code, rec.Body, want)
					}
					return
				}
				if kind == "try" {
					wantJSON(t, rec, http.StatusForbidden, errJSON(CodeForbidden, "the API key has been revoked"))
					return
				}
				wantJSON(t, rec, http.StatusUnauthorized, errJSON(CodeUnauthorized, "the API key has been revoked"))
			})
		}
	}
}

// TestRightsHeldOnlyWhileWorkRuns: a finished request or session leaves
// nothing in the registry (no grant, no watcher).
func TestRightsHeldOnlyWhileWorkRuns(t *testing.T) {
	le := newLiveEnv(t, func(o *Options) { o.Limits.KeyRecheck = 10 * time.Millisecond })
	le.infer(le.addKey("rpd_other", 100), `{"messages":[{"role":"speaker","content":"Tea?"}]}`)
	c := le.open(t, livePayload)
	waitHeld(t, le.srv, secret.Hash(liveKey))
	_ = c.Close(websocket.StatusNormalClosure, "")
	waitFor(t, func() bool {
		le.srv.rights.mu.Lock()
		defer le.srv.rights.mu.Unlock()
		return len(le.srv.rights.by) == 0 && !le.srv.rights.watching
	})
}

// TestRevocationBoundDocumented: client.md and openapi.yaml state the close
// code of a revoked key's session and the bound on other boxes, from the
// limits the server enforces.
func TestRevocationBoundDocumented(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.Limits.KeyRecheck = 3 * time.Second })
	md := e.do(httptest.NewRequest(http.MethodGet, "/client.md", nil)).Body.String()
	for _, want := range []string{"a live session closes with code\n  4401.", "at the latest 3 s later", "4401 the key\nwas revoked"} {
		if !strings.Contains(md, want) {
			t.Errorf("client.md lacks %q", want)
		}
	}
	y := e.do(httptest.NewRequest(http.MethodGet, "/openapi.yaml", nil)).Body.String()
	for _, want := range []string{"4401 the key was revoked", "live session closes with code\n        4401;", "at the latest\n        3 s later."} {
		if !strings.Contains(y, want) {
			t.Errorf("openapi.yaml lacks %q", want)
		}
	}
}

// TestPairingCodeAfterItsKeyRevoked: a pairing code that minted a key which
// was then revoked does not mint another (the code was spent), and the
// revoked key is refused.
func TestPairingCodeAfterItsKeyRevoked(t *testing.T) {
	e := newEnv(t)
	p := e.mustPairing(`{"client_id":"lost-tablet"}`)
	rec := e.do(pairReq(fmt.Sprintf(`{"code":%q}`, p.PairingCode), "192.0.2.7:1000"))
	if rec.Code != http.StatusOK {
		t.Fatalf("pair: %d %s", rec.Code, rec.Body)
	}
	var k keyCreateResponse
	decode(t, rec, &k)
	if rec := e.do(adminReq(http.MethodDelete, "/v1/admin/keys/"+k.APIKeyHash, "")); rec.Code != http.StatusOK {
		t.Fatalf("revoke: %d", rec.Code)
	}
	wantJSON(t, e.do(pairReq(fmt.Sprintf(`{"code":%q}`, p.PairingCode), "192.0.2.7:1000")), http.StatusUnauthorized, errJSON(CodeUnauthorized, wrongPairingCodeMessage))
	wantJSON(t, e.do(inferReq(t, k.APIKey, payloadPart(simplePayload))), http.StatusUnauthorized, errJSON(CodeUnauthorized, "X-API-KEY has been revoked"))
}

// TestAdminKeyReplacedElsewhere: the admin key verified once (and then
// recognised in memory) is refused from the next request on once another
// box, or admin-key --reset, stored another.
func TestAdminKeyReplacedElsewhere(t *testing.T) {
	e := newEnv(t)
	if rec := e.do(adminReq(http.MethodGet, "/v1/admin/keys", "")); rec.Code != http.StatusOK {
		t.Fatalf("admin key: %d", rec.Code)
	}
	if err := e.st.SetAdminKeyHash(secret.Hash("the next admin key, set elsewhere")); err != nil {
		t.Fatal(err)
	}
	wantJSON(t, e.do(adminReq(http.MethodGet, "/v1/admin/keys", "")), http.StatusUnauthorized, errJSON(CodeUnauthorized, "the admin credential is invalid or expired"))
}

// TestUnpairRevokesTheKey: a tablet that unpairs (DELETE /v1/pair with its
// key) gives its key up: its live session closes with 4401 at once, the
// key is revoked (a copy of it is refused), the admin log says so, and a
// second unpair or one without a key is 401.
func TestUnpairRevokesTheKey(t *testing.T) {
	le := newLiveEnv(t, func(o *Options) { o.Limits.KeyRecheck = time.Hour })
	c := le.open(t, livePayload)
	sendAudio(t, c, append(pcm(0.3, false), append(pcm(1.0, true), pcm(1.0, false)...)...))
	if names, _ := events(t, c, 4); strings.Join(names, ",") != "speech_start,end_of_turn,transcript,candidates" {
		t.Fatalf("events %v", names)
	}
	unpair := func(key string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodDelete, "/v1/pair", nil)
		if key != "" {
			req.Header.Set(HeaderAPIKey, key)
		}
		return le.do(req)
	}
	if rec := unpair(liveKey); rec.Code != http.StatusNoContent {
		t.Fatalf("unpair: %d %s", rec.Code, rec.Body)
	}
	if code, evs := closedWith(t, c); code != CloseRevoked || len(evs) != 0 {
		t.Errorf("after unpairing: events %v, close %d; want none and %d", evs, code, CloseRevoked)
	}
	k, err := le.st.GetKey(secret.Hash(liveKey))
	if err != nil || k.Status != store.StatusRevoked {
		t.Fatalf("the key after unpairing: %+v, %v", k, err)
	}
	for _, key := range []string{liveKey, ""} {
		if rec := unpair(key); rec.Code != http.StatusUnauthorized || !strings.Contains(rec.Body.String(), `"error":"unauthorized"`) {
			t.Errorf("unpair with %q after: %d %s", key, rec.Code, rec.Body)
		}
	}
	logs, err := le.st.Logs(store.LogQuery{Stream: store.StreamAdmin, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, l := range logs {
		found = found || (l.ResourceID == secret.Hash(liveKey) && strings.Contains(l.Message, "unpaired"))
	}
	if !found {
		t.Errorf("no admin log entry for the unpairing: %+v", logs)
	}
}
