package main

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/replyd/replyd/internal/replydproc"
)

// TestLiveRevokedKeyEndToEnd runs the real program (Silero VAD, Whisper and
// the language model on the demo models): a live session answers a spoken
// question; then the admin revokes the key, and the session closes with
// 4401 at once, with no further event, and a question spoken after the
// revocation gets nothing (no event, no logged turn). Before, the session
// stayed open and transcribed and answered the next turn in full.
func TestLiveRevokedKeyEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test starts the real binary")
	}
	const adminKey = "e2e-admin-key-revoke-0123456789abcd"
	question := spokenQuestion(t)
	lr := startLive(t, adminKey, "tablet-lost", "revoke-e2e")
	p, ctx, c, key := lr.p, lr.ctx, lr.c, lr.key
	stream(ctx, t, c, question)
	var got []string
	for ev := range lr.events {
		if ev.Event == "caption" { // the partner's words so far: any number, while they speak
			continue
		}
		got = append(got, ev.Event)
		if ev.Event == "candidates" || ev.Event == "error" || ev.Closed {
			break
		}
	}
	if s := strings.Join(got, ","); !strings.HasPrefix(s, "speech_start,end_of_turn,") || !strings.HasSuffix(s, ",candidates") {
		t.Fatalf("events before the revocation %s\n%s", s, p.Output())
	}

	p.Must(replydproc.Request{Method: http.MethodDelete, Path: "/v1/admin/keys/" + key.APIKeyHash, Header: p.AdminHeader()}, http.StatusOK)
	// The question again, after the revocation: the socket may already be
	// closed, so a failed write is what is expected, not a failure.
	for b := pcmBytes(question); len(b) > 0; b = b[min(3200, len(b)):] {
		if c.Write(ctx, websocket.MessageBinary, b[:min(3200, len(b))]) != nil {
			break
		}
		time.Sleep(66 * time.Millisecond)
	}
	var after []string
	var code websocket.StatusCode
	for ev := range lr.events {
		if ev.Closed {
			code = ev.Code
			break
		}
		after = append(after, ev.Event)
	}
	if code != 4401 || len(after) != 0 {
		t.Errorf("after the revocation: events %v, close %d; want none and 4401\n%s", after, code, p.Output())
	}
	// A new ticket is refused, and exactly one live turn was logged.
	if r := p.Call(replydproc.Request{Method: http.MethodPost, Path: "/v1/live/ticket", Header: map[string]string{"X-API-KEY": key.APIKey}}); r.Status != http.StatusUnauthorized {
		t.Errorf("a ticket after the revocation: %d %s", r.Status, r.Body)
	}
	logs := p.JSON("GET", "/v1/admin/logs?stream=infer", map[string]string{"X-ADMIN-KEY": adminKey}, nil, 200)
	items, _ := logs["items"].([]any)
	ok := 0
	for _, e := range items {
		if m, _ := e.(map[string]any); m != nil {
			if s, _ := m["message"].(string); strings.HasPrefix(s, "live turn ok") {
				ok++
			}
		}
	}
	if ok != 1 {
		t.Errorf("%d answered live turns logged, want the one before the revocation: %v", ok, items)
	}
}
