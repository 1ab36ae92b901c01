package engine

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// A live session's turns (issue 23, moved out of the transport by issue
// 41): a LiveSession feeds the partner's audio to a TurnDetector and runs
// the passes its events call for: a caption pass now and then while the
// partner speaks (issue 35), a speculative pass at the first pause and the
// replies generated ahead from its transcript, and the committed (final)
// pass at the turn's end, which reuses the speculative work when the audio
// and payload did not change and takes the dialog's place from the turn
// before it once it is known to hold speech. The transport (api) holds the
// socket and gives the session what it needs of the rest of the box
// through LiveHost, LiveTurnHost, Superseder and LiveMetrics.

// ErrSuperseded is the cause a request's context is canceled with when a
// newer request of the same API key and dialog arrives (Superseder).
var ErrSuperseded = errors.New("superseded by a newer request for the same dialog_id")

// LiveInferer runs the requests of a live session's turns (*Pipeline).
// An implementation that is also an AheadHearer makes speculative and
// caption passes, one that is an AheadReplier replies ahead.
type LiveInferer interface {
	Infer(ctx context.Context, req Request) (Result, error)
}

// AheadHearer hears a turn's audio so far at speculative priority
// (Pipeline.HearAhead).
type AheadHearer interface {
	HearAhead(ctx context.Context, req Request) (*HeardAhead, error)
}

// AheadReplier generates replies from a transcript heard ahead, before the
// turn is known to have ended (Pipeline.ReplyAhead).
type AheadReplier interface {
	ReplyAhead(ctx context.Context, req Request) (Result, error)
}

// LiveHost is what a LiveSession needs of the transport that holds it. Its
// methods are called on the goroutine that calls the session's methods,
// except Request, which the caption pass may call from its own.
type LiveHost interface {
	// Admit is called when a turn starts: it applies what a request is
	// subject to (the key's rights, rate limit, requests in progress) and
	// returns the turn's side of the host, or refuses the turn, reporting
	// the refusal to the client itself. A refused turn is heard to its end
	// and makes no work.
	Admit() (LiveTurnHost, error)
	// Request builds the engine request of a speculative or caption pass
	// from payload (the session's, opaque to the engine), the current
	// prompt read once with its version (Request.PromptVersion). An error
	// skips the pass.
	Request(payload []byte) (Request, error)
}

// LiveTurnHost is the host's side of one admitted turn: the sink of its
// events and its end. The session calls exactly one of End and Drop, once.
type LiveTurnHost interface {
	// Request builds the request of the turn's committed pass from
	// payload, reading the current prompt once (LiveHost.Request); the
	// host may check again that the turn may run. An error ends the turn
	// (End, with it).
	Request(payload []byte) (Request, error)
	// Event reports what happened in the turn as it happens, for the
	// client (LiveEvent). Caption events may come from a caption pass's
	// goroutine, candidate events from one the committed pass starts,
	// the others from the goroutine of the session or of the committed
	// pass; never two at once for one turn.
	Event(LiveEvent)
	// End is called once the committed pass is done, with its outcome:
	// the host answers the turn (its record, the candidates) or reports
	// the error, and frees what Admit took.
	End(LiveOutcome)
	// Drop is called instead of End for a turn that ended before its end
	// of turn (the listening paused, the session ended): nothing of it is
	// sent; the host frees what Admit took.
	Drop()
}

// LiveEventKind names an event of a live turn.
type LiveEventKind int

// The events of a live turn, in order: LiveSpeechStart, any number of
// LiveCaption, LiveEndOfTurn, then at most one LiveTranscript from the
// committed pass, a LiveCandidate for each reply as it is complete (issue
// 42), then the turn's End.
const (
	// LiveSpeechStart: the turn started and was admitted.
	LiveSpeechStart LiveEventKind = iota
	// LiveCaption: Text is the transcript of the turn's audio so far
	// (Audio long), while the partner speaks.
	LiveCaption
	// LiveEndOfTurn: the turn ended, holding Audio of audio; its
	// committed pass starts.
	LiveEndOfTurn
	// LiveTranscript: Heard is the committed pass's transcript, sent
	// before its replies.
	LiveTranscript
	// LiveCandidate: Candidate is one reply of the committed pass, the
	// moment it is complete, rank 1 first (Request.OnCandidate); none is
	// sent once the turn was superseded or its pass ended, and End's
	// Result lists the same replies in the same order. Stop ends the
	// committed pass's generation with a cause (the user took a reply and
	// the rest are not needed); End then gets the canceled error.
	LiveCandidate
)

