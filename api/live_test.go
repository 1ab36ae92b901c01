package api

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/replyd/replyd/engine"
	"github.com/replyd/replyd/internal/secret"
	"github.com/replyd/replyd/store"
)

// loudVoice is the api tests' voice detector: a window is speech when its
// RMS is over 0.05 (the tests send a loud tone for speech and zeros or
// faint noise for silence). The real Silero detector's turns are tested in
// engine/vad.
type loudVoice struct{ windows atomic.Int64 }

func (v *loudVoice) NewVoiceStream() engine.VoiceStream { return v }

func (v *loudVoice) Prob(w []float32) float32 {
	v.windows.Add(1)
	var sum float64
	for _, x := range w {
		sum += float64(x) * float64(x)
	}
	if math.Sqrt(sum/float64(len(w))) > 0.05 {
		return 0.95
	}
	return 0.02
}

// KeepSpeechByProbs (engine.SpeechByProbs) keeps the windows heard as
// speech when they add up to half a second, a stand-in for voice
// detection's minimum speech.
func (v *loudVoice) KeepSpeechByProbs(pcm, probs []float32) engine.Speech {
	var sp engine.Speech
	for i, p := range probs {
		if p >= 0.5 {
			sp.PCM = append(sp.PCM, pcm[i*engine.VoiceWindow:(i+1)*engine.VoiceWindow]...)
		}
	}
	if len(sp.PCM) < engine.LiveRate/2 {
		return engine.Speech{}
	}
	sp.Segments = 1
	return sp
}

// liveInferer is the fake engine of the live tests: it "transcribes" a
// turn's samples as their length, answers like echoInferer, and offers
// speculative passes (HearAhead) that the test can hold until canceled.
type liveInferer struct {
	mu    sync.Mutex
	reqs  []engine.Request
	ahead []context.Context
	// block, when set, makes Infer wait for its context to end;
	// blockFirst makes the first blockFirst Infers wait for it after their
	// transcript (in their generation).
	block      bool
	blockFirst int
	// noSpeechUnder: a turn shorter than this holds no speech, as the real
	// pipeline's voice detection finds none in a short tail.
	noSpeechUnder time.Duration
	ctxs          []context.Context // the contexts of the Infers, in order
	// holdAhead makes HearAhead wait for its context to end.
	holdAhead bool
	started   chan struct{} // receives when an Infer starts (if not nil)
	canceled  chan error    // receives the context error of a blocked Infer
	// stream: the replies are given to OnCandidate as the pipeline does;
	// a blockFirst Infer gives sendFirst of them before it waits, and
	// lateAfterCancel one more once its context ended (a reply the engine
	// completed as the turn was superseded).
	stream          bool
	sendFirst       int
	lateAfterCancel bool
	causes          []error // the causes of the blockFirst Infers' ends
}

func (f *liveInferer) Infer(ctx context.Context, req engine.Request) (engine.Result, error) {
	f.mu.Lock()
	f.reqs = append(f.reqs, req)
	f.ctxs = append(f.ctxs, ctx)
	block, started := f.block, f.started
	// blockFirst holds the answer after its transcript, as a generation.
	generating := len(f.reqs) <= f.blockFirst
	f.mu.Unlock()
	if started != nil {
		started <- struct{}{}
	}
	if block {
		<-ctx.Done()
		if f.canceled != nil {
			f.canceled <- ctx.Err()
		}
		return engine.Result{}, &engine.Error{Kind: engine.KindCanceled, Message: "canceled", Err: ctx.Err()}
	}
	res := engine.Result{HasTranscript: true, AudioSeconds: float64(len(req.PCM)) / engine.LiveRate}
	switch {
	case req.Heard != nil && req.Heard.NoSpeech, req.Heard == nil && f.short(req.PCM):
		// As the pipeline: no transcript event, no candidates.
		res.NoSpeech = true
		return res, nil
	case req.Heard != nil:
		res.Transcript = req.Heard.Transcript
	default:
		res.Transcript = "heard " + time.Duration(len(req.PCM)*int(time.Second)/engine.LiveRate).String()
	}
	if req.OnTranscript != nil {
		req.OnTranscript(engine.Heard{Transcript: res.Transcript, Language: res.TranscriptLanguage})
	}
	f.mu.Lock()
	stream, sendFirst, late := f.stream && req.OnCandidate != nil, f.sendFirst, f.lateAfterCancel
	f.mu.Unlock()
	reply := func(i int) engine.Candidate {
		c := engine.Candidate{Text: "reply " + strconv.Itoa(i+1), Rank: i + 1, Length: 1, Language: "en"}
		if stream {
			req.OnCandidate(c)
		}
		return c
	}
	if generating {
		for i := 0; i < sendFirst; i++ {
			reply(i)
		}
		<-ctx.Done()
		if late {
			reply(sendFirst)
		}
		f.mu.Lock()
		f.causes = append(f.causes, context.Cause(ctx))
		f.mu.Unlock()
		return engine.Result{}, &engine.Error{Kind: engine.KindCanceled, Message: "canceled", Err: ctx.Err()}
	}
	for i := 0; i < req.MaxCandidates; i++ {
		res.Candidates = append(res.Candidates, reply(i))
	}
	res.PartnerTurn = res.Transcript
	return res, nil
}

func (f *liveInferer) HearAhead(ctx context.Context, req engine.Request) (*engine.HeardAhead, error) {
	f.mu.Lock()
	f.ahead = append(f.ahead, ctx)
	hold := f.holdAhead
	f.mu.Unlock()
	if hold {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if f.short(req.PCM) {
		return &engine.HeardAhead{NoSpeech: true, AudioSeconds: float64(len(req.PCM)) / engine.LiveRate}, nil
	}
	return &engine.HeardAhead{Heard: engine.Heard{Transcript: "ahead " + time.Duration(len(req.PCM)*int(time.Second)/engine.LiveRate).String()},
		AudioSeconds: float64(len(req.PCM)) / engine.LiveRate}, nil
}

// short reports whether pcm is a turn heard as no speech (noSpeechUnder).
func (f *liveInferer) short(pcm []float32) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return time.Duration(len(pcm))*time.Second/engine.LiveRate < f.noSpeechUnder
}

