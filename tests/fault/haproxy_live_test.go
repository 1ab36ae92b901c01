package fault

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/replyd/replyd/internal/replydproc"
	"github.com/replyd/replyd/internal/shareddata"
	"github.com/replyd/replyd/internal/testutil"
)

// tunnelTimeout is the short "timeout tunnel" the live test gives HAProxy
// (REPLYD_LB_TUNNEL_TIMEOUT), in place of the file's 5 minutes.
const tunnelTimeout = 3 * time.Second

// TestHAProxyLive runs live sessions through scripts/haproxy.cfg (Debian's
// HAProxy, terminating TLS) in front of two boxes on one PostgreSQL: a
// ticket asked for through HAProxy opens GET /v1/live through HAProxy; the
// socket lands on the box that holds the key's dialogs (the box of its
// /v1/infer, by the shared logs' node), for keys of both boxes (the
// session is open there and not on the other box); a spoken question streamed at real
// time comes back through the proxy as text events (speech_start,
// end_of_turn, candidates) and is logged by that box; a session silent for
// twice the tunnel timeout but pinged by the tablet survives and answers
// another turn; one that nobody pings is closed by HAProxy after the tunnel
// timeout.
func TestHAProxyLive(t *testing.T) {
	question := shareddata.Speak(t, "Would you like a cup of tea with your lunch today?", "en-us", 0.3, 1.5, 0)
	c := startCluster(t, map[string]string{"REPLYD_TRUSTED_PROXIES": "127.0.0.1", "REPLYD_VAD_MODEL": shareddata.VADModel(t)})
	l := startHAProxy(t, c, "REPLYD_LB_TUNNEL_TIMEOUT="+tunnelTimeout.String())

	boxes := map[string]*testutil.Replyd{"box-a": c.a, "box-b": c.b}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	// Keys until both boxes are some key's home (the box of its
	// /v1/infer): each key's socket is open on its home and nowhere else.
	homeOf := func(k testutil.CreatedKey) string {
		t.Helper()
		l.infer(k.APIKey, "", []string{"Good morning."})
		nodes := nodesOf(t, c.a)[k.APIKeyHash]
		if len(nodes) != 1 {
			t.Fatalf("the key's /v1/infer landed on %v, want one box", nodes)
		}
		for n := range nodes {
			return n
		}
		return ""
	}
	seen := map[string]bool{}
	for i := 0; i < 20 && (i < 4 || len(seen) < 2); i++ {
		k := c.a.CreateKey(fmt.Sprintf("tablet-route-%d", i))
		home := homeOf(k)
		seen[home] = true
		s := l.openLive(ctx, k.APIKey)
		for name, p := range boxes {
			want := 0.0
			if name == home {
				want = 1
			}
			if got := liveSessions(t, p); got != want {
				t.Errorf("key %d (home %s): %s has %v live sessions open, want %v", i, home, name, got, want)
			}
		}
		_ = s.c.Close(websocket.StatusNormalClosure, "")
		<-s.closed
		for deadline := time.Now().Add(5 * time.Second); liveSessions(t, boxes[home]) != 0 && time.Now().Before(deadline); {
			time.Sleep(50 * time.Millisecond)
		}
	}
	if len(seen) != 2 {
		t.Fatalf("every key's home was %v: the hash did not spread them", seen)
	}

	k := c.a.CreateKey("tablet-live")
	home := homeOf(k)
	s := l.openLive(ctx, k.APIKey)
	defer s.c.CloseNow()
	// The tablet pings every second, as the page does (every 30 s against
	// the file's 5 minutes): an answer that takes longer than the short
	// tunnel timeout is not cut.
	stopPings := s.keepAlive(ctx, time.Second)
	s.turn(ctx, question)
	stopPings()
	// The turn was logged by the key's box, beside its /v1/infer.
	var after map[string]int
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if after = nodesOf(t, c.a)[k.APIKeyHash]; after[home] == 2 {
			break
		}
	}
	if len(after) != 1 || after[home] != 2 {
		t.Errorf("the key's log entries by box after a live turn: %v, want 2 on %s (its /v1/infer and the live turn)", after, home)
	}

	// Silent for twice the tunnel timeout, pinged every second: the
	// session lives on and hears the next turn.
	for end := time.Now().Add(2 * tunnelTimeout); time.Now().Before(end); time.Sleep(time.Second) {
		pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
		err := s.c.Ping(pctx)
		pcancel()
		if err != nil {
			t.Fatalf("a ping through HAProxy after %v of silence: %v", time.Since(end.Add(-2*tunnelTimeout)).Round(time.Millisecond), err)
		}
	}
	stopPings = s.keepAlive(ctx, time.Second)
	s.turn(ctx, question)
	stopPings()
	_ = s.c.Close(websocket.StatusNormalClosure, "")

	// Nobody pings (replyd's own ping comes every 20 s): HAProxy closes
	// the silent tunnel after its timeout, long before replyd's idle bound.
	idle := l.openLive(ctx, k.APIKey)
	defer idle.c.CloseNow()
	t0 := time.Now()
	select {
	case <-idle.closed:
		if d := time.Since(t0); d < tunnelTimeout-500*time.Millisecond || d > tunnelTimeout+5*time.Second {
			t.Errorf("the unpinged session was closed after %v, want about the tunnel timeout of %v", d.Round(time.Millisecond), tunnelTimeout)
		}
	case <-time.After(tunnelTimeout + 15*time.Second):
		t.Errorf("the unpinged session is still open %v after the tunnel timeout of %v", time.Since(t0).Round(time.Second)-tunnelTimeout, tunnelTimeout)
	}
}