// LiveEvent is one event of a live turn.
type LiveEvent struct {
	Kind LiveEventKind
	// Audio is the turn's audio so far (LiveCaption) or whole
	// (LiveEndOfTurn).
	Audio time.Duration
	// Text is a caption's transcript.
	Text string
	// Heard is the committed pass's transcript (LiveTranscript).
	Heard Heard
	// Candidate and Stop: see LiveCandidate.
	Candidate Candidate
	Stop      context.CancelCauseFunc
}

// LiveOutcome is what became of a turn's committed pass
// (LiveTurnHost.End).
type LiveOutcome struct {
	// Start is when the committed pass started (LiveConfig.Now).
	Start time.Time
	// Request is the request whose Result answers the turn: the committed
	// pass's, or the speculative pass's when its replies generated ahead
	// were reused (its prompt is the one the replies were made with); nil
	// when none was built (Err).
	Request *Request
	// Result is the answer when Err is nil.
	Result Result
	// Err is why the turn has no answer: the error of LiveTurnHost.Request
	// or of the inference, as they returned it.
	Err error
	// Superseded: the inference was canceled because a newer turn or
	// request of the dialog took its place (Superseder), while the
	// session went on.
	Superseded bool
}

// Superseder decides which of a dialog's requests is the newest, for the
// API key of the session (api's dialog flights).
type Superseder interface {
	// Order returns the arrival number of a turn ending now: later ones
	// get larger numbers.
	Order() uint64
	// Claim makes the turn that arrived at order the dialog's request in
	// flight, canceling the one before it with ErrSuperseded, unless a
	// newer one holds the place: then cancel is called with ErrSuperseded
	// at once. end forgets the claim.
	Claim(dialogID string, order uint64, cancel context.CancelCauseFunc) (end func())
}

// LiveMetrics receives a live session's counts. It must be safe for
// concurrent use.
type LiveMetrics interface {
	// Pass: a speech pass started, of kind "speculative", "final" or
	// "caption".
	Pass(kind string)
	// Speculative: what became of a speculative pass: "reused",
	// "canceled" (by resumed speech) or "failed".
	Speculative(outcome string)
	// RepliesAhead: what the committed turn did with the replies
	// generated ahead: "reused", "failed" or "stale" (the payload changed).
	RepliesAhead(outcome string)
	// WorkStarted: the work whose transcript the turn uses started at
	// start, the turn's last voiced audio having arrived at voiceEnd; pass
	// is "speculative" or "final".
	WorkStarted(pass string, voiceEnd, start time.Time)
	// Held: the session holds samples of audio now, inTurn or listening.
	Held(samples int, inTurn bool)
}

// LiveConfig is what a LiveSession is made with.
type LiveConfig struct {
	// Turn tunes the turn detector.
	Turn TurnConfig
	// Voice runs voice detection on the audio; its streams decide the
	// turns, and it keeps a turn's speech by their probabilities when it
	// can (SpeechByProbs).
	Voice VoiceDetector
	// Inferer runs the passes.
	Inferer LiveInferer
	// Sched gives voice detection its core (PriorityVoice), waited for
	// at most VoiceWait (nil: no budget).
	Sched     *Scheduler
	VoiceWait time.Duration
	// Timeout bounds a committed pass.
	Timeout time.Duration
	// CaptionEvery is the audio between caption passes; 0 or less: none.
	CaptionEvery time.Duration
	// OneTurn: the session hears one turn; OnAnswered is then called once
	// that turn is answered (or, refused, has ended).
	OneTurn    bool
	OnAnswered func()
	// Dialogs decides which of a dialog's requests is the newest; nil:
	// turns supersede nothing.
	Dialogs Superseder
	// Metrics receives the counts; nil: none.
	Metrics LiveMetrics
	// Now is the clock of LiveOutcome.Start; nil: time.Now.
	Now func() time.Time
}