func (f *liveInferer) inferCtxs() []context.Context {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]context.Context(nil), f.ctxs...)
}

func (f *liveInferer) requests() []engine.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]engine.Request(nil), f.reqs...)
}

func (f *liveInferer) aheadCtxs() []context.Context {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]context.Context(nil), f.ahead...)
}

// liveEnv is an env served over a real listener (a WebSocket needs one).
type liveEnv struct {
	*env
	ts    *httptest.Server
	inf   *liveInferer
	voice *loudVoice
}

const liveKey = "rpd_live-test-key"

func newLiveEnv(t *testing.T, mod ...func(*Options)) *liveEnv {
	t.Helper()
	le := &liveEnv{inf: &liveInferer{}, voice: &loudVoice{}}
	le.env = newEnv(t, append([]func(*Options){func(o *Options) {
		o.Inferer = le.inf
		o.Voice = le.voice
		o.Limits.LiveRealtimeFactor = 1e6 // the tests send audio at once
		o.Limits.LiveCaptionEvery = -1    // captions are tested on their own (live_caption_test.go)
	}}, mod...)...)
	le.addKey(liveKey, 60)
	le.ts = httptest.NewServer(le.h)
	t.Cleanup(le.ts.Close)
	return le
}

// ticket asks srv's handler for a live ticket of key.
func ticketFrom(t *testing.T, h http.Handler, key string) string {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, "/v1/live/ticket", nil)
	req.Header.Set(HeaderAPIKey, key)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusCreated {
		t.Fatalf("POST /v1/live/ticket: %d %s", rec.Code, rec.Body)
	}
	var r liveTicketResponse
	decode(t, rec, &r)
	if !strings.HasPrefix(r.Ticket, liveTicketPrefix) || r.URL != "/v1/live?ticket="+r.Ticket+"&route="+secret.Hash(key)[:16] || rec.Header().Get("Cache-Control") != "no-store" {
		t.Fatalf("ticket answer %s, headers %v", rec.Body, rec.Header())
	}
	return r.Ticket
}

// dial opens a session with ticket; it returns the HTTP answer's status
// when the upgrade is refused.
func (le *liveEnv) dial(t *testing.T, ticket string, header http.Header) (*websocket.Conn, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	u := "ws" + strings.TrimPrefix(le.ts.URL, "http") + "/v1/live"
	if ticket != "" {
		u += "?ticket=" + ticket
	}
	c, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPHeader: header})
	if err != nil {
		if resp == nil {
			t.Fatalf("dial: %v", err)
		}
		return nil, resp.StatusCode
	}
	t.Cleanup(func() { _ = c.CloseNow() })
	return c, http.StatusSwitchingProtocols
}

// open dials a session and sends the payload.
func (le *liveEnv) open(t *testing.T, payload string) *websocket.Conn {
	t.Helper()
	c, status := le.dial(t, ticketFrom(t, le.h, liveKey), nil)
	if c == nil {
		t.Fatalf("dial: %d", status)
	}
	write(t, c, websocket.MessageText, []byte(payload))
	return c
}

const livePayload = `{"messages":[{"role":"disabled_person","content":"Hello."}],"dialog_id":"d1"}`

func write(t *testing.T, c *websocket.Conn, typ websocket.MessageType, b []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Write(ctx, typ, b); err != nil {
		t.Fatalf("write: %v", err)
	}
}

// pcm returns sec seconds of s16le: a loud 440 Hz tone when loud, else
// silence.
func pcm(sec float64, loud bool) []byte {
	n := int(sec * engine.LiveRate)
	b := make([]byte, 2*n)
	for i := range n {
		v := 0.0
		if loud {
			v = 0.3 * math.Sin(2*math.Pi*440*float64(i)/engine.LiveRate)
		}
		binary.LittleEndian.PutUint16(b[2*i:], uint16(int16(v*32767)))
	}
	return b
}

// sendAudio sends b in 100 ms frames.
func sendAudio(t *testing.T, c *websocket.Conn, b []byte) {
	t.Helper()
	for len(b) > 0 {
		n := min(3200, len(b))
		write(t, c, websocket.MessageBinary, b[:n])
		b = b[n:]
	}
}

type gotEvent struct {
	Event string          `json:"event"`
	Data  json.RawMessage `json:"data"`
}

// next reads the next event (or fails after 5 s).
func next(t *testing.T, c *websocket.Conn) gotEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	typ, b, err := c.Read(ctx)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	if typ != websocket.MessageText {
		t.Fatalf("a binary message from the server")
	}
	var ev gotEvent
	if err := json.Unmarshal(b, &ev); err != nil {
		t.Fatalf("event %s: %v", b, err)
	}
	return ev
}

// events reads n events and returns their names.
func events(t *testing.T, c *websocket.Conn, n int) ([]string, []gotEvent) {
	t.Helper()
	var names []string
	var evs []gotEvent
	for range n {
		ev := next(t, c)
		names = append(names, ev.Event)
		evs = append(evs, ev)
	}
	return names, evs
}