// liveSocket is a live session through HAProxy: its events, in order, and
// closed when the socket ended.
type liveSocket struct {
	t      *testing.T
	c      *websocket.Conn
	events chan string
	closed chan struct{}
}

// openLive asks for a ticket through HAProxy with apiKey's X-API-KEY, opens
// its URL through HAProxy (wss://, HTTP/1.1, from the tablet's address)
// and sends the session's payload.
func (l *lb) openLive(ctx context.Context, apiKey string) *liveSocket {
	t := l.t
	t.Helper()
	resp, err := l.do(http.MethodPost, "/v1/live/ticket", map[string]string{"X-API-KEY": apiKey}, "", nil)
	var tk struct{ URL string }
	if err != nil || resp.Status != http.StatusCreated || json.Unmarshal(resp.Body, &tk) != nil || !strings.Contains(tk.URL, "route=") {
		t.Fatalf("ticket through HAProxy: %d %v %s", resp.Status, err, resp.Body)
	}
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}, Timeout: 5 * time.Second}
	// A WebSocket is an HTTP/1.1 upgrade: no HTTP/2 on this client.
	client := &http.Client{Transport: &http.Transport{
		DialContext:     dialer.DialContext,
		TLSClientConfig: &tls.Config{RootCAs: l.pool, ServerName: "localhost", MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}},
	}}
	c, hr, err := websocket.Dial(ctx, "wss"+strings.TrimPrefix(l.url, "https")+tk.URL, &websocket.DialOptions{HTTPClient: client})
	if err != nil {
		status := 0
		if hr != nil {
			status = hr.StatusCode
		}
		t.Fatalf("GET /v1/live through HAProxy: %d %v", status, err)
	}
	if err := c.Write(ctx, websocket.MessageText, []byte(`{"messages":[{"role":"disabled_person","content":"Hello."}],"dialog_id":"live-lb","options":{"max_candidates":2}}`)); err != nil {
		t.Fatal(err)
	}
	s := &liveSocket{t: t, c: c, events: make(chan string, 64), closed: make(chan struct{})}
	go func() {
		defer close(s.closed)
		for {
			typ, b, err := c.Read(ctx)
			if err != nil {
				return
			}
			var ev struct{ Event string }
			if typ != websocket.MessageText || json.Unmarshal(b, &ev) != nil {
				ev.Event = "not a JSON text frame"
			}
			s.events <- ev.Event
		}
	}()
	return s
}

// keepAlive pings the session every interval until the returned stop is
// called; a ping that fails fails the test.
func (s *liveSocket) keepAlive(ctx context.Context, interval time.Duration) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(interval):
			}
			pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
			err := s.c.Ping(pctx)
			pcancel()
			if err != nil && ctx.Err() == nil {
				s.t.Errorf("a ping through HAProxy: %v", err)
				return
			}
		}
	}()
	return func() { cancel(); <-done }
}

// turn streams pcm at real time and waits for the turn's answer: the
// events must be speech_start, end_of_turn, then candidates (a transcript
// may come between).
func (s *liveSocket) turn(ctx context.Context, pcm []float32) {
	t := s.t
	t.Helper()
	const frame = 1600 // 100 ms
	next := time.Now()
	for len(pcm) > 0 {
		n := min(frame, len(pcm))
		b := make([]byte, 2*n)
		for i, v := range pcm[:n] {
			binary.LittleEndian.PutUint16(b[2*i:], uint16(int16(max(-1, min(1, v))*32767)))
		}
		if err := s.c.Write(ctx, websocket.MessageBinary, b); err != nil {
			t.Fatal(err)
		}
		pcm = pcm[n:]
		next = next.Add(100 * time.Millisecond)
		time.Sleep(time.Until(next))
	}
	var got []string
	for {
		select {
		case ev := <-s.events:
			got = append(got, ev)
			if ev != "candidates" && ev != "error" && ev != "not a JSON text frame" {
				continue
			}
		case <-s.closed:
			t.Fatalf("the session closed during a turn, after the events %v", got)
		case <-time.After(2 * time.Minute):
			t.Fatalf("no answer within 2 minutes of the turn's end; events %v", got)
		}
		break
	}
	// Captions (the partner's words so far, while they speak) may come
	// between speech_start and end_of_turn: the order around them is checked.
	var turn []string
	for _, ev := range got {
		if ev != "caption" {
			turn = append(turn, ev)
		}
	}
	// Each reply comes as a candidate event as it is complete, before the
	// candidates answer (issue 42).
	if seq := strings.Join(turn, ","); !liveTurnEvents.MatchString(seq) {
		t.Fatalf("events through HAProxy: %v, want speech_start, end_of_turn, (transcript,) candidate..., candidates", got)
	}
	if ctx.Err() != nil {
		t.Fatal(errors.New("the test's time ran out"))
	}
}

// liveTurnEvents is a live turn's events (captions left out): the reply
// events of a turn with speech.
var liveTurnEvents = regexp.MustCompile(`^speech_start,end_of_turn,(transcript,)?(candidate,)+candidates$`)

// liveSessions reads replyd_live_sessions (the live sessions open now)
// from p's /metrics.
func liveSessions(t *testing.T, p *testutil.Replyd) float64 {
	t.Helper()
	body := p.Must(replydproc.Request{Path: "/metrics", Header: p.AdminHeader()}, 200)
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, "replyd_live_sessions "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	t.Fatal("/metrics has no replyd_live_sessions")
	return 0
}