// LiveSession is one live session's turn logic. Push, SetPayload, Pause,
// Resume, End, SetCaptions and Close are called by one goroutine (the
// session's reader).
type LiveSession struct {
	cfg  LiveConfig
	host LiveHost
	// ctx ends with the session (the host cancels it).
	ctx context.Context
	det *TurnDetector

	payload []byte
	paused  bool
	// heard: a one-turn session's turn ended; audio is dropped from then.
	heard bool
	turn  *liveTurn // the admitted turn being heard, nil when none

	// When the audio being pushed arrived and the detector's voiced-window
	// count before it; when the last audio holding a voiced window arrived.
	arrived   time.Time
	voicedAt  int64
	lastVoice time.Time

	// Captions: noCaptions is the client's switch; capMu orders a
	// caption's event before the turn's pause or end, which cancel the
	// caption pass (capCancel) under it; capRunning is set while a pass
	// runs; capAt is the turn audio (samples) the last pass began at.
	noCaptions bool
	capMu      sync.Mutex
	capCancel  context.CancelFunc
	capRunning atomic.Bool
	capAt      int

	passes sync.WaitGroup // committed passes in flight
}

// liveTurn is a turn from its start to its answer.
type liveTurn struct {
	host LiveTurnHost
	spec *specPass
	// order is the turn's arrival among the dialog's requests, taken when
	// it ended (Superseder.Order).
	order uint64
}

// specPass is a speculative speech pass over a turn's audio so far.
type specPass struct {
	cancel context.CancelFunc
	done   chan struct{}
	heard  *HeardAhead
	err    error
	// voiceEnd is when the last voiced window before the pause arrived,
	// started when the pass began.
	voiceEnd, started time.Time
	// payload is the session's payload the pass was made for, req its
	// request; replied is closed when the replies generated from its
	// transcript (AheadReplier) are done, nil when none were started.
	// Nothing of them is shown unless the committed turn is the same audio
	// and payload (commit).
	payload  []byte
	req      Request
	replied  chan struct{}
	reply    Result
	replyErr error
}

// errNoReplyAhead: a speculative pass heard no transcript to reply to.
var errNoReplyAhead = errors.New("no transcript heard ahead")

