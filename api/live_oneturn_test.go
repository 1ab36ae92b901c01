package api

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/coder/websocket"

	"github.com/replyd/replyd/internal/secret"
)

// oneTurnTicket asks for a one-turn ticket (turns=1) of key.
func oneTurnTicketFrom(t *testing.T, h http.Handler, key string) (int, liveTicketResponse, string) {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, "/v1/live/ticket?turns=1", nil)
	req.Header.Set(HeaderAPIKey, key)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	var r liveTicketResponse
	_ = json.Unmarshal(rec.Body.Bytes(), &r)
	return rec.Code, r, rec.Body.String()
}

// TestLiveOneTurn: a one-turn session (the page's Listen) hears one turn,
// answers it and closes with 1000; audio after the turn's end costs no
// work. It needs the box's live listening but not the key's live switch
// (which governs continuous listening), and switching the key's live off
// does not close it.
func TestLiveOneTurn(t *testing.T) {
	le := newLiveEnv(t)
	le.do(adminReq(http.MethodPut, "/v1/admin/keys/"+secret.Hash(liveKey)+"/live", `{"enabled":false}`))
	// Continuous listening is refused for the key…
	req := httptest.NewRequest(http.MethodPost, "/v1/live/ticket", nil)
	req.Header.Set(HeaderAPIKey, liveKey)
	rec := httptest.NewRecorder()
	le.h.ServeHTTP(rec, req)
	if rec.Code != http.StatusForbidden {
		t.Fatalf("continuous ticket with the key's live off: %d %s", rec.Code, rec.Body)
	}
	// …one turn is not.
	code, tk, body := oneTurnTicketFrom(t, le.h, liveKey)
	if code != http.StatusCreated || !strings.HasPrefix(tk.Ticket, liveTurnTicketPrefix) || !strings.HasPrefix(tk.URL, "/v1/live?ticket="+tk.Ticket) {
		t.Fatalf("one-turn ticket: %d %s", code, body)
	}
	c, status := le.dial(t, tk.Ticket, nil)
	if c == nil {
		t.Fatalf("dial: %d", status)
	}
	write(t, c, websocket.MessageText, []byte(livePayload))
	// Switching the key off again closes continuous sessions only.
	le.do(adminReq(http.MethodPut, "/v1/admin/keys/"+secret.Hash(liveKey)+"/live", `{"enabled":false}`))
	// A turn, then more speech that would be a second turn.
	sendAudio(t, c, append(append(pcm(1, true), pcm(1, false)...), append(pcm(1, true), pcm(1, false)...)...))
	names, _ := events(t, c, 4)
	if strings.Join(names, ",") != "speech_start,end_of_turn,transcript,candidates" {
		t.Fatalf("events %v", names)
	}
	if code := closeCode(t, c); code != websocket.StatusNormalClosure {
		t.Errorf("close code %d, want 1000 after the one turn", code)
	}
	if n := len(le.inf.requests()); n != 1 {
		t.Errorf("%d turns answered, want 1", n)
	}
}

// TestLiveTicketTurns: turns other than 1 or absent is 400 invalid_request;
// a box with live listening off refuses one turn too.
func TestLiveTicketTurns(t *testing.T) {
	le := newLiveEnv(t)
	for _, q := range []string{"2", "0", "x", "1,1"} {
		req := httptest.NewRequest(http.MethodPost, "/v1/live/ticket?turns="+q, nil)
		req.Header.Set(HeaderAPIKey, liveKey)
		rec := httptest.NewRecorder()
		le.h.ServeHTTP(rec, req)
		var e errorBody
		_ = json.Unmarshal(rec.Body.Bytes(), &e)
		if rec.Code != http.StatusBadRequest || e.Error != CodeInvalidRequest {
			t.Errorf("turns=%s: %d %s", q, rec.Code, rec.Body)
		}
	}
	off := newLiveEnv(t, func(o *Options) { o.LiveOff = true })
	if code, _, body := oneTurnTicketFrom(t, off.h, liveKey); code != http.StatusForbidden {
		t.Errorf("one turn on a box with live off: %d %s", code, body)
	}
}
