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

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/replyd/replyd/engine"
	"github.com/replyd/replyd/engine/score"
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

// liveEvent is one server → client message.
type liveEvent struct {
	Event string `json:"event"`
	Data  any    `json:"data"`
}

// endOfTurnEvent is the data of end_of_turn: how much audio the turn holds.
type endOfTurnEvent struct {
	AudioMS int64 `json:"audio_ms"`
}

// liveControl is a client → server text message after the first.
type liveControl struct {
	Type    string          `json:"type"`
	Payload json.RawMessage `json:"payload"`
	// Enabled is the captions control's switch.
	Enabled *bool `json:"enabled"`
}

// captionEvent is the data of caption: the transcript of the turn's audio
// so far, for the page to show while the partner speaks; the turn's
// transcript event replaces it.
type captionEvent struct {
	Text    string `json:"text"`
	AudioMS int64  `json:"audio_ms"`
}

// parseLiveControl decodes a control message. Its errors are *Error with
// code invalid_request; they never quote the message.
func parseLiveControl(data []byte) (liveControl, error) {
	var m liveControl
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&m); err != nil {
		return m, jsonError("the control message", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return m, badRequest("a control message must hold exactly one JSON object")
	}
	switch m.Type {
	case "payload":
		if len(bytes.TrimSpace(m.Payload)) == 0 || bytes.Equal(bytes.TrimSpace(m.Payload), []byte("null")) {
			return m, badRequest("a payload control needs payload")
		}
	case "captions":
		if m.Enabled == nil {
			return m, badRequest("a captions control needs enabled (true or false)")
		}
	case "pause", "resume", "end", "ping":
	case "":
		return m, badRequest("type is required (payload, pause, resume, end, ping or captions)")
	default:
		return m, badRequest("type must be payload, pause, resume, end, ping or captions")
	}
	return m, nil
}

// parseLivePayload validates a live session's payload: /v1/infer's payload,
// whose partner turn is the live audio. Steering does not apply (a steered
// request refines an answer; it has no audio).
func parseLivePayload(data []byte, lim Limits) error {
	req, _, err := parsePayload(withLiveTurn(data), lim)
	if err != nil {
		return err
	}
	if req.Steer != nil {
		return badRequest("steer does not apply to a live session; send steered requests to /v1/infer")
	}
	return nil
}

// withLiveTurn returns the payload with the live turn as its only message
// when it has none (a session opened at the start of a conversation): the
// partner's first turn is the dialog. Any other payload, valid or not, is
// returned as it is.
func withLiveTurn(data []byte) []byte {
	var m map[string]json.RawMessage
	if json.Unmarshal(data, &m) != nil || m == nil {
		return data
	}
	if msgs, ok := m["messages"]; ok && !bytes.Equal(bytes.Join(bytes.Fields(msgs), nil), []byte("[]")) && !bytes.Equal(bytes.TrimSpace(msgs), []byte("null")) {
		return data
	}
	m["messages"] = json.RawMessage(`[{"role":"speaker","audio":true}]`)
	out, err := json.Marshal(m)
	if err != nil {
		return data
	}
	return out
}

// pcmFromS16LE converts 16-bit little-endian samples to float32.
func pcmFromS16LE(b []byte) []float32 {
	out := make([]float32, len(b)/2)
	for i := range out {
		out[i] = float32(int16(binary.LittleEndian.Uint16(b[2*i:]))) / 32768
	}
	return out
}

// aheadHearer is what an Inferer offers for speculative passes
// (*engine.Pipeline).
type aheadHearer interface {
	HearAhead(ctx context.Context, req engine.Request) (*engine.HeardAhead, error)
}

// aheadReplier is what an Inferer offers for replies generated from a
// speculative pass's transcript before the turn ends (*engine.Pipeline).
type aheadReplier interface {
	ReplyAhead(ctx context.Context, req engine.Request) (engine.Result, error)
}

// liveSessions are the open sessions, for the per-address bound, the
// shutdown and the per-key switch.
type liveSessions struct {
	mu      sync.Mutex
	all     map[*liveSession]struct{}
	perAddr map[string]int
	closed  bool
}