// NewLiveSession starts the turn logic of a session whose first payload
// is payload; ctx ends with the session.
func NewLiveSession(ctx context.Context, cfg LiveConfig, host LiveHost, payload []byte) *LiveSession {
	if cfg.Metrics == nil {
		cfg.Metrics = noLiveMetrics{}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &LiveSession{cfg: cfg, host: host, ctx: ctx, payload: payload,
		det: NewTurnDetector(cfg.Voice.NewVoiceStream(), cfg.Turn)}
}

// Listening reports whether audio is heard now: not paused, and not a
// one-turn session whose turn has ended. Audio pushed otherwise is dropped.
func (s *LiveSession) Listening() bool { return !s.paused && !s.heard }

// SetPayload replaces the payload for the next passes.
func (s *LiveSession) SetPayload(payload []byte) { s.payload = payload }

// Pause stops listening: everything heard is forgotten and the turn in
// progress dropped.
func (s *LiveSession) Pause() {
	s.paused = true
	s.det.Reset()
	s.dropTurn()
}

// Resume listens again after Pause.
func (s *LiveSession) Resume() { s.paused = false }

// End ends the turn in progress now, as the client asked.
func (s *LiveSession) End() { s.det.Flush(s.onTurn) }

// SetCaptions switches the caption events on or off (on by default).
func (s *LiveSession) SetCaptions(on bool) {
	s.noCaptions = !on
	if !on {
		s.stopCaption()
	}
}

// Close drops the turn being heard and waits for the committed passes; the
// host cancels the session's context first.
func (s *LiveSession) Close() {
	s.dropTurn()
	s.passes.Wait()
}

// Push hears pcm, which arrived at arrived (while Listening). Voice
// detection on live audio comes first of all work: it waits for a core at
// PriorityVoice, but work that holds every core without a yield point (a
// generation: over 20 s on a loaded box) would stall the session's reader,
// which must go on reading for the session's pongs and controls, so after
// VoiceWait the windows run outside the budget (about 1% of one core a
// session). It returns false when the session ended meanwhile.
func (s *LiveSession) Push(pcm []float32, arrived time.Time) bool {
	if s.det.Windows(len(pcm)) == 0 {
		s.push(pcm, arrived)
		return true
	}
	wctx, cancel := context.WithTimeout(s.ctx, s.cfg.VoiceWait)
	n, err := s.cfg.Sched.AcquireAt(wctx, PriorityVoice, 1, 1)
	cancel()
	if s.ctx.Err() != nil {
		s.cfg.Sched.Release(n)
		return false
	}
	if err != nil {
		n = 0
	}
	s.push(pcm, arrived)
	s.cfg.Sched.Release(n)
	s.cfg.Metrics.Held(s.det.Held(), s.det.InTurn())
	return s.ctx.Err() == nil
}

// push runs the detector on samples that arrived at arrived, noting
// whether they held voice.
func (s *LiveSession) push(pcm []float32, arrived time.Time) {
	s.arrived, s.voicedAt = arrived, s.det.Voiced()
	s.det.Push(pcm, s.onTurn)
	if s.det.Voiced() != s.voicedAt {
		s.lastVoice = arrived
	}
	s.maybeCaption()
}

// voiceEnd is when the last voiced window heard so far arrived: the audio
// being pushed when its windows so far held voice, else the last that did.
// Called from onTurn.
func (s *LiveSession) voiceEnd() time.Time {
	if s.det.Voiced() != s.voicedAt {
		return s.arrived
	}
	return s.lastVoice
}

// onTurn handles the detector's events.
func (s *LiveSession) onTurn(ev TurnEvent) {
	switch ev.Kind {
	case TurnStart:
		h, err := s.host.Admit()
		if err != nil {
			return // refused; the host reported it
		}
		s.turn = &liveTurn{host: h}
		s.capAt = 0
		h.Event(LiveEvent{Kind: LiveSpeechStart})
	case TurnPause:
		// The caption pass gives way to the speculative one at once.
		s.stopCaption()
		if s.turn != nil {
			s.turn.spec = s.startSpec(ev.PCM, ev.Probs)
		}
	case TurnResume:
		if s.turn != nil && s.turn.spec != nil {
			s.turn.spec.cancel()
			s.cfg.Metrics.Speculative("canceled")
			s.turn.spec = nil
		}
	case TurnEnd:
		s.stopCaption()
		t := s.turn
		s.turn = nil
		if t == nil {
			if s.cfg.OneTurn {
				s.endOneTurn()
			}
			return // refused at its start
		}
		t.host.Event(LiveEvent{Kind: LiveEndOfTurn, Audio: audioLength(ev.PCM)})
		if s.cfg.Dialogs != nil {
			t.order = s.cfg.Dialogs.Order()
		}
		spec := t.spec
		if ev.Fresh && spec != nil {
			spec.cancel()
			spec = nil
		}
		var voiceEnd time.Time
		if !ev.Cut { // a cut turn's voice goes on
			voiceEnd = s.voiceEnd()
		}
		s.passes.Add(1)
		s.cfg.Metrics.Pass("final")
		go s.finalPass(t, ev.PCM, ev.Probs, spec, s.payload, voiceEnd)
		if s.cfg.OneTurn {
			s.endOneTurn()
		}
	}
}

// audioLength is the length of live audio.
func audioLength(pcm []float32) time.Duration {
	return time.Duration(len(pcm)) * time.Second / LiveRate
}

// endOneTurn ends a one-turn session's listening at its turn's end: audio
// is dropped from now on, and OnAnswered is called once the turn is
// answered.
func (s *LiveSession) endOneTurn() {
	if s.heard {
		return
	}
	s.heard = true
	go func() {
		s.passes.Wait()
		if s.cfg.OnAnswered != nil {
			s.cfg.OnAnswered()
		}
	}()
}

// dropTurn forgets the turn being heard: its speculative pass stops and
// the host frees its slot.
func (s *LiveSession) dropTurn() {
	s.stopCaption()
	if t := s.turn; t != nil {
		if t.spec != nil {
			t.spec.cancel()
		}
		t.host.Drop()
		s.turn = nil
	}
}

// maybeCaption starts a caption pass over the turn's audio so far when the
// partner is speaking (a turn, no speculative pass) and CaptionEvery more
// of it came since the last pass began, and none runs. It uses the
// speculative pass's machinery (HearAhead: speculative priority, stopped by
// any committed work), and is canceled at the turn's pause or end, so that
// it never delays the turn's own transcript.
func (s *LiveSession) maybeCaption() {
	t := s.turn
	every := int(s.cfg.CaptionEvery * LiveRate / time.Second)
	if s.noCaptions || every <= 0 || t == nil || t.spec != nil || s.capRunning.Load() {
		return
	}
	pcm, probs := s.det.TurnAudio()
	if len(pcm) < s.capAt+every {
		return
	}
	h, ok := s.cfg.Inferer.(AheadHearer)
	if !ok {
		return
	}
	req, err := s.host.Request(s.payload)
	if err != nil {
		return
	}
	req.PCM, req.VoiceProbs = pcm, probs
	s.capAt = len(pcm)
	ctx, cancel := context.WithCancel(s.ctx)
	s.capMu.Lock()
	s.capCancel = cancel
	s.capMu.Unlock()
	s.capRunning.Store(true)
	s.cfg.Metrics.Pass("caption")
	go func() {
		defer s.capRunning.Store(false)
		defer cancel()
		heard, err := h.HearAhead(ctx, req)
		if err != nil || heard == nil || heard.NoSpeech || strings.TrimSpace(heard.Transcript) == "" {
			return
		}
		s.capMu.Lock()
		defer s.capMu.Unlock()
		if ctx.Err() == nil {
			t.host.Event(LiveEvent{Kind: LiveCaption, Text: heard.Transcript, Audio: audioLength(pcm)})
		}
	}()
}

// stopCaption cancels the caption pass, if one runs: once it returns, no
// caption of the turn so far is sent.
func (s *LiveSession) stopCaption() {
	s.capMu.Lock()
	defer s.capMu.Unlock()
	if s.capCancel != nil {
		s.capCancel()
		s.capCancel = nil
	}
}

// startSpec starts a speculative speech pass over pcm (probs: its
// windows' speech probabilities), when the engine offers one, and the
// replies from its transcript when the engine offers them.
func (s *LiveSession) startSpec(pcm, probs []float32) *specPass {
	h, ok := s.cfg.Inferer.(AheadHearer)
	if !ok {
		return nil
	}
	req, err := s.host.Request(s.payload)
	if err != nil {
		return nil
	}
	req.PCM, req.VoiceProbs = pcm, probs
	ctx, cancel := context.WithCancel(s.ctx)
	sp := &specPass{cancel: cancel, done: make(chan struct{}), voiceEnd: s.voiceEnd(), started: time.Now(), payload: s.payload, req: req}
	s.cfg.Metrics.Pass("speculative")
	replier, canReply := s.cfg.Inferer.(AheadReplier)
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

// finalPass answers a committed turn (commit) and hands its outcome to the
// host while the turn still holds its dialog's place.
func (s *LiveSession) finalPass(t *liveTurn, pcm, probs []float32, spec *specPass, payload []byte, voiceEnd time.Time) {
	defer s.passes.Done()
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.Timeout)
	defer cancel()
	ctx, supersede := context.WithCancelCause(ctx)
	defer supersede(nil)
	endFlight := func() {}
	defer func() { endFlight() }()
	claimed := false
	claim := func(dialogID string) {
		if !claimed && s.cfg.Dialogs != nil {
			claimed = true
			endFlight = s.cfg.Dialogs.Claim(dialogID, t.order, supersede)
		}
	}
	out := LiveOutcome{Start: s.cfg.Now()}
	fwd := newCandidateForwarder(ctx, t.host, supersede)
	out.Request, out.Result, out.Err = s.commit(ctx, t, pcm, probs, spec, payload, voiceEnd, claim, fwd)
	fwd.close()
	if out.Err != nil {
		out.Superseded = KindOf(out.Err) == KindCanceled && s.ctx.Err() == nil && errors.Is(context.Cause(ctx), ErrSuperseded)
	}
	t.host.End(out)
}

// commit is a committed turn's work: the transcript (reusing the
// speculative pass when the audio did not change), then the candidates. A
// newer turn of the same dialog supersedes it, as a newer request does,
// but only once the newer turn is known to hold speech (by voice detection
// on its windows, else by its transcript): the box, not the client, cut
// the turns, and a tail that voice detection or Whisper finds empty (a
// breath, the end of a word after a pause, a cough) must not throw away
// the suggestions of the turn before it. claim takes the dialog's place
// (superseding the turn before it). pcm is the turn's audio and probs its
// windows' speech probabilities from the session's detector (the speech
// is kept by them). voiceEnd is when the turn's last voiced window arrived
// (zero for a turn cut at MaxTurn): the time from it to the start of the
// work whose transcript the turn uses is reported (workStarted). It
// returns the request whose result answers the turn.
func (s *LiveSession) commit(ctx context.Context, t *liveTurn, pcm, probs []float32, spec *specPass, payload []byte,
	voiceEnd time.Time, claim func(dialogID string), fwd *candidateForwarder) (*Request, Result, error) {
	req, err := t.host.Request(payload)
	if err != nil {
		return nil, Result{}, err
	}
	fwd.open(req.MaxCandidates)
	req.OnCandidate = fwd.push
	req.PCM, req.VoiceProbs = pcm, probs
	// Speech by the turn's own probabilities (what the speech stage keeps)
	// is known now: such a turn takes the dialog at once, so that the
	// earlier answer's work gives its cores to this turn's. Else it takes
	// it when its transcript comes (OnTranscript is called only for
	// speech, before any language-model work).
	if sp, ok := KeepByProbs(s.cfg.Voice, pcm, probs); ok && len(sp.PCM) > 0 {
		claim(req.DialogID)
	}
	var ahead *Result // replies generated ahead, reused
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
			s.cfg.Metrics.Speculative("reused")
			s.workStarted(voiceEnd, spec.started, "speculative")
			if spec.replied != nil && !spec.heard.NoSpeech {
				// The transcript is shown now, not once the replies
				// generated ahead are done.
				claim(req.DialogID)
				t.host.Event(LiveEvent{Kind: LiveTranscript, Heard: spec.heard.Heard})
				sentTranscript = true
			}
			ahead = s.replyAhead(ctx, spec, payload)
		} else {
			s.cfg.Metrics.Speculative("failed")
		}
	}
	if req.Heard == nil && ctx.Err() == nil {
		s.workStarted(voiceEnd, time.Now(), "final")
	}
	req.OnTranscript = func(h Heard) {
		claim(req.DialogID)
		if !sentTranscript {
			t.host.Event(LiveEvent{Kind: LiveTranscript, Heard: h})
		}
	}
	if ahead != nil {
		// The replies were generated from the same audio and payload
		// while the turn's end was awaited: shown now, after its
		// transcript, as the pipeline would have sent them, and recorded
		// with the speculative pass's request (its prompt made them).
		req.OnTranscript(req.Heard.Heard)
		for _, c := range ahead.Candidates {
			fwd.push(c)
		}
		return &spec.req, *ahead, nil
	}
	res, err := s.cfg.Inferer.Infer(ctx, req)
	return &req, res, err
}

