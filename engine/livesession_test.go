package engine

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// The turn logic of a live session (LiveSession) on a real Pipeline, whose
// engines are the tests' own: a transcriber that hears the audio's length,
// a generator that can be held, and a voice detector that hears a loud
// tone as speech. The transport's side (LiveHost) records what it is told.

// toneVoice hears a window as speech when its RMS is over 0.05, and keeps
// a turn's speech by those probabilities when it adds up to half a second
// (SpeechByProbs), a stand-in for Silero's minimum speech.
type toneVoice struct{}

func (toneVoice) NewVoiceStream() VoiceStream { return toneVoice{} }

func (toneVoice) Prob(w []float32) float32 {
	var sum float64
	for _, x := range w {
		sum += float64(x) * float64(x)
	}
	if math.Sqrt(sum/float64(len(w))) > 0.05 {
		return 0.95
	}
	return 0.02
}

func (toneVoice) KeepSpeechByProbs(pcm, probs []float32) Speech {
	var sp Speech
	for i, p := range probs {
		if p >= 0.5 {
			sp.PCM = append(sp.PCM, pcm[i*VoiceWindow:(i+1)*VoiceWindow]...)
		}
	}
	if len(sp.PCM) < LiveRate/2 {
		return Speech{}
	}
	sp.Segments = 1
	return sp
}

// tone is sec seconds of a loud 440 Hz tone (loud) or of silence.
func tone(sec float64, loud bool) []float32 {
	out := make([]float32, int(sec*LiveRate))
	if loud {
		for i := range out {
			out[i] = float32(0.3 * math.Sin(2*math.Pi*440*float64(i)/LiveRate))
		}
	}
	return out
}

// lengthSTT transcribes audio as its length ("heard 1.2s"), counting the
// transcriptions; audio shorter than emptyUnder is heard as nothing (as
// Whisper's no-speech rule silences a cough).
type lengthSTT struct {
	mu         sync.Mutex
	heard      []string
	emptyUnder time.Duration
}

func (s *lengthSTT) Transcribe(_ context.Context, pcm []float32, _ TranscribeOptions) (Transcript, error) {
	text := fmt.Sprintf("heard %s", audioLength(pcm))
	s.mu.Lock()
	defer s.mu.Unlock()
	s.heard = append(s.heard, text)
	if audioLength(pcm) < s.emptyUnder {
		text = ""
	}
	return Transcript{Text: text, Language: "en", Model: "tiny.bin"}, nil
}

func (s *lengthSTT) transcripts() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.heard)
}

// heldLLM replies to the partner's turn; while held is set its
// generations wait for release (or their context), as a generation does.
type heldLLM struct {
	mu      sync.Mutex
	held    bool
	release chan struct{}
	prompts []string // the system prompts of the generations started
	ctxs    []context.Context
	started chan struct{}
}

func (g *heldLLM) Generate(ctx context.Context, req GenerateRequest) (Generation, error) {
	g.mu.Lock()
	g.prompts = append(g.prompts, req.SystemPrompt)
	g.ctxs = append(g.ctxs, ctx)
	held, started := g.held, g.started
	g.mu.Unlock()
	if started != nil {
		started <- struct{}{}
	}
	if held {
		select {
		case <-g.release:
		case <-ctx.Done():
			return Generation{}, Errorf(KindCanceled, ctx.Err(), "generation canceled")
		}
	}
	var cands []Candidate
	for i := range req.N {
		c := Candidate{Text: "reply to " + PartnerTurn(req.Messages), Rank: i + 1}
		cands = append(cands, c)
		if req.OnCandidate != nil {
			req.OnCandidate(c) // as engine/llm does, each as it completes
		}
	}
	return Generation{Candidates: cands, Model: "tiny.gguf"}, nil
}

func (g *heldLLM) systemPrompts() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.prompts)
}

