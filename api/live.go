package api

// Live listening (issue 23): GET /v1/live?ticket=… upgrades to a WebSocket
// over which the page streams the partner's speech as it is spoken. The box
// runs voice detection on the frames as they arrive, decides when the turn
// ended, and answers each turn with the events of a streamed /v1/infer.
//
// Protocol (client.md, "Live session"):
//   - client → server, first message (text): the payload, the same JSON as
//     /v1/infer's payload part;
//   - client → server, binary messages: 16 kHz 16-bit little-endian mono
//     PCM, at most MaxLiveFrameBytes each, an even number of bytes;
//   - client → server, later text messages: controls (parseLiveControl):
//     {"type":"payload","payload":{…}} replaces the payload for the next
//     turns, {"type":"pause"} stops listening (the tablet speaks, the user
//     chooses) and drops the turn in progress, {"type":"resume"} listens
//     again, {"type":"end"} ends the turn now, {"type":"ping"} keeps an idle
//     session open, {"type":"captions","enabled":false} stops the caption
//     events (true starts them again; they are on by default);
//   - server → client (text): {"event": name, "data": {…}} with the names
//     and data of the streamed /v1/infer (transcript, candidates, error)
//     plus speech_start, end_of_turn and caption (the partner's words so
//     far, while they speak: Limits.LiveCaptionEvery).
//
// The turns themselves (the turn detector's events, the caption,
// speculative and committed passes, the reuse of speculative work, which
// turn supersedes which) are engine's: engine.LiveSession. This file holds
// the socket, its framing and close codes, and the checks before and
// during a session (rights.go); liveturn.go is what the turns need of the
// API (admission, the requests, the events and the answer),
// livesessions.go the open sessions, livemetrics.go their collectors.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/labstack/echo/v4"

	"github.com/replyd/replyd/engine"
	"github.com/replyd/replyd/store"
)

// Close codes of a live session beyond RFC 6455's (4000-4999 are the
// application's): 4400 the first message or a control was not valid,
// 4408 the client sent nothing for LiveIdle, 4403 live listening was
// switched off for the key or the box (or the key lost the scope infer)
// while the session was open; 4401 (CloseRevoked, rights.go) the key was
// revoked.
const (
	CloseInvalidMessage websocket.StatusCode = 4400
	CloseIdle           websocket.StatusCode = 4408
	CloseSwitchedOff    websocket.StatusCode = 4403
)

// liveSession is one open socket.
type liveSession struct {
	s    *Server
	c    echo.Context
	conn *websocket.Conn
	key  store.APIKey
	addr string
	log  *slog.Logger
	// ctx ends with the session; its cause says why.
	ctx    context.Context
	cancel context.CancelCauseFunc
	// oneTurn: a one-turn session (liveTurnTicketPrefix), which hears one
	// turn, answers it and closes.
	oneTurn bool

	wmu     sync.Mutex // one writer at a time
	endOnce sync.Once

	// Used by the reading goroutine only: the turns (made with the first
	// message), and the audio received since started (the real-time
	// bound).
	turns   *engine.LiveSession
	started time.Time
	samples int64
	// turnCount numbers the admitted turns: the "turn" of their events.
	turnCount int

	// lastRead is when the last message arrived (Unix nanoseconds).
	lastRead atomic.Int64
}

// errSessionEnded is the cause of a session context that ended.
var errSessionEnded = errors.New("the live session ended")