// answerEvents reads events until n that are not candidate events came and
// returns their names, those events, and the candidate events in between;
// it fails when the candidates do not equal, in order, the replies of a
// candidates event among them (issue 42: each reply streamed as it is
// complete, then the answer).
func answerEvents(t *testing.T, c *websocket.Conn, n int) ([]string, []gotEvent) {
	t.Helper()
	var names []string
	var evs []gotEvent
	var sent []candidateEvent
	for len(evs) < n {
		ev := next(t, c)
		if ev.Event == "candidate" {
			var ce candidateEvent
			if err := json.Unmarshal(ev.Data, &ce); err != nil {
				t.Fatal(err)
			}
			sent = append(sent, ce)
			continue
		}
		names = append(names, ev.Event)
		evs = append(evs, ev)
		if ev.Event != "candidates" {
			continue
		}
		var out inferResponse
		if err := json.Unmarshal(ev.Data, &out); err != nil {
			t.Fatal(err)
		}
		var want []candidateEvent
		for _, a := range out.Candidates {
			want = append(want, candidateEvent{InferenceID: out.InferenceID, Rank: a.Rank, Text: a.Text, Language: a.Language})
		}
		if len(sent) > 0 && !slices.Equal(sent, want) {
			t.Errorf("candidate events %+v, the answer's %+v", sent, want)
		}
		sent = nil
	}
	return names, evs
}

// closeCode reads until the session is closed and returns its code.
func closeCode(t *testing.T, c *websocket.Conn) websocket.StatusCode {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		_, _, err := c.Read(ctx)
		if err != nil {
			return websocket.CloseStatus(err)
		}
	}
}

// TestLiveTurn: a spoken turn then silence is answered with speech_start,
// end_of_turn, transcript and candidates (InferResponse), from the payload
// and the audio held; the turn is logged as an inference of the key.
func TestLiveTurn(t *testing.T) {
	le := newLiveEnv(t)
	c := le.open(t, livePayload)
	sendAudio(t, c, append(pcm(0.3, false), append(pcm(1.0, true), pcm(1.0, false)...)...))
	names, evs := events(t, c, 4)
	if strings.Join(names, ",") != "speech_start,end_of_turn,transcript,candidates" {
		t.Fatalf("events %v", names)
	}
	var eot endOfTurnEvent
	_ = json.Unmarshal(evs[1].Data, &eot)
	// The tone, the pre-roll before it and the silence that ended it.
	if eot.AudioMS < 1000+500 || eot.AudioMS > 1000+200+500+100 {
		t.Errorf("end_of_turn holds %d ms", eot.AudioMS)
	}
	var out inferResponse
	if err := json.Unmarshal(evs[3].Data, &out); err != nil {
		t.Fatal(err)
	}
	// The speculative pass of the pause that ended the turn was reused.
	if out.Transcript == nil || !strings.HasPrefix(*out.Transcript, "ahead ") || len(out.Candidates) != 3 || out.InferenceID == "" || out.NoSpeech == nil || *out.NoSpeech {
		t.Errorf("candidates event %s", evs[3].Data)
	}
	reqs := le.inf.requests()
	if len(reqs) != 1 || reqs[0].DialogID != "d1" || len(reqs[0].Messages) != 2 || !reqs[0].Messages[1].Audio || reqs[0].SystemPrompt == "" {
		t.Fatalf("engine requests %+v", reqs)
	}
	_ = c.Close(websocket.StatusNormalClosure, "")
	waitFor(t, func() bool { return le.srv.live.count() == 0 })
	logs, err := le.st.Logs(store.LogQuery{})
	if err != nil {
		t.Fatal(err)
	}
	var ok int
	for _, e := range logs {
		if strings.HasPrefix(e.Message, "live turn ok: 3 candidates") && e.Inference != nil && e.Inference.ID == out.InferenceID && e.ResourceID == secret.Hash(liveKey) {
			ok++
		}
	}
	if ok != 1 {
		t.Errorf("%d live turn entries in %+v", ok, logs)
	}
}

// TestLiveNoiseCostsNoWork: silence and faint noise, for as long as the
// session lasts, run voice detection only: no engine work, no event, and
// the audio held stays within the pre-roll.
func TestLiveNoiseCostsNoWork(t *testing.T) {
	le := newLiveEnv(t)
	c := le.open(t, livePayload)
	faint := pcm(5, false)
	for i := 0; i < len(faint); i += 2 {
		binary.LittleEndian.PutUint16(faint[i:], uint16(int16((i*7919)%600-300))) // |x| < 0.01
	}
	sendAudio(t, c, faint)
	write(t, c, websocket.MessageText, []byte(`{"type":"ping"}`))
	// A clean end: the server has read everything before it closes.
	_ = c.Close(websocket.StatusNormalClosure, "")
	waitFor(t, func() bool { return le.srv.live.count() == 0 })
	if n := len(le.inf.requests()) + len(le.inf.aheadCtxs()); n != 0 {
		t.Errorf("%d engine calls for noise", n)
	}
	if w := le.voice.windows.Load(); w < 5*engine.LiveRate/engine.VoiceWindow-1 {
		t.Errorf("voice detection ran on %d windows of 5 s", w)
	}
	// The metrics say so too: no pass started, and the session held its
	// pre-roll (200 ms) and at most one window more.
	m := le.do(adminReq(http.MethodGet, "/metrics", "")).Body.String()
	for _, want := range []string{
		`replyd_live_passes_total{kind="speculative"} 0`,
		`replyd_live_passes_total{kind="final"} 0`,
		`replyd_live_audio_held_peak_seconds{state="turn"} 0`,
	} {
		if !strings.Contains(m, want+"\n") {
			t.Errorf("/metrics has no %s", want)
		}
	}
	// The 200 ms pre-roll is rounded up to whole windows (7: 224 ms).
	window := float64(engine.VoiceWindow) / engine.LiveRate
	if held := metricValue(t, m, `replyd_live_audio_held_peak_seconds{state="listening"}`); held < 7*window || held > 8*window {
		t.Errorf("held %v s while listening to noise, want the 0.224 s pre-roll and at most a window more", held)
	}
}

