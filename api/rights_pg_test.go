package api

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/replyd/replyd/internal/pgtest"
	"github.com/replyd/replyd/internal/secret"
	"github.com/replyd/replyd/store"
	"github.com/replyd/replyd/store/postgres"
)

// twoBoxes are two Servers, each with its own connection pool to one
// PostgreSQL database (as two appliances behind HAProxy), serving live
// sessions over real listeners.
type twoBoxes struct {
	a, b *liveEnv
}

// newTwoBoxes starts PostgreSQL (skipped without it unless
// REPLYD_REQUIRE_POSTGRES is set) and two boxes on one database, with
// liveKey stored; recheck is each box's KeyRecheck.
func newTwoBoxes(t *testing.T, recheck time.Duration) twoBoxes {
	t.Helper()
	url := pgtest.Start(t).NewDatabase(t)
	box := func() *liveEnv {
		db, err := postgres.Open(context.Background(), url, postgres.Options{})
		if err != nil {
			t.Fatalf("postgres.Open: %v", err)
		}
		t.Cleanup(func() { _ = db.Close() })
		le := &liveEnv{inf: &liveInferer{}, voice: &loudVoice{}}
		le.env = newEnv(t, func(o *Options) {
			o.Store = db
			o.Inferer = le.inf
			o.Voice = le.voice
			o.Limits.LiveRealtimeFactor = 1e6
			o.Limits.KeyRecheck = recheck
			o.Limits.LiveCaptionEvery = -1 // the turn's events without captions
			o.Now = time.Now               // PostgreSQL's rate windows and tickets run on the real clock
		})
		le.ts = httptest.NewServer(le.h)
		t.Cleanup(le.ts.Close)
		return le
	}
	tb := twoBoxes{a: box(), b: box()}
	db := tb.a.srv.store
	if err := db.SetAdminKeyHash(secret.Hash(testAdminKey)); err != nil {
		t.Fatal(err)
	}
	if err := db.CreateKey(store.APIKey{Hash: secret.Hash(liveKey), ClientID: "tablet", Status: store.StatusActive, Scopes: []string{ScopeInfer}, RateLimitPerMinute: 600}); err != nil {
		t.Fatal(err)
	}
	return tb
}

// TestLiveRevokedOnAnotherBox: a key revoked through box A closes its
// session on box B (PostgreSQL shared): a turn spoken on B after the
// revocation gets nothing (closed 4401 at the turn's start, no engine
// work), and a silent session closes within KeyRecheck, by B's re-check.
func TestLiveRevokedOnAnotherBox(t *testing.T) {
	revoke := func(t *testing.T, tb twoBoxes) {
		t.Helper()
		if rec := tb.a.do(adminReq(http.MethodDelete, "/v1/admin/keys/"+secret.Hash(liveKey), "")); rec.Code != http.StatusOK {
			t.Fatalf("revoke on box A: %d %s", rec.Code, rec.Body)
		}
	}
	t.Run("next turn", func(t *testing.T) {
		tb := newTwoBoxes(t, time.Hour) // no re-check: the turn reads the key
		c := tb.b.open(t, livePayload)
		sendAudio(t, c, append(pcm(0.3, false), append(pcm(1.0, true), pcm(1.0, false)...)...))
		if names, _ := events(t, c, 4); strings.Join(names, ",") != "speech_start,end_of_turn,transcript,candidates" {
			t.Fatalf("events before the revocation %v", names)
		}
		revoke(t, tb)
		speakAfter(c)
		if code, evs := closedWith(t, c); code != CloseRevoked || len(evs) != 0 {
			t.Errorf("after the revocation on box A: events %v, close %d; want none and %d", evs, code, CloseRevoked)
		}
		if n := len(tb.b.inf.requests()); n != 1 {
			t.Errorf("box B made %d engine requests, want the one before the revocation", n)
		}
	})
	t.Run("silent", func(t *testing.T) {
		tb := newTwoBoxes(t, 100*time.Millisecond)
		c := tb.b.open(t, livePayload)
		waitHeld(t, tb.b.srv, secret.Hash(liveKey))
		revoke(t, tb)
		if code, evs := closedWith(t, c); code != CloseRevoked || len(evs) != 0 {
			t.Errorf("events %v, close %d; want none and %d", evs, code, CloseRevoked)
		}
	})
	t.Run("live switched off", func(t *testing.T) {
		tb := newTwoBoxes(t, 100*time.Millisecond)
		c := tb.b.open(t, livePayload)
		waitHeld(t, tb.b.srv, secret.Hash(liveKey))
		if rec := tb.a.do(adminReq(http.MethodPut, "/v1/admin/keys/"+secret.Hash(liveKey)+"/live", `{"enabled":false}`)); rec.Code != http.StatusOK {
			t.Fatalf("switch off on box A: %d %s", rec.Code, rec.Body)
		}
		if code, evs := closedWith(t, c); code != CloseSwitchedOff || len(evs) != 0 {
			t.Errorf("events %v, close %d; want none and %d", evs, code, CloseSwitchedOff)
		}
	})
}

// TestInferStreamRevokedOnAnotherBox: a streamed /v1/infer in progress on
// box B ends with an error event when box A revokes its key.
func TestInferStreamRevokedOnAnotherBox(t *testing.T) {
	tb := newTwoBoxes(t, 100*time.Millisecond)
	started := make(chan struct{}, 1)
	inf := &fakeInferer{fn: blockingInferer(started)}
	b := New(Options{Store: tb.b.srv.store, Inferer: inf, Limits: Limits{KeyRecheck: 100 * time.Millisecond}})
	req := inferReq(t, liveKey, payloadPart(`{"messages":[{"role":"speaker","audio":true}]}`), audioPart([]byte("RIFF")))
	req.Header.Set("Accept", MIMEEventStream)
	done := make(chan *httptest.ResponseRecorder)
	go func() {
		rec := httptest.NewRecorder()
		b.Handler().ServeHTTP(rec, req)
		done <- rec
	}()
	<-started
	if rec := tb.a.do(adminReq(http.MethodDelete, "/v1/admin/keys/"+secret.Hash(liveKey), "")); rec.Code != http.StatusOK {
		t.Fatalf("revoke on box A: %d %s", rec.Code, rec.Body)
	}
	var rec *httptest.ResponseRecorder
	select {
	case rec = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the stream went on after its key was revoked on the other box")
	}
	want := "event: transcript\ndata: {\"transcript\":\"heard\"}\n\n" +
		"event: error\ndata: {\"error\":\"unauthorized\",\"message\":\"the API key has been revoked\"}\n\n"
	if rec.Body.String() != want {
		t.Errorf("stream %q, want %q", rec.Body, want)
	}
}