// handleLive serves GET /v1/live: the checks that answer with an HTTP error
// before the upgrade (origin, ticket, switches, per-address bound), then the
// session.
func (s *Server) handleLive(c echo.Context) error {
	r := c.Request()
	if origin := r.Header.Get(echo.HeaderOrigin); origin != "" && !sameOrigin(origin, r) && !slices.Contains(s.corsOrigins, strings.ToLower(origin)) {
		return errorf(CodeForbidden, "origin %s may not open a live session (REPLYD_CORS_ORIGINS)", originForMessage(origin))
	}
	if !strings.EqualFold(r.Header.Get(echo.HeaderUpgrade), "websocket") {
		return errorf(CodeInvalidRequest, "/v1/live is a WebSocket: the request must ask to upgrade to websocket")
	}
	if s.liveOff {
		return errorf(CodeForbidden, "live listening is switched off on this box (REPLYD_LIVE=off)")
	}
	key, err := s.takeLiveTicket(c)
	if err != nil {
		return err
	}
	oneTurn := oneTurnTicket(c.QueryParam("ticket"))
	if err := s.liveAllowedFor(key, oneTurn); err != nil {
		return err
	}
	if !slices.Contains(key.Scopes, ScopeInfer) {
		return errorf(CodeForbidden, "this API key lacks the scope %q", ScopeInfer)
	}
	sess := &liveSession{s: s, c: c, key: key, addr: addrBucket(ClientAddr(c)), log: s.reqLogger(c), oneTurn: oneTurn}
	if err := s.live.add(sess, sess.addr, s.limits.MaxLivePerAddr, s.limits.OverloadedRetryAfter); err != nil {
		return err
	}
	defer s.live.remove(sess, sess.addr)
	// The server's read and write timeouts were set on the connection for
	// this request; a session outlives them. Its own idle bound and pings
	// replace them.
	rc := http.NewResponseController(c.Response())
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Time{})
	conn, err := websocket.Accept(c.Response(), r, &websocket.AcceptOptions{
		// The origin was checked above, the way CORS checks it.
		InsecureSkipVerify: true,
	})
	if err != nil {
		// Accept answered the client itself.
		sess.log.Debug("live session upgrade failed", "error", err.Error())
		return nil
	}
	conn.SetReadLimit(s.limits.MaxLiveFrameBytes)
	if !s.live.activate(sess, conn) {
		_ = conn.Close(websocket.StatusGoingAway, "the server is shutting down; reconnect")
		return nil
	}
	s.metrics.live.sessions.Inc()
	defer s.metrics.live.sessions.Dec()
	// The key's end (revoked, scope or live listening taken away) ends
	// the session (rights.go).
	// A one-turn session needs the key's right to infer, not its live
	// switch (which governs continuous listening).
	right := rightLive
	if sess.oneTurn {
		right = rightInfer
	}
	defer s.holdRight(key.Hash, right, sess.endForRight)()
	sess.run()
	return nil
}

// run reads the session until it ends, then stops its work.
func (sess *liveSession) run() {
	s := sess.s
	defer func() {
		sess.cancel(errSessionEnded)
		if sess.turns != nil {
			sess.turns.Close()
		}
		sess.closeForRight() // the close code, before the connection goes
		_ = sess.conn.CloseNow()
	}()
	sess.lastRead.Store(time.Now().UnixNano())
	go sess.pinger()
	first := true
	for {
		// A canceled read context would close the connection at once: the
		// reader ends when the connection closes, and every end of the
		// session closes it (end, send, pinger), so that a session whose
		// work was canceled first (endForRight) still sends its close code.
		typ, data, err := sess.conn.Read(context.Background())
		sess.lastRead.Store(time.Now().UnixNano())
		if err != nil {
			switch {
			case websocket.CloseStatus(err) == websocket.StatusMessageTooBig || strings.Contains(err.Error(), "read limited"):
				sess.end(websocket.StatusMessageTooBig, fmt.Sprintf("a message is larger than %s", formatBytes(s.limits.MaxLiveFrameBytes)))
			}
			return
		}
		if first {
			first = false
			if typ != websocket.MessageText {
				sess.fail(CloseInvalidMessage, badRequest("the first message must be the payload, as JSON text"))
				return
			}
			if err := parseLivePayload(data, s.limits); err != nil {
				sess.fail(CloseInvalidMessage, err)
				return
			}
			sess.turns = sess.newTurns(data)
			sess.started = time.Now()
			continue
		}
		if typ == websocket.MessageBinary {
			if !sess.audio(data) {
				return
			}
			continue
		}
		m, err := parseLiveControl(data)
		if err != nil {
			sess.fail(CloseInvalidMessage, err)
			return
		}
		switch m.Type {
		case "payload":
			if err := parseLivePayload(m.Payload, s.limits); err != nil {
				sess.fail(CloseInvalidMessage, err)
				return
			}
			sess.turns.SetPayload(append([]byte(nil), m.Payload...))
		case "pause":
			sess.turns.Pause()
		case "resume":
			sess.turns.Resume()
			sess.started, sess.samples = time.Now(), 0
		case "end":
			sess.turns.End()
		case "captions":
			sess.turns.SetCaptions(*m.Enabled)
		}
	}
}

// newTurns starts the turn logic of the session, whose first payload is
// payload: the turns run in engine, on the box's voice detection and
// engines, and come back to the session as a host (liveturn.go).
func (sess *liveSession) newTurns(payload []byte) *engine.LiveSession {
	s := sess.s
	cfg := engine.LiveConfig{
		Turn: s.turnCfg, Voice: s.voice, Inferer: s.inferer,
		Sched: s.sched, VoiceWait: liveVoiceWait,
		Timeout: s.limits.InferTimeout, CaptionEvery: s.limits.LiveCaptionEvery,
		OneTurn: sess.oneTurn,
		// A one-turn session closes once its turn is answered.
		OnAnswered: func() { sess.end(websocket.StatusNormalClosure, "the turn was answered") },
		Dialogs:    keyDialogs{f: s.flights, key: sess.key.Hash},
		Metrics:    sessionMetrics{m: s.metrics.live, log: sess.log},
		Now:        s.now,
	}
	cfg.Turn.MaxTurn = min(cfg.Turn.MaxTurn, s.limits.MaxAudio)
	ctx := engine.WithRequestID(sess.ctx, sess.c.Response().Header().Get(echo.HeaderXRequestID))
	return engine.NewLiveSession(ctx, cfg, sess, payload)
}