// recHost is the transport's side: it admits every turn (or refuses when
// refuse is set), builds requests of dialog "d" whose prompt changes at
// every read ("prompt n", version n), and records each turn.
type recHost struct {
	mu     sync.Mutex
	reads  int
	refuse error
	turns  []*recTurn
}

func (h *recHost) Admit() (LiveTurnHost, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.refuse != nil {
		return nil, h.refuse
	}
	t := &recTurn{host: h, end: make(chan LiveOutcome, 1)}
	h.turns = append(h.turns, t)
	return t, nil
}

func (h *recHost) Request(payload []byte) (Request, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.reads++
	return Request{
		Messages:      []Message{{Role: RoleDisabledPerson, Content: string(payload)}, {Role: RoleSpeaker, Audio: true}},
		DialogID:      "d",
		MaxCandidates: 2,
		SystemPrompt:  fmt.Sprintf("prompt %d", h.reads),
		PromptVersion: fmt.Sprint(h.reads),
	}, nil
}

func (h *recHost) turn(t *testing.T, i int) *recTurn {
	t.Helper()
	waitFor(t, func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return len(h.turns) > i
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.turns[i]
}

// recTurn records one turn's events and its end.
type recTurn struct {
	host    *recHost
	mu      sync.Mutex
	events  []LiveEvent
	dropped bool
	end     chan LiveOutcome
}

func (t *recTurn) Request(payload []byte) (Request, error) { return t.host.Request(payload) }

func (t *recTurn) Event(ev LiveEvent) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.events = append(t.events, ev)
}

func (t *recTurn) End(o LiveOutcome) { t.end <- o }

func (t *recTurn) Drop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.dropped = true
}

// kinds names the turn's events so far.
func (t *recTurn) kinds() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	names := map[LiveEventKind]string{LiveSpeechStart: "speech_start", LiveCaption: "caption", LiveEndOfTurn: "end_of_turn", LiveTranscript: "transcript", LiveCandidate: "candidate"}
	var out []string
	for _, ev := range t.events {
		out = append(out, names[ev.Kind])
	}
	return strings.Join(out, ",")
}

// outcome waits for the turn's end.
func (t *recTurn) outcome(tb *testing.T) LiveOutcome {
	tb.Helper()
	select {
	case o := <-t.end:
		return o
	case <-time.After(10 * time.Second):
		tb.Fatal("the turn did not end")
		return LiveOutcome{}
	}
}

// dialogs is a Superseder of one key: the newest claim of a dialog cancels
// the one before it.
type dialogs struct {
	mu     sync.Mutex
	seq    uint64
	order  map[string]uint64
	cancel map[string]context.CancelCauseFunc
}

func (d *dialogs) Order() uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.seq++
	return d.seq
}

func (d *dialogs) Claim(dialog string, order uint64, cancel context.CancelCauseFunc) func() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.order == nil {
		d.order, d.cancel = map[string]uint64{}, map[string]context.CancelCauseFunc{}
	}
	if old, ok := d.order[dialog]; ok && old > order {
		cancel(ErrSuperseded)
		return func() {}
	}
	if c := d.cancel[dialog]; c != nil {
		c(ErrSuperseded)
	}
	d.order[dialog], d.cancel[dialog] = order, cancel
	return func() {}
}

// countMetrics counts what LiveMetrics is told.
type countMetrics struct {
	mu sync.Mutex
	n  map[string]int
}

func (m *countMetrics) add(k string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.n == nil {
		m.n = map[string]int{}
	}
	m.n[k]++
}

func (m *countMetrics) snapshot() map[string]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.n)
}

func (m *countMetrics) get(k string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.n[k]
}

func (m *countMetrics) Pass(kind string)                        { m.add("pass " + kind) }
func (m *countMetrics) Speculative(o string)                    { m.add("speculative " + o) }
func (m *countMetrics) RepliesAhead(o string)                   { m.add("ahead " + o) }
func (m *countMetrics) WorkStarted(pass string, _, _ time.Time) { m.add("work " + pass) }
func (m *countMetrics) Held(int, bool)                          {}