// metricValue returns the value of the sample named (with its labels) in
// the exposition m.
func metricValue(t *testing.T, m, name string) float64 {
	t.Helper()
	v, ok := findMetric(t, m, name)
	if !ok {
		t.Fatalf("/metrics has no %s", name)
	}
	return v
}

// findMetric returns series' value in the /metrics text m, and whether m
// has it.
func findMetric(t *testing.T, m, series string) (float64, bool) {
	t.Helper()
	for _, line := range strings.Split(m, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return f, true
		}
	}
	return 0, false
}

// TestLiveTicketRefusals: the ticket is the only way in, works once, on
// any box sharing the store, and not after its expiry.
func TestLiveTicketRefusals(t *testing.T) {
	le := newLiveEnv(t)
	// Missing, unknown, or not a ticket at all (an API key in the URL).
	for _, tk := range []string{"", "rlt_unknown", liveKey} {
		if _, status := le.dial(t, tk, nil); status != http.StatusUnauthorized {
			t.Errorf("ticket %q: %d, want 401", tk, status)
		}
	}
	// Used once, then refused.
	tk := ticketFrom(t, le.h, liveKey)
	if c, status := le.dial(t, tk, nil); c == nil {
		t.Fatalf("a fresh ticket: %d", status)
	}
	if _, status := le.dial(t, tk, nil); status != http.StatusUnauthorized {
		t.Errorf("a reused ticket: %d, want 401", status)
	}
	// Expired.
	tk = ticketFrom(t, le.h, liveKey)
	le.clock.Advance(le.srv.limits.LiveTicketTTL)
	if _, status := le.dial(t, tk, nil); status != http.StatusUnauthorized {
		t.Errorf("an expired ticket: %d, want 401", status)
	}
	// Issued by another box on the same store: honoured here, once.
	other := New(Options{Store: le.st, Inferer: le.inf, Voice: le.voice, Now: le.clock.Now})
	tk = ticketFrom(t, other.Handler(), liveKey)
	if c, status := le.dial(t, tk, nil); c == nil {
		t.Fatalf("another box's ticket: %d", status)
	}
	if _, status := le.dial(t, tk, nil); status != http.StatusUnauthorized {
		t.Errorf("another box's ticket reused: %d, want 401", status)
	}
	// The ticket endpoint wants a valid key.
	for _, key := range []string{"", "rpd_wrong"} {
		req := httptest.NewRequest(http.MethodPost, "/v1/live/ticket", nil)
		if key != "" {
			req.Header.Set(HeaderAPIKey, key)
		}
		if rec := le.do(req); rec.Code != http.StatusUnauthorized {
			t.Errorf("ticket with key %q: %d", key, rec.Code)
		}
	}
	// A revoked key's ticket no longer opens a session.
	tk = ticketFrom(t, le.h, liveKey)
	if _, err := le.st.RevokeKey(secret.Hash(liveKey), le.clock.Now()); err != nil {
		t.Fatal(err)
	}
	if _, status := le.dial(t, tk, nil); status != http.StatusUnauthorized {
		t.Errorf("a revoked key's ticket: %d, want 401", status)
	}
}

// TestLiveOriginAndSwitches: a page on a foreign origin, the box's switch,
// the key's switch (consent) and a box without a voice detector are
// refused before the upgrade.
func TestLiveOriginAndSwitches(t *testing.T) {
	le := newLiveEnv(t, func(o *Options) { o.CORSOrigins = []string{"https://tablet.example"} })
	h := http.Header{}
	h.Set("Origin", "https://evil.example")
	if _, status := le.dial(t, ticketFrom(t, le.h, liveKey), h); status != http.StatusForbidden {
		t.Errorf("a foreign origin: %d, want 403", status)
	}
	h.Set("Origin", "https://tablet.example")
	if c, status := le.dial(t, ticketFrom(t, le.h, liveKey), h); c == nil {
		t.Errorf("a listed origin: %d", status)
	}
	// The key's switch: off refuses tickets; on again allows them.
	hash := secret.Hash(liveKey)
	rec := le.do(adminReq(http.MethodPut, "/v1/admin/keys/"+hash+"/live", `{"enabled":false}`))
	wantJSON(t, rec, http.StatusOK, `{"api_key_hash":"`+hash+`","enabled":false}`)
	req := httptest.NewRequest(http.MethodPost, "/v1/live/ticket", nil)
	req.Header.Set(HeaderAPIKey, liveKey)
	wantJSON(t, le.do(req), http.StatusForbidden, errJSON(CodeForbidden, "live listening is switched off for this API key"))
	// The key list shows the switch (the admin page draws it from there).
	if got := liveListed(t, le, hash); got != "false" {
		t.Errorf("key list after switching off: LiveListening %s, want false", got)
	}
	wantJSON(t, le.do(adminReq(http.MethodPut, "/v1/admin/keys/"+hash+"/live", `{"enabled":true}`)), http.StatusOK, `{"api_key_hash":"`+hash+`","enabled":true}`)
	ticketFrom(t, le.h, liveKey)
	if got := liveListed(t, le, hash); got != "true" {
		t.Errorf("key list after switching on: LiveListening %s, want true", got)
	}
	wantJSON(t, le.do(adminReq(http.MethodPut, "/v1/admin/keys/"+strings.Repeat("a", 64)+"/live", `{"enabled":true}`)), http.StatusNotFound, errJSON(CodeNotFound, "no API key has this api_key_hash"))
	wantJSON(t, le.do(adminReq(http.MethodPut, "/v1/admin/keys/"+hash+"/live", `{}`)), http.StatusBadRequest, errJSON(CodeInvalidRequest, "enabled is required (true or false)"))

	off := newLiveEnv(t, func(o *Options) { o.LiveOff = true })
	for _, c := range []struct {
		le   *liveEnv
		want string
	}{{le, `"live":"on"`}, {off, `"live":"off"`}} {
		if body := c.le.do(adminReq(http.MethodGet, "/v1/admin/status", "")).Body.String(); !strings.Contains(body, c.want) {
			t.Errorf("admin status: want %s in %s", c.want, body)
		}
	}
	req = httptest.NewRequest(http.MethodPost, "/v1/live/ticket", nil)
	req.Header.Set(HeaderAPIKey, liveKey)
	wantJSON(t, off.do(req), http.StatusForbidden, errJSON(CodeForbidden, "live listening is switched off on this box (REPLYD_LIVE=off)"))
	if _, status := off.dial(t, "rlt_x", nil); status != http.StatusForbidden {
		t.Errorf("a box switched off: %d", status)
	}

	deaf := newLiveEnv(t, func(o *Options) { o.Voice = nil })
	if body := deaf.do(adminReq(http.MethodGet, "/v1/admin/status", "")).Body.String(); !strings.Contains(body, `"live":"no_vad"`) {
		t.Errorf("admin status without a voice detector: %s", body)
	}
	req = httptest.NewRequest(http.MethodPost, "/v1/live/ticket", nil)
	req.Header.Set(HeaderAPIKey, liveKey)
	if rec := deaf.do(req); rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), CodeNotReady) {
		t.Errorf("no voice detector: %d %s", rec.Code, rec.Body)
	}
	// A plain GET (no upgrade) is a 400 after the ticket is spent? No:
	// before it, so a mistaken request wastes no ticket.
	tk := ticketFrom(t, le.h, liveKey)
	plain := httptest.NewRequest(http.MethodGet, "/v1/live?ticket="+tk, nil)
	if rec := le.do(plain); rec.Code != http.StatusBadRequest {
		t.Errorf("a GET without upgrade: %d", rec.Code)
	}
	if c, status := le.dial(t, tk, nil); c == nil {
		t.Errorf("the ticket of the plain GET was spent: %d", status)
	}
}