// audio takes one binary message; false ends the session.
func (sess *liveSession) audio(data []byte) bool {
	s := sess.s
	if len(data)%2 != 0 {
		sess.fail(websocket.StatusUnsupportedData, badRequest("audio frames are 16-bit samples: an even number of bytes"))
		return false
	}
	if !sess.turns.Listening() {
		return true
	}
	// A client may not send much faster than real time (after a second
	// of slack): every sample costs voice detection.
	sess.samples += int64(len(data) / 2)
	f := s.limits.LiveRealtimeFactor
	if allowed := int64(f*time.Since(sess.started).Seconds()*engine.LiveRate) + engine.LiveRate; sess.samples > allowed {
		sess.fail(websocket.StatusPolicyViolation, &Error{Code: CodeRateLimited, Message: fmt.Sprintf("audio arrives faster than %g times real time", f)})
		return false
	}
	return sess.turns.Push(pcmFromS16LE(data), time.Now())
}

// liveVoiceWait bounds how long a live session's reader waits for a core
// for voice detection (engine.LiveSession.Push): under the 100 ms a page's frame
// lasts, so the reader keeps up with real time.
const liveVoiceWait = 50 * time.Millisecond

// send writes one event within LiveWriteTimeout; a client that does not
// take it in time (a slow or stalled socket) ends the session.
func (sess *liveSession) send(event string, data any) error {
	b, err := json.Marshal(liveEvent{Event: event, Data: data})
	if err != nil {
		return err
	}
	sess.wmu.Lock()
	defer sess.wmu.Unlock()
	if sess.ctx.Err() != nil {
		return context.Cause(sess.ctx)
	}
	ctx, cancel := context.WithTimeout(sess.ctx, sess.s.limits.LiveWriteTimeout)
	defer cancel()
	if err := sess.conn.Write(ctx, websocket.MessageText, b); err != nil {
		sess.cancel(errSessionEnded)
		_ = sess.conn.CloseNow()
		return err
	}
	return nil
}

// sendError sends an error event with the {error, message} body.
func (sess *liveSession) sendError(err error) {
	_ = sess.send("error", sess.errorData(err))
}

// errorData is the error event's data for err, logged when internal.
func (sess *liveSession) errorData(err error) errorBody {
	ae := toAPIError(err)
	if ae.Code == CodeInternal {
		sess.log.Error("live turn failed", "error", err.Error())
	}
	return errorBody{Error: ae.Code, Message: ae.Message}
}

// fail sends err as an error event and closes the session with code.
func (sess *liveSession) fail(code websocket.StatusCode, err error) {
	sess.sendError(err)
	sess.end(code, toAPIError(err).Message)
}

// end closes the session once with code and reason (cut to the 123 bytes
// a close frame holds), stopping its work.
func (sess *liveSession) end(code websocket.StatusCode, reason string) {
	sess.endOnce.Do(func() {
		if len(reason) > 123 {
			reason = reason[:123]
		}
		// The close handshake first (the reader sees the peer's answer),
		// then the work stops.
		sess.wmu.Lock()
		_ = sess.conn.Close(code, reason)
		sess.wmu.Unlock()
		sess.cancel(errSessionEnded)
	})
}

// pinger is the session's watchdog: it closes the session with 4408 when
// nothing arrived for LiveIdle, and pings the client every LivePing; a peer
// that does not answer within LivePing (gone without closing, or stalled)
// ends the session.
func (sess *liveSession) pinger() {
	l := sess.s.limits
	t := time.NewTicker(max(min(l.LivePing, l.LiveIdle)/4, 10*time.Millisecond))
	defer t.Stop()
	lastPing := time.Now()
	for {
		select {
		case <-sess.ctx.Done():
			return
		case <-t.C:
		}
		if time.Since(time.Unix(0, sess.lastRead.Load())) >= l.LiveIdle {
			sess.end(CloseIdle, fmt.Sprintf("nothing received for %s", l.LiveIdle))
			return
		}
		if time.Since(lastPing) < l.LivePing {
			continue
		}
		lastPing = time.Now()
		ctx, cancel := context.WithTimeout(sess.ctx, l.LivePing)
		err := sess.conn.Ping(ctx)
		cancel()
		if err != nil {
			if sess.ctx.Err() == nil {
				sess.log.Debug("live session closed: no answer to a ping")
			}
			sess.cancel(errSessionEnded)
			_ = sess.conn.CloseNow()
			return
		}
	}
}