// candidateForwarder sends a committed pass's replies to the host as the
// language model completes them (Request.OnCandidate is called on the
// model's goroutine, which must not wait for the socket), on a goroutine
// of its own, in order, and drops those that come once the pass's context
// ended: a superseded turn sends no more replies.
type candidateForwarder struct {
	ctx  context.Context
	host LiveTurnHost
	stop context.CancelCauseFunc
	ch   chan Candidate
	done chan struct{}
}

func newCandidateForwarder(ctx context.Context, host LiveTurnHost, stop context.CancelCauseFunc) *candidateForwarder {
	return &candidateForwarder{ctx: ctx, host: host, stop: stop}
}

// open starts the forwarding of at most n replies (the engine sends no
// more than the request's MaxCandidates).
func (f *candidateForwarder) open(n int) {
	f.ch, f.done = make(chan Candidate, max(n, 1)), make(chan struct{})
	go func() {
		defer close(f.done)
		for c := range f.ch {
			if f.ctx.Err() == nil {
				f.host.Event(LiveEvent{Kind: LiveCandidate, Candidate: c, Stop: f.stop})
			}
		}
	}()
}

// push queues c; it never blocks for the replies open allowed.
func (f *candidateForwarder) push(c Candidate) {
	select {
	case f.ch <- c:
	default: // more than announced: never sent by the engine
	}
}