// liveListed returns the LiveListening field of the key hash in the admin
// key list, as JSON ("true", "false"; "" when the key is not listed).
func liveListed(t *testing.T, le *liveEnv, hash string) string {
	t.Helper()
	rec := le.do(adminReq(http.MethodGet, "/v1/admin/keys", ""))
	var list struct {
		Items []struct {
			APIKeyHash    string
			LiveListening json.RawMessage
		}
	}
	decode(t, rec, &list)
	for _, k := range list.Items {
		if k.APIKeyHash == hash {
			return string(k.LiveListening)
		}
	}
	return ""
}

// TestLiveKeySwitchedOffClosesSessions: switching a key off closes its
// open sessions with 4403.
func TestLiveKeySwitchedOffClosesSessions(t *testing.T) {
	le := newLiveEnv(t)
	c := le.open(t, livePayload)
	waitFor(t, func() bool { return le.srv.live.count() == 1 })
	le.do(adminReq(http.MethodPut, "/v1/admin/keys/"+secret.Hash(liveKey)+"/live", `{"enabled":false}`))
	if code := closeCode(t, c); code != CloseSwitchedOff {
		t.Errorf("close code %d, want %d", code, CloseSwitchedOff)
	}
}

// TestLiveLimits: each bound of a session.
func TestLiveLimits(t *testing.T) {
	t.Run("rate limit per turn", func(t *testing.T) {
		le := newLiveEnv(t)
		if err := le.st.CreateKey(store.APIKey{Hash: secret.Hash("rpd_slow"), ClientID: "slow", Status: store.StatusActive, Scopes: []string{ScopeInfer}, RateLimitPerMinute: 1, CreatedAt: t0}); err != nil {
			t.Fatal(err)
		}
		c, _ := le.dial(t, ticketFrom(t, le.h, "rpd_slow"), nil)
		write(t, c, websocket.MessageText, []byte(livePayload))
		turn := append(pcm(1, true), pcm(1, false)...)
		sendAudio(t, c, turn)
		if names, _ := events(t, c, 4); names[3] != "candidates" {
			t.Fatalf("first turn %v", names)
		}
		sendAudio(t, c, turn)
		ev := next(t, c)
		if ev.Event != "error" || !strings.Contains(string(ev.Data), `"error":"rate_limited"`) {
			t.Errorf("second turn in the minute: %s %s", ev.Event, ev.Data)
		}
		if n := len(le.inf.requests()); n != 1 {
			t.Errorf("%d engine requests, want 1", n)
		}
	})
	t.Run("in progress per key", func(t *testing.T) {
		le := newLiveEnv(t, func(o *Options) { o.Limits.MaxInflightPerKey = 1 })
		le.inf.block = true
		c := le.open(t, livePayload)
		sendAudio(t, c, append(pcm(1, true), pcm(1, false)...))
		events(t, c, 2) // speech_start, end_of_turn: the pass now blocks
		// A second session of the key: its turn is refused while the
		// first is in progress.
		c2 := le.open(t, `{"messages":[{"role":"speaker","content":"x"}],"dialog_id":"d2"}`)
		sendAudio(t, c2, pcm(1, true))
		ev := next(t, c2)
		if ev.Event != "error" || !strings.Contains(string(ev.Data), "requests in progress") {
			t.Errorf("second turn: %s %s", ev.Event, ev.Data)
		}
	})
	t.Run("sessions per address", func(t *testing.T) {
		le := newLiveEnv(t, func(o *Options) { o.Limits.MaxLivePerAddr = 1 })
		le.open(t, livePayload)
		if _, status := le.dial(t, ticketFrom(t, le.h, liveKey), nil); status != http.StatusTooManyRequests {
			t.Errorf("second session from one address: %d", status)
		}
	})
	t.Run("frame too large", func(t *testing.T) {
		le := newLiveEnv(t, func(o *Options) { o.Limits.MaxLiveFrameBytes = 4096 })
		c := le.open(t, livePayload)
		_ = c.Write(context.Background(), websocket.MessageBinary, make([]byte, 8192))
		if code := closeCode(t, c); code != websocket.StatusMessageTooBig {
			t.Errorf("close code %d", code)
		}
	})
	t.Run("odd frame", func(t *testing.T) {
		le := newLiveEnv(t)
		c := le.open(t, livePayload)
		write(t, c, websocket.MessageBinary, make([]byte, 3))
		if ev := next(t, c); ev.Event != "error" {
			t.Errorf("event %s", ev.Event)
		}
		if code := closeCode(t, c); code != websocket.StatusUnsupportedData {
			t.Errorf("close code %d", code)
		}
	})
	t.Run("faster than real time", func(t *testing.T) {
		le := newLiveEnv(t, func(o *Options) { o.Limits.LiveRealtimeFactor = 2 })
		c := le.open(t, livePayload)
		for range 30 { // 3 s at once
			if c.Write(context.Background(), websocket.MessageBinary, pcm(0.1, false)) != nil {
				break
			}
		}
		if code := closeCode(t, c); code != websocket.StatusPolicyViolation {
			t.Errorf("close code %d", code)
		}
	})
	t.Run("audio held per turn", func(t *testing.T) {
		le := newLiveEnv(t, func(o *Options) { o.Limits.MaxAudio = 2 * time.Second })
		c := le.open(t, livePayload)
		sendAudio(t, c, pcm(3, true)) // talks on past the bound
		ev := next(t, c)
		for ev.Event != "end_of_turn" {
			ev = next(t, c)
		}
		var eot endOfTurnEvent
		_ = json.Unmarshal(ev.Data, &eot)
		if eot.AudioMS > 2000+32 || eot.AudioMS < 1900 { // the bound, rounded up to a window
			t.Errorf("a turn cut at %d ms, want the 2 s bound", eot.AudioMS)
		}
		for ev.Event != "candidates" {
			ev = next(t, c)
		}
	})
	t.Run("a payload without messages", func(t *testing.T) {
		// The first turn of a conversation: the live turn is the dialog.
		le := newLiveEnv(t)
		c := le.open(t, `{"messages":[],"dialog_id":"new"}`)
		sendAudio(t, c, append(pcm(1, true), pcm(1, false)...))
		if names, _ := events(t, c, 4); names[3] != "candidates" {
			t.Fatalf("events %v", names)
		}
		reqs := le.inf.requests()
		if len(reqs) != 1 || len(reqs[0].Messages) != 1 || !reqs[0].Messages[0].Audio || reqs[0].DialogID != "new" {
			t.Errorf("requests %+v", reqs)
		}
	})
	t.Run("invalid payload", func(t *testing.T) {
		le := newLiveEnv(t)
		c := le.open(t, `{"messages":[{"role":"nobody"}]}`)
		if ev := next(t, c); ev.Event != "error" || !strings.Contains(string(ev.Data), "messages[0].role must be") {
			t.Errorf("event %s %s", ev.Event, ev.Data)
		}
		if code := closeCode(t, c); code != CloseInvalidMessage {
			t.Errorf("close code %d", code)
		}
	})
}