func newLiveSessions() *liveSessions {
	return &liveSessions{all: map[*liveSession]struct{}{}, perAddr: map[string]int{}}
}

// add registers sess from addr, or refuses it: 429 when addr holds max
// sessions, 503 while the server shuts down.
func (l *liveSessions) add(sess *liveSession, addr string, max int, retry time.Duration) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return &Error{Code: CodeNotReady, Message: "the server is shutting down; reconnect shortly", RetryAfter: retry}
	}
	if l.perAddr[addr] >= max {
		return &Error{Code: CodeRateLimited, Message: fmt.Sprintf("this address already has %d live sessions open", max), RetryAfter: retry}
	}
	l.perAddr[addr]++
	l.all[sess] = struct{}{}
	return nil
}

// activate gives sess its connection, under the lock that each reads
// it with; false when the server began shutting down meanwhile.
func (l *liveSessions) activate(sess *liveSession, conn *websocket.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	sess.conn = conn
	sess.ctx, sess.cancel = context.WithCancelCause(context.Background())
	return !l.closed
}

func (l *liveSessions) remove(sess *liveSession, addr string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.all[sess]; !ok {
		return
	}
	delete(l.all, sess)
	if l.perAddr[addr]--; l.perAddr[addr] <= 0 {
		delete(l.perAddr, addr)
	}
}

// each calls fn for every open session matching keep (nil: all).
func (l *liveSessions) each(keep func(*liveSession) bool, fn func(*liveSession)) {
	l.mu.Lock()
	list := make([]*liveSession, 0, len(l.all))
	for s := range l.all {
		if s.conn != nil && (keep == nil || keep(s)) {
			list = append(list, s)
		}
	}
	l.mu.Unlock()
	for _, s := range list {
		fn(s)
	}
}

// count returns the open sessions.
func (l *liveSessions) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.all)
}

// CloseLive closes every live session with 1001 (going away) and refuses
// new ones: the server is shutting down. The page reconnects to whichever
// box then answers. HTTPServer registers it with RegisterOnShutdown;
// http.Server.Shutdown does not track hijacked connections itself.
func (s *Server) CloseLive() {
	s.live.mu.Lock()
	s.live.closed = true
	s.live.mu.Unlock()
	var wg sync.WaitGroup
	s.live.each(nil, func(sess *liveSession) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sess.end(websocket.StatusGoingAway, "the server is shutting down; reconnect")
		}()
	})
	wg.Wait()
}

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
	// turn, answers it and closes; heard is set once its turn ended, from
	// when audio is dropped.
	oneTurn bool
	heard   bool
	// Captions (issue 35): noCaptions is the client's switch; capMu
	// orders a caption's send before the turn's pause or end, which
	// cancel the caption pass (capCancel) under it; capRunning is set
	// while a pass runs; capAt is the turn audio (samples) the last pass
	// began at.
	noCaptions bool
	capMu      sync.Mutex
	capCancel  context.CancelFunc
	capRunning atomic.Bool
	capAt      int

	wmu     sync.Mutex // one writer at a time
	endOnce sync.Once

	// Used by the reading goroutine only.
	payload []byte
	det     *engine.TurnDetector
	paused  bool
	turn    *liveTurn // the admitted turn being heard, nil when none
	started time.Time
	samples int64 // received since started
	// When the audio message being pushed arrived and the detector's
	// voiced-window count before it; when the last message holding a
	// voiced window arrived (voiceEnd).
	arrived   time.Time
	voicedAt  int64
	lastVoice time.Time

	passes sync.WaitGroup // final passes in flight
	// lastRead is when the last message arrived (Unix nanoseconds).
	lastRead atomic.Int64
}

// liveTurn is a turn from its start to its answer.
type liveTurn struct {
	done func(*error) // frees the key's in-progress slot, refunds a shed turn
	spec *specPass
	// order is the turn's arrival among the dialog's requests, taken when
	// it ended (dialogFlights.order).
	order uint64
}