// liveRig is a session on a pipeline.
type liveRig struct {
	sess    *LiveSession
	host    *recHost
	stt     *lengthSTT
	llm     *heldLLM
	metrics *countMetrics
	cancel  context.CancelFunc
}

func newLiveRig(t *testing.T, mod ...func(*LiveConfig)) *liveRig {
	t.Helper()
	r := &liveRig{host: &recHost{}, stt: &lengthSTT{}, llm: &heldLLM{release: make(chan struct{})}, metrics: &countMetrics{}}
	p := &Pipeline{STT: r.stt, LLM: r.llm, Sched: NewScheduler(SchedulerConfig{Cores: 2})}
	cfg := LiveConfig{Voice: toneVoice{}, Inferer: p, Sched: p.Sched, VoiceWait: 50 * time.Millisecond,
		Timeout: 10 * time.Second, Dialogs: &dialogs{}, Metrics: r.metrics}
	for _, m := range mod {
		m(&cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	r.sess = NewLiveSession(ctx, cfg, r.host, []byte("Hello."))
	t.Cleanup(func() {
		cancel()
		r.sess.Close()
	})
	return r
}

// push hears pcm in the 100 ms frames a page sends.
func (r *liveRig) push(t *testing.T, pcm []float32) {
	t.Helper()
	for len(pcm) > 0 {
		n := min(len(pcm), LiveRate/10)
		if !r.sess.Push(pcm[:n], time.Now()) {
			t.Fatal("the session ended")
		}
		pcm = pcm[n:]
	}
}

// TestLiveSessionTurn: speech then silence is one turn: its events in
// order, the speculative pass started at the first pause reused by the
// committed one (one transcription), the candidates from the pipeline, and
// the request the answer was made with (its prompt version) handed back.
func TestLiveSessionTurn(t *testing.T) {
	r := newLiveRig(t)
	r.push(t, slices.Concat(tone(0.3, false), tone(1, true), tone(1, false)))
	turn := r.host.turn(t, 0)
	o := turn.outcome(t)
	if o.Err != nil || o.Request == nil {
		t.Fatalf("outcome %+v", o)
	}
	if got := turn.kinds(); got != "speech_start,end_of_turn,transcript,candidate,candidate" {
		t.Errorf("events %s", got)
	}
	// The candidate events are the answer's replies, in order, with
	// their language (the pipeline's).
	turn.mu.Lock()
	var sent []Candidate
	for _, ev := range turn.events {
		if ev.Kind == LiveCandidate {
			sent = append(sent, ev.Candidate)
		}
	}
	turn.mu.Unlock()
	if !slices.Equal(sent, o.Result.Candidates) {
		t.Errorf("candidate events %+v, answer %+v", sent, o.Result.Candidates)
	}
	if tr := r.stt.transcripts(); len(tr) != 1 {
		t.Errorf("transcriptions %v, want the speculative pass's alone", tr)
	}
	if len(o.Result.Candidates) != 2 || o.Result.Candidates[0].Text != "reply to "+o.Result.Transcript || o.Result.Model != "tiny.gguf" || o.Result.SpeechModel != "tiny.bin" {
		t.Errorf("result %+v", o.Result)
	}
	// The prompt the reply was made with is the request's, and its version
	// is the one handed back.
	if p := r.llm.systemPrompts(); len(p) != 1 || p[0] != "prompt "+o.Request.PromptVersion {
		t.Errorf("generated with prompts %v; the outcome's request names version %q", p, o.Request.PromptVersion)
	}
	for _, k := range []string{"pass speculative", "pass final", "speculative reused", "work speculative"} {
		if r.metrics.get(k) != 1 {
			t.Errorf("metric %q counted %d, want 1", k, r.metrics.get(k))
		}
	}
	turn.mu.Lock()
	eot := turn.events[1]
	turn.mu.Unlock()
	// The tone, the pre-roll before it and the silence that ended it.
	if eot.Audio < 1500*time.Millisecond || eot.Audio > 1800*time.Millisecond {
		t.Errorf("end_of_turn holds %s", eot.Audio)
	}
}

// TestLiveSessionResumedSpeech: a pause inside the turn starts a
// speculative pass; the voice resuming cancels it, and the pass of the
// pause that ended the turn, which heard all of it, answers it.
func TestLiveSessionResumedSpeech(t *testing.T) {
	r := newLiveRig(t)
	r.push(t, slices.Concat(tone(1, true), tone(0.3, false), tone(1, true), tone(1, false)))
	o := r.host.turn(t, 0).outcome(t)
	if o.Err != nil {
		t.Fatal(o.Err)
	}
	if r.metrics.get("speculative canceled") != 1 || r.metrics.get("speculative reused") != 1 {
		t.Errorf("metrics %v: want the first pass canceled, the second reused", r.metrics.snapshot())
	}
	// The first pass may be canceled before it transcribes anything.
	tr := r.stt.transcripts()
	if len(tr) == 0 || len(tr) > 2 || !slices.Contains(tr, o.Result.Transcript) || !strings.HasPrefix(o.Result.Transcript, "heard 2.") {
		t.Errorf("transcriptions %v, answer %q: want the whole turn heard by the second pass", tr, o.Result.Transcript)
	}
}

// TestLiveSessionSupersede: a newer turn of the dialog that holds speech
// supersedes the one still generating; a tail without speech (a cough
// after the answer began: no speech by its windows, nothing transcribed)
// supersedes nothing.
func TestLiveSessionSupersede(t *testing.T) {
	// No speculative passes: each turn's committed pass does its work.
	r := newLiveRig(t, func(c *LiveConfig) { c.Turn.Pause = time.Second })
	r.llm.held = true
	r.llm.started = make(chan struct{}, 4)
	r.stt.emptyUnder = 1200 * time.Millisecond
	r.push(t, slices.Concat(tone(1, true), tone(1, false)))
	<-r.llm.started
	first := r.host.turn(t, 0)
	r.push(t, slices.Concat(tone(0.3, true), tone(1, false)))
	if o := r.host.turn(t, 1).outcome(t); o.Err != nil || !o.Result.NoSpeech {
		t.Fatalf("the tail's outcome %+v: want no speech", o)
	}
	r.llm.mu.Lock()
	firstCtx := r.llm.ctxs[0]
	r.llm.mu.Unlock()
	if err := context.Cause(firstCtx); err != nil {
		t.Fatalf("the first turn's generation ended (%v) after a tail without speech", err)
	}
	// A turn with speech takes the dialog at once.
	r.push(t, slices.Concat(tone(1, true), tone(1, false)))
	o := first.outcome(t)
	if !o.Superseded || KindOf(o.Err) != KindCanceled {
		t.Errorf("the first turn's outcome %+v: want superseded", o)
	}
	close(r.llm.release)
	if o := r.host.turn(t, 2).outcome(t); o.Err != nil || o.Superseded || len(o.Result.Candidates) != 2 {
		t.Errorf("the newest turn's outcome %+v: want its answer", o)
	}
}

// TestLiveSessionPauseDrops: pausing drops the turn being heard (Drop, no
// End) and hears nothing until Resume.
func TestLiveSessionPauseDrops(t *testing.T) {
	r := newLiveRig(t)
	r.push(t, tone(1, true))
	turn := r.host.turn(t, 0)
	r.sess.Pause()
	turn.mu.Lock()
	dropped := turn.dropped
	turn.mu.Unlock()
	if !dropped || r.sess.Listening() {
		t.Fatalf("after Pause: dropped %v, listening %v", turn.dropped, r.sess.Listening())
	}
	r.sess.Resume()
	r.push(t, slices.Concat(tone(1, true), tone(1, false)))
	if o := r.host.turn(t, 1).outcome(t); o.Err != nil {
		t.Fatal(o.Err)
	}
	select {
	case o := <-turn.end:
		t.Errorf("the dropped turn ended %+v", o)
	default:
	}
}

// TestLiveSessionRefusedTurn: a turn the host refuses makes no work; a
// one-turn session is over at its end all the same.
func TestLiveSessionRefusedTurn(t *testing.T) {
	answered := make(chan struct{})
	r := newLiveRig(t, func(c *LiveConfig) {
		c.OneTurn = true
		c.OnAnswered = func() { close(answered) }
	})
	r.host.refuse = fmt.Errorf("rate limited")
	r.push(t, slices.Concat(tone(1, true), tone(1, false)))
	<-answered
	if r.sess.Listening() || len(r.stt.transcripts()) != 0 || r.host.turns != nil {
		t.Errorf("listening %v, transcriptions %v, turns %v: want none", r.sess.Listening(), r.stt.transcripts(), r.host.turns)
	}
}

// TestLiveSessionCaptions: while the partner speaks, caption passes report
// the words so far; none comes after the turn's end of turn, and none when
// captions are switched off.
func TestLiveSessionCaptions(t *testing.T) {
	r := newLiveRig(t, func(c *LiveConfig) { c.CaptionEvery = 300 * time.Millisecond })
	r.push(t, tone(0.6, true))
	turn := r.host.turn(t, 0)
	waitFor(t, func() bool { return strings.Contains(turn.kinds(), "caption") })
	r.push(t, slices.Concat(tone(0.5, true), tone(1, false)))
	turn.outcome(t)
	if k := turn.kinds(); !strings.HasPrefix(k, "speech_start,caption") || strings.Contains(k[strings.Index(k, "end_of_turn"):], "caption") {
		t.Errorf("events %s", k)
	}
	r.sess.SetCaptions(false)
	r.push(t, slices.Concat(tone(1.5, true), tone(1, false)))
	next := r.host.turn(t, 1)
	next.outcome(t)
	if k := next.kinds(); strings.Contains(k, "caption") {
		t.Errorf("events %s with captions off", k)
	}
}

// TestLiveSessionRepliesAhead: the replies generated from the speculative
// pass's transcript answer the turn when its payload did not change, with
// the request (and prompt) they were made with; after a new payload they
// are stale and the turn generates afresh.
func TestLiveSessionRepliesAhead(t *testing.T) {
	r := newLiveRig(t)
	r.push(t, slices.Concat(tone(1, true), tone(1, false)))
	o := r.host.turn(t, 0).outcome(t)
	if o.Err != nil || r.metrics.get("ahead reused") != 1 || len(r.llm.systemPrompts()) != 1 {
		t.Fatalf("outcome %+v, metrics %v, generations %v: want the replies ahead reused", o, r.metrics.snapshot(), r.llm.systemPrompts())
	}
	if p := r.llm.systemPrompts()[0]; p != "prompt "+o.Request.PromptVersion || o.Request.PromptVersion != "1" {
		t.Errorf("replies made with %q; the outcome names version %q: want the speculative pass's (1)", p, o.Request.PromptVersion)
	}
	// The payload changes between the pause and the end.
	r.push(t, slices.Concat(tone(1, true), tone(0.2, false)))
	waitFor(t, func() bool { return r.metrics.get("pass speculative") == 2 })
	r.sess.SetPayload([]byte("Hi again."))
	r.push(t, tone(0.8, false))
	o = r.host.turn(t, 1).outcome(t)
	if o.Err != nil || r.metrics.get("ahead stale") != 1 {
		t.Fatalf("outcome %+v, metrics %v: want the replies ahead stale", o, r.metrics.snapshot())
	}
	if got := o.Request.Messages[0].Content; got != "Hi again." {
		t.Errorf("answered with the payload %q, want the new one", got)
	}
}