// TestLiveSilentClient: a client that sends nothing is closed after the
// idle bound with 4408; one that stops answering pings is dropped.
func TestLiveSilentClient(t *testing.T) {
	le := newLiveEnv(t, func(o *Options) { o.Limits.LiveIdle = 300 * time.Millisecond })
	c := le.open(t, livePayload)
	if code := closeCode(t, c); code != CloseIdle {
		t.Errorf("close code %d, want %d", code, CloseIdle)
	}
	// A stalled client: it never reads, so never answers a ping.
	le = newLiveEnv(t, func(o *Options) { o.Limits.LivePing = 200 * time.Millisecond })
	le.open(t, livePayload)
	waitFor(t, func() bool { return le.srv.live.count() == 1 })
	waitFor(t, func() bool { return le.srv.live.count() == 0 })
}

// TestLiveVanishMidTurn: a client that goes away while its turn is being
// answered stops the work, and the turn is logged as canceled, never as
// a success.
func TestLiveVanishMidTurn(t *testing.T) {
	le := newLiveEnv(t)
	le.inf.block = true
	le.inf.started = make(chan struct{}, 1)
	le.inf.canceled = make(chan error, 1)
	c := le.open(t, livePayload)
	sendAudio(t, c, append(pcm(1, true), pcm(1, false)...))
	<-le.inf.started
	_ = c.CloseNow()
	select {
	case err := <-le.inf.canceled:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("the engine's context ended with %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the engine work was not stopped")
	}
	waitFor(t, func() bool { return le.srv.live.count() == 0 })
	logs, _ := le.st.Logs(store.LogQuery{})
	var canceled int
	for _, e := range logs {
		if strings.HasPrefix(e.Message, "live turn ok") {
			t.Errorf("logged as a success: %+v", e)
		}
		if e.Message == "live turn failed: canceled" && e.Level == store.LevelWarn {
			canceled++
		}
	}
	if canceled != 1 {
		t.Errorf("%d canceled entries in %+v", canceled, logs)
	}
}

