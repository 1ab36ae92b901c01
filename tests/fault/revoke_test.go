package fault

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/replyd/replyd/internal/replydproc"
	"github.com/replyd/replyd/internal/shareddata"
	"github.com/replyd/replyd/internal/testutil"
)

// boxSession is a live session opened directly on one box: its events in
// order, then the close code.
type boxSession struct {
	c      *websocket.Conn
	events chan string // closed after the close code was sent on code
	code   chan websocket.StatusCode
}

func openBoxSession(ctx context.Context, t *testing.T, p *testutil.Replyd, apiKey string) *boxSession {
	t.Helper()
	r := p.Call(replydproc.Request{Method: http.MethodPost, Path: "/v1/live/ticket", Header: map[string]string{"X-API-KEY": apiKey}})
	var tk struct{ URL string }
	if err := json.Unmarshal(r.Body, &tk); r.Status != http.StatusCreated || err != nil {
		t.Fatalf("ticket on %s: %d %s", p.Addr, r.Status, r.Body)
	}
	c, _, err := websocket.Dial(ctx, "ws://"+p.Addr+tk.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.CloseNow() })
	if err := c.Write(ctx, websocket.MessageText, []byte(`{"messages":[{"role":"disabled_person","content":"Hello."}],"dialog_id":"revoke","options":{"max_candidates":2}}`)); err != nil {
		t.Fatal(err)
	}
	s := &boxSession{c: c, events: make(chan string, 32), code: make(chan websocket.StatusCode, 1)}
	go func() {
		defer close(s.events)
		for {
			_, b, err := c.Read(ctx)
			if err != nil {
				s.code <- websocket.CloseStatus(err)
				return
			}
			var ev struct{ Event string }
			_ = json.Unmarshal(b, &ev)
			s.events <- ev.Event
		}
	}()
	return s
}

// speak streams pcm in 100 ms frames at about real time; it stops quietly
// when the socket is closed (after a revocation, that is the point).
func (s *boxSession) speak(ctx context.Context, pcm []float32) {
	for len(pcm) > 0 {
		n := min(1600, len(pcm))
		b := make([]byte, 2*n)
		for i, v := range pcm[:n] {
			binary.LittleEndian.PutUint16(b[2*i:], uint16(int16(max(-1, min(1, v))*32767)))
		}
		if s.c.Write(ctx, websocket.MessageBinary, b) != nil {
			return
		}
		pcm = pcm[n:]
		time.Sleep(90 * time.Millisecond)
	}
}

// closed waits for the session to close and returns the code and the
// events that came first.
func (s *boxSession) closed(t *testing.T) (websocket.StatusCode, []string) {
	t.Helper()
	var evs []string
	for ev := range s.events {
		evs = append(evs, ev)
	}
	return <-s.code, evs
}

// TestRevokedKeyEndsSessionsOnEveryBox: two boxes on one PostgreSQL, the
// real program. A key's live session is open on box B; the key is revoked
// through box A. A silent session on B closes with 4401 by B's own re-check
// (REPLYD's KeyRecheck, 2 s: nothing is said on the session); a session that
// answered a turn on B closes with 4401 and a question spoken after the
// revocation gets nothing. Before, B's sessions stayed open and answered.
func TestRevokedKeyEndsSessionsOnEveryBox(t *testing.T) {
	question := shareddata.Speak(t, "Would you like a cup of tea with your lunch today?", "en-us", 0.3, 1.5, 0)
	c := startCluster(t, map[string]string{"REPLYD_VAD_MODEL": shareddata.VADModel(t)})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	revoke := func(k testutil.CreatedKey) {
		c.a.Must(replydproc.Request{Method: http.MethodDelete, Path: "/v1/admin/keys/" + k.APIKeyHash, Header: c.a.AdminHeader()}, http.StatusOK)
	}

	t.Run("silent", func(t *testing.T) {
		k := c.a.CreateKey("tablet-silent")
		s := openBoxSession(ctx, t, c.b, k.APIKey)
		// The session is open on B (its payload taken) before the change.
		if err := s.c.Ping(ctx); err != nil {
			t.Fatal(err)
		}
		revoke(k)
		if code, evs := s.closed(t); code != 4401 || len(evs) != 0 {
			t.Errorf("box B's silent session: events %v, close %d; want none and 4401", evs, code)
		}
	})
	t.Run("spoken after", func(t *testing.T) {
		k := c.a.CreateKey("tablet-lost")
		s := openBoxSession(ctx, t, c.b, k.APIKey)
		s.speak(ctx, question)
		var before []string
		for ev := range s.events {
			before = append(before, ev)
			if ev == "candidates" || ev == "error" {
				break
			}
		}
		if len(before) == 0 || before[len(before)-1] != "candidates" {
			t.Fatalf("box B before the revocation: events %v", before)
		}
		revoke(k)
		s.speak(ctx, question)
		if code, evs := s.closed(t); code != 4401 || len(evs) != 0 {
			t.Errorf("box B after the revocation on box A: events %v, close %d; want none and 4401", evs, code)
		}
		// Neither box gives the key a new session.
		for _, p := range []*testutil.Replyd{c.a, c.b} {
			if r := p.Call(replydproc.Request{Method: http.MethodPost, Path: "/v1/live/ticket", Header: map[string]string{"X-API-KEY": k.APIKey}}); r.Status != http.StatusUnauthorized {
				t.Errorf("a ticket on %s after the revocation: %d", p.Addr, r.Status)
			}
		}
	})
}