// specPass is a speculative speech pass over a turn's audio so far.
type specPass struct {
	cancel context.CancelFunc
	done   chan struct{}
	heard  *engine.HeardAhead
	err    error
	// voiceEnd is when the last voiced window before the pause arrived,
	// started when the pass began.
	voiceEnd, started time.Time
	// payload is the session's payload the pass was made for; replied is
	// closed when the replies generated from its transcript
	// (aheadReplier) are done, nil when none were started. Nothing of
	// them is shown unless the committed turn is the same audio and
	// payload (finalPass).
	payload  []byte
	replied  chan struct{}
	reply    engine.Result
	replyErr error
}

// errSessionEnded is the cause of a session context that ended.
var errSessionEnded = errors.New("the live session ended")

// errNoReplyAhead: a speculative pass heard no transcript to reply to.
var errNoReplyAhead = errors.New("no transcript heard ahead")

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
		sess.dropTurn()
		sess.passes.Wait()
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
			sess.payload = data
			cfg := s.turnCfg
			cfg.MaxTurn = min(cfg.MaxTurn, s.limits.MaxAudio)
			sess.det = engine.NewTurnDetector(s.voice.NewVoiceStream(), cfg)
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
			sess.payload = append([]byte(nil), m.Payload...)
		case "pause":
			sess.paused = true
			sess.det.Reset()
			sess.dropTurn()
		case "resume":
			sess.paused = false
			sess.started, sess.samples = time.Now(), 0
		case "end":
			sess.det.Flush(sess.onTurn)
		case "captions":
			sess.noCaptions = !*m.Enabled
			if sess.noCaptions {
				sess.stopCaption()
			}
		}
	}
}