// TestLiveSpeculativePass: a speculative pass starts at the first short
// pause; speech that resumes cancels it; the pass of the last pause is
// reused by the committed turn when no speech came after it.
func TestLiveSpeculativePass(t *testing.T) {
	le := newLiveEnv(t)
	le.inf.holdAhead = true
	c := le.open(t, livePayload)
	// Speech, a 300 ms pause (over the 160 ms pause, under the 500 ms
	// end), speech again.
	sendAudio(t, c, append(append(pcm(1, true), pcm(0.3, false)...), pcm(0.5, true)...))
	names, _ := events(t, c, 1)
	if names[0] != "speech_start" {
		t.Fatalf("events %v", names)
	}
	waitFor(t, func() bool { return len(le.inf.aheadCtxs()) == 1 && le.inf.aheadCtxs()[0].Err() != nil })
	if len(le.inf.requests()) != 0 {
		t.Fatal("a final pass ran before the turn ended")
	}
	// Now the turn ends; the pass started at its last pause is reused.
	le.inf.mu.Lock()
	le.inf.holdAhead = false
	le.inf.mu.Unlock()
	sendAudio(t, c, pcm(1, false))
	names, evs := events(t, c, 3)
	if strings.Join(names, ",") != "end_of_turn,transcript,candidates" {
		t.Fatalf("events %v", names)
	}
	var tr transcriptEvent
	_ = json.Unmarshal(evs[1].Data, &tr)
	reqs := le.inf.requests()
	if len(le.inf.aheadCtxs()) != 2 || len(reqs) != 1 || reqs[0].Heard == nil || !strings.HasPrefix(tr.Transcript, "ahead ") {
		t.Errorf("%d speculative passes, requests %+v, transcript %q", len(le.inf.aheadCtxs()), reqs, tr.Transcript)
	}
}

// TestLiveEmptyTurnSupersedesNothing: a turn that turns out to hold no
// speech (the tail of a sentence after a pause, a breath) leaves the
// answer of the turn before it running, and gets a no_speech answer; a
// later turn with speech supersedes that answer, as a newer /v1/infer
// request does. benchlatency -live found the first case: jfk.wav's pause
// split it, the short second turn was found empty by voice detection and
// yet canceled the first turn's suggestions, so the partner's question got
// none.
func TestLiveEmptyTurnSupersedesNothing(t *testing.T) {
	le := newLiveEnv(t)
	le.inf.blockFirst = 1
	le.inf.noSpeechUnder = 1200 * time.Millisecond
	le.inf.started = make(chan struct{}, 3)
	c := le.open(t, livePayload)
	// Turn 1: 1.5 s of speech (heard), its answer held in the engine.
	sendAudio(t, c, append(pcm(1.5, true), pcm(0.8, false)...))
	names, _ := events(t, c, 3)
	if strings.Join(names, ",") != "speech_start,end_of_turn,transcript" {
		t.Fatalf("turn 1 events %v", names)
	}
	<-le.inf.started
	// Turn 2: 0.4 s the engine hears as no speech.
	sendAudio(t, c, append(pcm(0.4, true), pcm(0.8, false)...))
	names, evs := events(t, c, 3)
	if strings.Join(names, ",") != "speech_start,end_of_turn,candidates" {
		t.Fatalf("turn 2 events %v", names)
	}
	var out inferResponse
	if err := json.Unmarshal(evs[2].Data, &out); err != nil || out.NoSpeech == nil || !*out.NoSpeech || len(out.Response) != 0 {
		t.Fatalf("turn 2 answer %s (%v)", evs[2].Data, err)
	}
	ctxs := le.inf.inferCtxs()
	if len(ctxs) != 2 {
		t.Fatalf("%d engine requests, want 2", len(ctxs))
	}
	if err := ctxs[0].Err(); err != nil {
		t.Fatalf("turn 1's answer was stopped by a turn without speech: %v", context.Cause(ctxs[0]))
	}
	// Turn 3: speech again; it supersedes turn 1 and is answered.
	sendAudio(t, c, append(pcm(1.5, true), pcm(0.8, false)...))
	names, evs = events(t, c, 5)
	got := map[string]int{}
	for _, n := range names {
		got[n]++
	}
	if got["speech_start"] != 1 || got["end_of_turn"] != 1 || got["transcript"] != 1 || got["candidates"] != 1 || got["error"] != 1 {
		t.Fatalf("turn 3 events %v", names)
	}
	for i, n := range names {
		if n == "error" && !strings.Contains(string(evs[i].Data), `"superseded"`) {
			t.Errorf("turn 1 ended with %s, want superseded", evs[i].Data)
		}
	}
	if !superseded(ctxs[0]) {
		t.Errorf("turn 1's context ended with %v, want superseded", context.Cause(ctxs[0]))
	}
}

// TestLivePauseControl: while paused (the tablet speaks) nothing is heard;
// a payload control replaces the dialog for the next turn.
func TestLivePauseControl(t *testing.T) {
	le := newLiveEnv(t)
	c := le.open(t, livePayload)
	write(t, c, websocket.MessageText, []byte(`{"type":"pause"}`))
	sendAudio(t, c, append(pcm(1, true), pcm(1, false)...))
	write(t, c, websocket.MessageText, []byte(`{"type":"payload","payload":{"messages":[{"role":"speaker","content":"a"},{"role":"disabled_person","content":"b"}],"dialog_id":"d9"}}`))
	write(t, c, websocket.MessageText, []byte(`{"type":"resume"}`))
	sendAudio(t, c, append(pcm(1, true), pcm(1, false)...))
	names, _ := events(t, c, 4)
	if strings.Join(names, ",") != "speech_start,end_of_turn,transcript,candidates" {
		t.Fatalf("events %v", names)
	}
	reqs := le.inf.requests()
	if len(reqs) != 1 || reqs[0].DialogID != "d9" || len(reqs[0].Messages) != 3 {
		t.Errorf("requests %+v", reqs)
	}
}