// close waits until every reply pushed was sent (or dropped).
func (f *candidateForwarder) close() {
	if f.ch != nil {
		close(f.ch)
		<-f.done
	}
}

// replyAhead waits for the replies generated from spec's transcript and
// returns them when the committed turn can use them: spec was made with
// payload (the turn's audio is spec's: the caller checked) and they came
// with no error. Else the committed turn generates afresh (its prompt
// mostly cached by the work done ahead).
func (s *LiveSession) replyAhead(ctx context.Context, spec *specPass, payload []byte) *Result {
	if spec.replied == nil {
		return nil
	}
	outcome := "failed"
	defer func() { s.cfg.Metrics.RepliesAhead(outcome) }()
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
// the work whose transcript the turn uses started (pass: "speculative"
// when the pass started at the pause became the final one, else "final").
func (s *LiveSession) workStarted(voiceEnd, start time.Time, pass string) {
	if voiceEnd.IsZero() {
		return
	}
	s.cfg.Metrics.WorkStarted(pass, voiceEnd, start)
}

// noLiveMetrics counts nothing.
type noLiveMetrics struct{}

func (noLiveMetrics) Pass(string)                              {}
func (noLiveMetrics) Speculative(string)                       {}
func (noLiveMetrics) RepliesAhead(string)                      {}
func (noLiveMetrics) WorkStarted(string, time.Time, time.Time) {}
func (noLiveMetrics) Held(int, bool)                           {}