// audio takes one binary message; false ends the session.
func (sess *liveSession) audio(data []byte) bool {
	s := sess.s
	if len(data)%2 != 0 {
		sess.fail(websocket.StatusUnsupportedData, badRequest("audio frames are 16-bit samples: an even number of bytes"))
		return false
	}
	if sess.paused || sess.heard {
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
	pcm := pcmFromS16LE(data)
	arrived := time.Now()
	if sess.det.Windows(len(pcm)) == 0 {
		sess.push(pcm, arrived)
		return true
	}
	// Voice detection on live audio comes first of all work. Work that
	// holds every core without a yield point (a generation: over 20 s on a
	// loaded box) would stall this reader, which must go on reading for the
	// session's pongs and controls: after liveVoiceWait the windows run
	// outside the budget (about 1% of one core a session).
	wctx, cancel := context.WithTimeout(sess.ctx, liveVoiceWait)
	n, err := s.sched.AcquireAt(wctx, engine.PriorityVoice, 1, 1)
	cancel()
	if sess.ctx.Err() != nil {
		s.sched.Release(n)
		return false
	}
	if err != nil {
		n = 0
	}
	sess.push(pcm, arrived)
	s.sched.Release(n)
	s.metrics.live.observeHeld(sess.det.Held(), sess.det.InTurn())
	return sess.ctx.Err() == nil
}

// liveVoiceWait bounds how long a live session's reader waits for a core
// for voice detection (liveSession.audio): under the 100 ms a page's frame
// lasts, so the reader keeps up with real time.
const liveVoiceWait = 50 * time.Millisecond

// push runs the detector on samples that arrived at arrived, noting
// whether they held voice.
func (sess *liveSession) push(pcm []float32, arrived time.Time) {
	sess.arrived, sess.voicedAt = arrived, sess.det.Voiced()
	sess.det.Push(pcm, sess.onTurn)
	if sess.det.Voiced() != sess.voicedAt {
		sess.lastVoice = arrived
	}
	sess.maybeCaption()
}

// maybeCaption starts a caption pass over the turn's audio so far when the
// partner is speaking (a turn, no speculative pass) and LiveCaptionEvery
// more of it came since the last pass began, and none runs. It uses the
// speculative pass's machinery (HearAhead: speculative priority, stopped
// by any committed work), and is canceled at the turn's pause or end, so
// that it never delays the turn's own transcript.
func (sess *liveSession) maybeCaption() {
	t := sess.turn
	every := int(sess.s.limits.LiveCaptionEvery * engine.LiveRate / time.Second)
	if sess.noCaptions || every <= 0 || t == nil || t.spec != nil || sess.capRunning.Load() {
		return
	}
	pcm, probs := sess.det.TurnAudio()
	if len(pcm) < sess.capAt+every {
		return
	}
	h, ok := sess.s.inferer.(aheadHearer)
	if !ok {
		return
	}
	req, _, err := sess.request(sess.payload)
	if err != nil {
		return
	}
	req.PCM, req.VoiceProbs = pcm, probs
	sess.capAt = len(pcm)
	ctx, cancel := context.WithCancel(sess.ctx)
	sess.capMu.Lock()
	sess.capCancel = cancel
	sess.capMu.Unlock()
	sess.capRunning.Store(true)
	sess.s.metrics.live.passes.WithLabelValues("caption").Inc()
	go func() {
		defer sess.capRunning.Store(false)
		defer cancel()
		heard, err := h.HearAhead(ctx, req)
		if err != nil || heard == nil || heard.NoSpeech || strings.TrimSpace(heard.Transcript) == "" {
			return
		}
		sess.capMu.Lock()
		defer sess.capMu.Unlock()
		if ctx.Err() == nil {
			_ = sess.send("caption", captionEvent{Text: heard.Transcript, AudioMS: int64(len(pcm)) * 1000 / engine.LiveRate})
		}
	}()
}

// stopCaption cancels the caption pass, if one runs: once it returns, no
// caption of the turn so far is sent.
func (sess *liveSession) stopCaption() {
	sess.capMu.Lock()
	defer sess.capMu.Unlock()
	if sess.capCancel != nil {
		sess.capCancel()
		sess.capCancel = nil
	}
}

// voiceEnd is when the last voiced window heard so far arrived: the message
// being pushed when its windows so far held voice, else the last one that
// did. Called from onTurn.
func (sess *liveSession) voiceEnd() time.Time {
	if sess.det.Voiced() != sess.voicedAt {
		return sess.arrived
	}
	return sess.lastVoice
}

// onTurn handles the detector's events.
func (sess *liveSession) onTurn(ev engine.TurnEvent) {
	switch ev.Kind {
	case engine.TurnStart:
		t, err := sess.admitTurn()
		if err != nil {
			sess.sendError(err)
			return
		}
		sess.turn = t
		sess.capAt = 0
		sess.send("speech_start", struct{}{})
	case engine.TurnPause:
		// The caption pass gives way to the speculative one at once.
		sess.stopCaption()
		if sess.turn != nil {
			sess.turn.spec = sess.startSpec(ev.PCM, ev.Probs)
		}
	case engine.TurnResume:
		if sess.turn != nil && sess.turn.spec != nil {
			sess.turn.spec.cancel()
			sess.s.metrics.live.spec.WithLabelValues("canceled").Inc()
			sess.turn.spec = nil
		}
	case engine.TurnEnd:
		sess.stopCaption()
		t := sess.turn
		sess.turn = nil
		if t == nil {
			if sess.oneTurn {
				sess.endOneTurn()
			}
			return // refused at its start; the error was sent then
		}
		sess.send("end_of_turn", endOfTurnEvent{AudioMS: int64(len(ev.PCM)) * 1000 / engine.LiveRate})
		t.order = sess.s.flights.order()
		spec := t.spec
		if ev.Fresh && spec != nil {
			spec.cancel()
			spec = nil
		}
		var voiceEnd time.Time
		if !ev.Cut { // a cut turn's voice goes on
			voiceEnd = sess.voiceEnd()
		}
		sess.passes.Add(1)
		sess.s.metrics.live.passes.WithLabelValues("final").Inc()
		go sess.finalPass(t, ev.PCM, ev.Probs, spec, sess.payload, voiceEnd)
		if sess.oneTurn {
			sess.endOneTurn()
		}
	}
}

// endOneTurn ends a one-turn session's listening at its turn's end: audio
// is dropped from now on, and the session closes (1000) once the turn is
// answered.
func (sess *liveSession) endOneTurn() {
	if sess.heard {
		return
	}
	sess.heard = true
	go func() {
		sess.passes.Wait()
		sess.end(websocket.StatusNormalClosure, "the turn was answered")
	}()
}

// admitTurn applies, to a turn, what /v1/infer applies to a request: the
// live switches (read afresh), the key's scope and rate limit, and its
// requests in progress. The CPU budget admits the final pass itself.
func (sess *liveSession) admitTurn() (*liveTurn, error) {
	s := sess.s
	if err := s.liveRight(sess); err != nil {
		return nil, err
	}
	release, err := s.enterInflight(sess.key)
	if err != nil {
		return nil, err
	}
	if err := s.admit(sess.c, sess.key, budgetInfer); err != nil {
		release()
		return nil, err
	}
	return &liveTurn{done: func(err *error) {
		s.refundIfShed(sess.key.Hash, err)
		release()
	}}, nil
}

// dropTurn forgets the turn being heard: its speculative pass stops and
// its slot is freed.
func (sess *liveSession) dropTurn() {
	sess.stopCaption()
	if t := sess.turn; t != nil {
		if t.spec != nil {
			t.spec.cancel()
		}
		var err error = &Error{Code: CodeCanceled, Message: "the turn was dropped"}
		t.done(&err)
		sess.turn = nil
	}
}

// startSpec starts a speculative speech pass over pcm (probs: its
// windows' speech probabilities), when the engine offers one.
func (sess *liveSession) startSpec(pcm, probs []float32) *specPass {
	h, ok := sess.s.inferer.(aheadHearer)
	if !ok {
		return nil
	}
	req, _, err := sess.request(sess.payload)
	if err != nil {
		return nil
	}
	req.PCM, req.VoiceProbs = pcm, probs
	ctx, cancel := context.WithCancel(sess.ctx)
	sp := &specPass{cancel: cancel, done: make(chan struct{}), voiceEnd: sess.voiceEnd(), started: time.Now(), payload: sess.payload}
	sess.s.metrics.live.passes.WithLabelValues("speculative").Inc()
	replier, canReply := sess.s.inferer.(aheadReplier)
	if canReply {
		sp.replied = make(chan struct{})
	}
	go func() {
		sp.heard, sp.err = h.HearAhead(ctx, req)
		close(sp.done)
		if !canReply {
			return
		}
		defer close(sp.replied)
		if sp.err != nil || sp.heard == nil || sp.heard.NoSpeech {
			sp.replyErr = errNoReplyAhead
			return
		}
		// Replies from the first transcript (issue 35), at speculative
		// priority: canceled with the pass when the partner speaks again,
		// and by any committed work that waits.
		req.Heard = sp.heard
		sp.reply, sp.replyErr = replier.ReplyAhead(ctx, req)
	}()
	return sp
}

// request builds the engine request of a turn from payload.
func (sess *liveSession) request(payload []byte) (engine.Request, string, error) {
	s := sess.s
	req, audioIdx, err := parsePayload(withLiveTurn(payload), s.limits)
	if err != nil {
		return req, "", err
	}
	tag := ""
	if req.UserID != "" {
		var subject string
		if subject, tag, err = s.userSubject(sess.key.Hash, req.UserID); err != nil {
			return req, "", err
		}
		if req.MemoryUser != "" {
			req.MemoryUser = subject
		}
	}
	if audioIdx < 0 {
		req.Messages = append(req.Messages, engine.Message{Role: engine.RoleSpeaker, Audio: true})
	}
	p, ok, err := s.store.CurrentPrompt()
	if err != nil {
		return req, "", err
	}
	req.SystemPrompt = DefaultSystemPrompt
	if ok && p.Prompt != "" {
		req.SystemPrompt = p.Prompt
	}
	return req, tag, nil
}

// finalPass answers a committed turn: the transcript (reusing the
// speculative pass when the audio did not change), then the candidates. A
// newer turn of the same key and dialog_id supersedes it, as a newer
// /v1/infer request does, but only once the newer turn is known to hold
// speech (by voice detection on its windows, else by its transcript): the
// box, not the client, cut the turns, and a tail that voice detection or
// Whisper finds empty (a breath, the end of a word after a pause, a cough)
// must not throw away the suggestions of the turn before it. pcm is the
// turn's audio and probs its windows' speech probabilities from the
// session's detector (the speech is kept by them). voiceEnd is when the
// turn's last voiced window arrived (zero for a turn cut at MaxTurn): the
// time from it to the start of the work whose transcript the turn uses is
// reported (workStarted).
func (sess *liveSession) finalPass(t *liveTurn, pcm, probs []float32, spec *specPass, payload []byte, voiceEnd time.Time) {
	s := sess.s
	defer sess.passes.Done()
	start := s.now()
	var err error
	var res engine.Result
	var out inferResponse
	var inf *store.InferenceInfo
	defer func() {
		t.done(&err)
		sess.logTurn(start, res, len(out.Response), inf, err)
	}()
	if err = s.liveRight(sess); err != nil {
		return // the key's end: the session is closing
	}
	req, tag, err := sess.request(payload)
	if err != nil {
		sess.sendError(err)
		return
	}
	version := DefaultPromptVersion
	if p, ok, perr := s.store.CurrentPrompt(); perr == nil && ok && p.Prompt != "" {
		version = p.Version
	}
	req.PCM, req.VoiceProbs = pcm, probs
	ctx, cancel := context.WithTimeout(sess.ctx, s.limits.InferTimeout)
	defer cancel()
	ctx, supersede := context.WithCancelCause(ctx)
	defer supersede(nil)
	// The turn takes the dialog's place (superseding the turn before it)
	// when it is known to hold speech: by its probabilities below, else
	// when its transcript comes (OnTranscript is called only for speech,
	// before any language-model work).
	endFlight := func() {}
	defer func() { endFlight() }()
	claimed := false
	claim := func() {
		if !claimed {
			claimed = true
			endFlight = s.flights.startAt(sess.key.Hash, req.DialogID, t.order, supersede)
		}
	}
	// Speech by the turn's own probabilities (what the speech stage keeps)
	// is known now: such a turn takes the dialog at once, so that the
	// earlier answer's work gives its cores to this turn's.
	if sp, ok := engine.KeepByProbs(s.voice, pcm, probs); ok && len(sp.PCM) > 0 {
		claim()
	}
	var ahead *engine.Result // replies generated ahead, reused
	sentTranscript := false
	if spec != nil {
		// The pass's results are read only once it is done: a turn whose
		// context ended first does not wait for it (nor race its writes).
		reused := false
		select {
		case <-spec.done:
			reused = spec.err == nil && spec.heard != nil
		case <-ctx.Done():
		}
		if reused {
			req.Heard = spec.heard
			s.metrics.live.spec.WithLabelValues("reused").Inc()
			sess.workStarted(voiceEnd, spec.started, "speculative")
			if spec.replied != nil && !spec.heard.NoSpeech {
				// The transcript is shown now, not once the replies
				// generated ahead are done.
				claim()
				sess.send("transcript", newTranscriptEvent(spec.heard.Heard))
				sentTranscript = true
			}
			ahead = sess.replyAhead(ctx, spec, payload)
		} else {
			s.metrics.live.spec.WithLabelValues("failed").Inc()
		}
	}
	if req.Heard == nil && ctx.Err() == nil {
		sess.workStarted(voiceEnd, time.Now(), "final")
	}
	req.OnTranscript = func(h engine.Heard) {
		claim()
		if !sentTranscript {
			sess.send("transcript", newTranscriptEvent(h))
		}
	}
	ctx = engine.WithRequestID(ctx, sess.c.Response().Header().Get(echo.HeaderXRequestID))
	if ahead != nil {
		// The replies were generated from the same audio and payload
		// while the turn's end was awaited: shown now, after its
		// transcript, as the pipeline would have sent them.
		res = *ahead
		req.OnTranscript(req.Heard.Heard)
	} else {
		res, err = s.inferer.Infer(ctx, req)
	}
	if err != nil {
		if engine.KindOf(err) == engine.KindCanceled && sess.ctx.Err() == nil && superseded(ctx) {
			err = &Error{Code: CodeSuperseded, Message: "a newer turn for the same dialog_id replaced this one", Err: err}
		} else {
			err = s.inferError(sess.ctx, err)
		}
		sess.sendError(err)
		return
	}
	s.metrics.observeInference(res)
	out = newInferResponse(res, s.now().Sub(start))
	tr, ns := res.Transcript, res.NoSpeech
	out.Transcript, out.NoSpeech = &tr, &ns
	if out.InferenceID, err = newInferenceID(s.rand); err != nil {
		sess.sendError(err)
		return
	}
	inf = &store.InferenceInfo{ID: out.InferenceID, PromptVersion: version, CandidateChars: make([]int, len(out.Response)),
		Model: res.Model, SpeechModel: res.SpeechModel}
	for i, text := range out.Response {
		inf.CandidateChars[i] = score.Chars(text)
	}
	if req.MemoryUser != "" && res.PartnerTurn != "" {
		inf.Remember = &store.RememberedTexts{Partner: res.PartnerTurn, Candidates: out.Response}
		inf.UserTag = tag
	}
	s.recent.add(out.InferenceID, sess.key.Hash, s.now(), out.Response)
	if werr := sess.send("candidates", out); werr != nil {
		// The client went away with the answer computed: not a success.
		err = &Error{Code: CodeCanceled, Message: "the client closed the live session", Err: werr}
	}
}

// replyAhead waits for the replies generated from spec's transcript and
// returns them when the committed turn can use them: spec was made with
// payload (the turn's audio is spec's: the caller checked) and they came
// with no error. Else the committed turn generates afresh (its prompt
// mostly cached by the work done ahead).
func (sess *liveSession) replyAhead(ctx context.Context, spec *specPass, payload []byte) *engine.Result {
	if spec.replied == nil {
		return nil
	}
	outcome := "failed"
	defer func() { sess.s.metrics.live.replies.WithLabelValues(outcome).Inc() }()
	if !bytes.Equal(spec.payload, payload) {
		outcome = "stale"
		spec.cancel()
		return nil
	}
	select {
	case <-spec.replied:
	case <-ctx.Done():
		return nil
	}
	if spec.replyErr != nil || spec.reply.NoSpeech {
		return nil
	}
	outcome = "reused"
	res := spec.reply
	return &res
}

// workStarted reports how long after the turn's last voiced window arrived
// the work whose transcript the turn uses started (pass: "speculative" when
// the pass started at the pause became the final one, else "final"): the
// histogram replyd_live_work_start_seconds and a debug line, which carries
// both instants (Unix microseconds) for benchmarks that hold the end of
// speech in another clock (tests/browser/livelatency.mjs).
func (sess *liveSession) workStarted(voiceEnd, start time.Time, pass string) {
	if voiceEnd.IsZero() {
		return
	}
	d := max(start.Sub(voiceEnd), 0)
	sess.s.metrics.live.workStart.WithLabelValues(pass).Observe(d.Seconds())
	sess.log.Debug("live turn work started", "pass", pass, "after_voice_ms", float64(d.Microseconds())/1000,
		"voice_end_unix_us", voiceEnd.UnixMicro(), "work_start_unix_us", start.UnixMicro())
}

// logTurn appends the turn's log entry, as inferLog does for /v1/infer:
// counts and times, never dialog text; a turn whose client went away is a
// warning (499), never a success.
func (sess *liveSession) logTurn(start time.Time, res engine.Result, candidates int, inf *store.InferenceInfo, err error) {
	s := sess.s
	elapsed := s.now().Sub(start)
	code, status := "ok", http.StatusOK
	level := store.LevelInfo
	msg := fmt.Sprintf("live turn ok: %d candidates in %d ms (audio %.1f s)", candidates, elapsed.Milliseconds(), res.AudioSeconds)
	if err != nil {
		ae := toAPIError(err)
		code, status = ae.Code, ae.Status()
		level, msg = store.LevelWarn, "live turn failed: "+code
		if status >= 500 {
			level = store.LevelError
		}
		inf = nil
	}
	entry := store.LogEntry{
		Timestamp: s.now(), Level: level, Message: msg,
		ResourceType: store.ResourceAPIKey, ResourceID: sess.key.Hash,
		StreamName: store.StreamInfer, Subject: sess.key.Hash,
		Status: status, LatencyMS: elapsed.Milliseconds(), Node: s.node, Inference: inf,
	}
	if err != nil {
		entry.ErrorCode = code
	}
	if code != CodeRateLimited || s.refusals.first(sess.key.Hash, s.now()) {
		if aerr := s.store.AppendLog(entry); aerr != nil {
			sess.log.Error("appending the live turn's log entry failed", "error", aerr.Error())
		}
	}
	if inf != nil {
		s.recent.markWritten(inf.ID)
	}
	s.metrics.inferences.WithLabelValues(code).Inc()
}

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
	ae := toAPIError(err)
	if ae.Code == CodeInternal {
		sess.log.Error("live turn failed", "error", err.Error())
	}
	_ = sess.send("error", errorBody{Error: ae.Code, Message: ae.Message})
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

// liveMetrics are the Prometheus collectors of live listening.
type liveMetrics struct {
	sessions  prometheus.Gauge
	spec      *prometheus.CounterVec
	workStart *prometheus.HistogramVec
	// replies counts the replies generated ahead from a speculative
	// pass's transcript, by what the committed turn did with them.
	replies *prometheus.CounterVec
	// passes counts the speech passes live sessions started: the only
	// way a session makes Whisper or language-model work.
	passes *prometheus.CounterVec
	// heldPeak is the most audio one session held, outside a turn
	// (listening: the pre-roll and a sound weighed as a turn's start) and
	// in one, since the box started.
	heldPeak *prometheus.GaugeVec
	peakMu   sync.Mutex
	peak     [2]int // samples: listening, turn
}

// observeHeld records the samples a session holds now.
func (m *liveMetrics) observeHeld(samples int, inTurn bool) {
	i, state := 0, "listening"
	if inTurn {
		i, state = 1, "turn"
	}
	m.peakMu.Lock()
	defer m.peakMu.Unlock()
	if samples > m.peak[i] {
		m.peak[i] = samples
		m.heldPeak.WithLabelValues(state).Set(float64(samples) / engine.LiveRate)
	}
}

func newLiveMetrics(reg *prometheus.Registry) *liveMetrics {
	m := &liveMetrics{
		sessions: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "replyd_live_sessions",
			Help: "Live sessions open now.",
		}),
		spec: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "replyd_live_speculative_total",
			Help: "Speculative speech passes of live turns by outcome: reused by the committed turn, canceled by resumed speech, failed (stopped for committed work, or an error).",
		}, []string{"outcome"}),
		workStart: histogramVec("replyd_live_work_start_seconds",
			"Time from the arrival of a live turn's last voiced audio to the start of the speech pass whose transcript the turn uses, by pass: speculative (started at the first pause and kept) or final (started when the turn ended).",
			[]float64{.025, .05, .1, .15, .2, .25, .3, .35, .4, .5, .6, .75, 1, 1.5, 2, 5}, "pass"),
	}
	m.passes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "replyd_live_passes_total",
		Help: "Speech passes (voice detection and Whisper; the final one then the language model) that live sessions started, by kind: speculative (at a pause), final (a committed turn) or caption (the turn's words so far, while the partner speaks). Noise that starts no turn starts none.",
	}, []string{"kind"})
	m.heldPeak = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "replyd_live_audio_held_peak_seconds",
		Help: "The most audio one live session has held since the start, by state: listening (outside a turn: the pre-roll, or a sound not yet long enough to start a turn) or turn.",
	}, []string{"state"})
	for _, k := range []string{"speculative", "final", "caption"} {
		m.passes.WithLabelValues(k)
	}
	m.replies = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "replyd_live_replies_ahead_total",
		Help: "Replies generated from a live turn's speculative transcript before the turn ended, by outcome at the turn's end: reused (shown), failed (stopped for committed work, or an error), stale (the payload changed). Those canceled by resumed speech are counted in replyd_live_speculative_total.",
	}, []string{"outcome"})
	for _, k := range []string{"reused", "failed", "stale"} {
		m.replies.WithLabelValues(k)
	}
	for _, st := range []string{"listening", "turn"} {
		m.heldPeak.WithLabelValues(st)
	}
	reg.MustRegister(m.sessions, m.spec, m.workStart, m.passes, m.heldPeak, m.replies)
	return m
}