// TestLiveOutlivesServerTimeouts: the server's read timeout does not cut a
// session, and shutdown closes it with 1001.
func TestLiveOutlivesServerTimeouts(t *testing.T) {
	const readTimeout = 300 * time.Millisecond
	le := newLiveEnv(t, func(o *Options) { o.Limits.RequestReadTimeout = readTimeout })
	hs := le.srv.HTTPServer("")
	ts := httptest.NewUnstartedServer(hs.Handler)
	ts.Config = hs
	ts.Start()
	t.Cleanup(ts.Close)
	le.ts = ts
	c := le.open(t, livePayload)
	time.Sleep(2 * readTimeout)
	sendAudio(t, c, append(pcm(1, true), pcm(1, false)...))
	if names, _ := events(t, c, 4); names[3] != "candidates" {
		t.Fatalf("events %v", names)
	}
	go func() { _ = hs.Shutdown(context.Background()) }()
	if code := closeCode(t, c); code != websocket.StatusGoingAway {
		t.Errorf("close code at shutdown %d", code)
	}
}

// scrapeMetric returns the value of e's /metrics series (name and labels),
// or -1 while it has no sample.
func scrapeMetric(t *testing.T, e *env, series string) float64 {
	t.Helper()
	rec := e.do(adminReq("GET", "/metrics", ""))
	if v, ok := findMetric(t, rec.Body.String(), series); ok {
		return v
	}
	return -1
}

// TestLiveWorkStartReported: the time from the arrival of a turn's last
// voiced audio to the start of the pass whose transcript the turn uses is
// observed once a turn, labelled by that pass: the speculative pass of the
// pause when it was kept, the final pass when the client ended the turn
// with no pause. Silence that arrives 150 ms after the voice was written puts
// the speculative pass about that late.
func TestLiveWorkStartReported(t *testing.T) {
	le := newLiveEnv(t)
	c := le.open(t, livePayload)
	sendAudio(t, c, pcm(1.024, true)) // 32 whole windows of voice
	time.Sleep(150 * time.Millisecond)
	sendAudio(t, c, pcm(1, false))
	names, _ := events(t, c, 4)
	if strings.Join(names, ",") != "speech_start,end_of_turn,transcript,candidates" {
		t.Fatalf("events %v", names)
	}
	spec := `replyd_live_work_start_seconds_count{pass="speculative"}`
	waitFor(t, func() bool { return scrapeMetric(t, le.env, spec) == 1 })
	if sum := scrapeMetric(t, le.env, `replyd_live_work_start_seconds_sum{pass="speculative"}`); sum < 0.1 || sum > 5 { // the server reads the voice a little after it was written
		t.Errorf("the speculative pass started %.3f s after the voice; the silence came 0.15 s after it", sum)
	}
	// Voice, then the client ends the turn: no pause, a final pass.
	sendAudio(t, c, pcm(1, true))
	write(t, c, websocket.MessageText, []byte(`{"type":"end"}`))
	names, _ = events(t, c, 4)
	if strings.Join(names, ",") != "speech_start,end_of_turn,transcript,candidates" {
		t.Fatalf("events %v", names)
	}
	waitFor(t, func() bool { return scrapeMetric(t, le.env, `replyd_live_work_start_seconds_count{pass="final"}`) == 1 })
	if n := scrapeMetric(t, le.env, spec); n != 1 {
		t.Errorf("%s = %v after a turn without a pause", spec, n)
	}
}

// TestLiveVoiceWhileCoresHeld: work that holds every core and never yields
// (a long generation on a loaded box) does not stall the session's reader:
// voice detection runs outside the budget after a short wait, and turn
// after turn is found and answered.
func TestLiveVoiceWhileCoresHeld(t *testing.T) {
	sched := engine.NewCores(1)
	le := newLiveEnv(t, func(o *Options) { o.Sched = sched })
	n, err := sched.Acquire(context.Background(), 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer sched.Release(n)
	c := le.open(t, livePayload)
	sendAudio(t, c, append(pcm(1, true), pcm(1, false)...))
	names, _ := events(t, c, 4)
	if strings.Join(names, ",") != "speech_start,end_of_turn,transcript,candidates" {
		t.Fatalf("events %v", names)
	}
	// Another turn with the core still held.
	sendAudio(t, c, append(pcm(1, true), pcm(1, false)...))
	names, _ = events(t, c, 4)
	if strings.Join(names, ",") != "speech_start,end_of_turn,transcript,candidates" {
		t.Fatalf("second turn: events %v", names)
	}
}

// TestLiveSpeechTurnSupersedesAtItsEnd: a turn whose windows hold speech
// (by the session's voice detection) supersedes the dialog's answer in
// progress as soon as it ends, before its own transcript, so that the
// earlier answer's work gives way to it at once.
func TestLiveSpeechTurnSupersedesAtItsEnd(t *testing.T) {
	le := newLiveEnv(t)
	le.inf.blockFirst = 1
	le.inf.started = make(chan struct{}, 3)
	c := le.open(t, livePayload)
	sendAudio(t, c, append(pcm(1.5, true), pcm(0.8, false)...))
	if names, _ := events(t, c, 3); strings.Join(names, ",") != "speech_start,end_of_turn,transcript" {
		t.Fatalf("turn 1 events %v", names)
	}
	<-le.inf.started
	// Turn 2's speech pass is held: no transcript can come for it.
	le.inf.mu.Lock()
	le.inf.holdAhead = true
	le.inf.mu.Unlock()
	sendAudio(t, c, append(pcm(1.5, true), pcm(0.8, false)...))
	names, evs := events(t, c, 3)
	if strings.Join(names, ",") != "speech_start,end_of_turn,error" || !strings.Contains(string(evs[2].Data), `"superseded"`) {
		t.Fatalf("turn 2 events %v (%s)", names, evs[len(evs)-1].Data)
	}
	if ctxs := le.inf.inferCtxs(); len(ctxs) != 1 || !superseded(ctxs[0]) {
		t.Errorf("%d engine requests; turn 1's context ended with %v", len(ctxs), context.Cause(ctxs[0]))
	}
}
