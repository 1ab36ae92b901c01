package engine

import "time"

// Live listening: the box hears the partner as they speak and decides when
// their turn ended (issue 23). The page streams 16 kHz mono samples; a
// TurnDetector runs voice activity detection on them window by window and
// turns the probabilities into the events of a turn.

// LiveRate is the sample rate of live audio.
const LiveRate = 16000

// VoiceWindow is the samples of one voice-detection window (32 ms): Silero
// VAD's window at 16 kHz.
const VoiceWindow = 512

// VoiceStream is voice activity detection over a stream: it carries its
// state from one window to the next. It is used by one goroutine at a time.
type VoiceStream interface {
	// Prob returns the speech probability of the next window, which holds
	// VoiceWindow samples.
	Prob(window []float32) float32
}

// VoiceDetector starts voice-detection streams. engine/vad's Detector
// implements it with Silero VAD. It is safe for concurrent use.
type VoiceDetector interface {
	NewVoiceStream() VoiceStream
}

// TurnConfig tunes a TurnDetector. Zero fields take DefaultTurnConfig's.
type TurnConfig struct {
	// EndSilence is the silence after speech that ends the turn.
	EndSilence time.Duration
	// Pause is the first short silence at which a speculative pass may
	// start (TurnPause); 0 in a config means the default, a value at or
	// above EndSilence turns pause events off.
	Pause time.Duration
	// MinSpeech is the speech a turn needs before it starts (TurnStart):
	// a click or a cough shorter than this is dropped, and costs nothing
	// but voice detection.
	MinSpeech time.Duration
	// PreRoll is the audio kept from before the first window heard as
	// speech (Silero hears a word's onset a window late), rounded up to a
	// whole window so that a turn's audio is whole windows (TurnEvent.Probs).
	PreRoll time.Duration
	// MaxTurn bounds the audio held for one turn (rounded up to a whole
	// window): a turn that reaches it
	// ends there (TurnEnd with Cut set) and the next one starts.
	MaxTurn time.Duration
	// Threshold is the probability from which a window is speech; a window
	// below Threshold-0.15 is silence, and one between them continues what
	// was before (whisper.cpp's hysteresis).
	Threshold float32
}

// DefaultEndSilence is the default end-of-turn silence. Voice agents end a
// turn after 200-500 ms (Pipecat 0.2 s, LiveKit 0.5 s at least, OpenAI's
// server VAD and whisper_streaming 0.5 s); people leave about 200 ms
// between turns, but pause longer inside a sentence, and a partner talking
// to an AAC user often slows down. 500 ms is the upper anchor: it splits
// fewer sentences at a breath, and the speculative pass started at the
// first short pause (DefaultPause) takes back most of the wait when the
// partner has in fact finished. docs/live.md says how to choose another.
const DefaultEndSilence = 500 * time.Millisecond

// DefaultPause is the default silence at which a speculative pass starts:
// 5 windows. The work on a turn then starts about 0.3 s after the end of
// speech, the bound: Silero hears voice about 80 ms past its end,
// the pause adds 160 ms, the page's 32 ms frame and the socket the rest
// (make bench-live measures it; at 250 ms it was about 0.35 s). A pass
// started at a pause inside a sentence is canceled when the voice resumes,
// and only ever used cores nobody else wanted.
const DefaultPause = 160 * time.Millisecond

// DefaultTurnConfig returns the defaults.
func DefaultTurnConfig() TurnConfig {
	return TurnConfig{
		EndSilence: DefaultEndSilence,
		Pause:      DefaultPause,
		MinSpeech:  250 * time.Millisecond,
		PreRoll:    200 * time.Millisecond,
		MaxTurn:    60 * time.Second,
		Threshold:  0.5,
	}
}

// WithDefaults fills c's zero fields from DefaultTurnConfig.
func (c TurnConfig) WithDefaults() TurnConfig {
	d := DefaultTurnConfig()
	if c.EndSilence <= 0 {
		c.EndSilence = d.EndSilence
	}
	if c.Pause <= 0 {
		c.Pause = d.Pause
	}
	if c.MinSpeech <= 0 {
		c.MinSpeech = d.MinSpeech
	}
	if c.PreRoll < 0 {
		c.PreRoll = 0
	} else if c.PreRoll == 0 {
		c.PreRoll = d.PreRoll
	}
	if c.MaxTurn <= 0 {
		c.MaxTurn = d.MaxTurn
	}
	if c.Threshold <= 0 || c.Threshold >= 1 {
		c.Threshold = d.Threshold
	}
	return c
}

// TurnEventKind names what happened in a turn.
type TurnEventKind int

// The events of a turn, in the order they can happen: TurnStart, then any
// number of TurnPause each followed by TurnResume, then TurnEnd.
const (
	// TurnStart: speech went on for MinSpeech; a turn has begun.
	TurnStart TurnEventKind = iota
	// TurnPause: the first short silence (Pause) in the turn: PCM holds
	// the turn's audio so far, for a speculative pass.
	TurnPause
	// TurnResume: speech again after a TurnPause, before the turn ended:
	// the speculative pass is of no use.
	TurnResume
	// TurnEnd: EndSilence of silence (or MaxTurn, or the stream's end):
	// PCM holds the turn's audio. Fresh is false when no speech came since
	// the last TurnPause (its pass stands).
	TurnEnd
)

// TurnEvent is one event of a turn.
type TurnEvent struct {
	Kind TurnEventKind
	// PCM is the turn's audio (TurnPause, TurnEnd). The detector never
	// writes over it: a speculative pass may read TurnPause's PCM while the
	// detector goes on.
	PCM []float32
	// Fresh (TurnEnd) is true when the turn heard speech since its last
	// TurnPause, or had none.
	Fresh bool
	// Cut (TurnEnd) is true when the turn reached MaxTurn.
	Cut bool
	// Probs (TurnPause, TurnEnd) are the speech probabilities of PCM's
	// windows of VoiceWindow samples, in order (a turn ended by Flush may
	// hold a last part window, without one): the speech stage keeps the
	// speech by them (Request.VoiceProbs). Never written over either.
	Probs []float32
}

// TurnDetector finds turns in a stream of 16 kHz mono samples. It holds at
// most PreRoll of audio while nobody speaks and MaxTurn during a turn. It
// is used by one goroutine at a time.
type TurnDetector struct {
	vs  VoiceStream
	cfg TurnConfig

	pending []float32 // samples short of a window
	pre     []float32 // the last PreRoll of audio, while not in a turn
	turn    []float32 // the candidate's or turn's audio
	// preProbs and probs are pre's and turn's windows' probabilities.
	preProbs, probs []float32

	inSpeech  bool  // the last decided window was speech
	candidate bool  // speech heard, turn not yet started
	started   bool  // TurnStart sent
	speech    int   // samples of speech in the candidate
	silence   int   // samples of silence since the last speech window
	paused    bool  // TurnPause sent and no speech since
	voiced    int64 // windows decided as voice since the detector began

	endSilence, pause, minSpeech, preRoll, maxTurn int
}

// NewTurnDetector returns a detector reading probabilities from vs.
func NewTurnDetector(vs VoiceStream, cfg TurnConfig) *TurnDetector {
	cfg = cfg.WithDefaults()
	n := func(d time.Duration) int { return int(d * LiveRate / time.Second) }
	return &TurnDetector{vs: vs, cfg: cfg,
		endSilence: n(cfg.EndSilence), pause: n(cfg.Pause), minSpeech: n(cfg.MinSpeech),
		preRoll: (n(cfg.PreRoll) + VoiceWindow - 1) / VoiceWindow * VoiceWindow, maxTurn: max(n(cfg.MaxTurn), VoiceWindow)}
}

// Config returns the detector's settings, defaults filled in.
func (d *TurnDetector) Config() TurnConfig { return d.cfg }

// Held returns the samples the detector holds now.
func (d *TurnDetector) Held() int { return len(d.pending) + len(d.pre) + len(d.turn) }

// TurnAudio returns the audio of the turn in progress so far and its
// windows' probabilities (nil when no turn has started): for partial
// transcripts while the partner speaks. The detector never writes over
// them; it only appends.
func (d *TurnDetector) TurnAudio() (pcm, probs []float32) {
	if !d.started {
		return nil, nil
	}
	return d.turn[:len(d.turn):len(d.turn)], d.probs[:len(d.probs):len(d.probs)]
}

// InTurn reports whether a turn has started and not ended.
func (d *TurnDetector) InTurn() bool { return d.started }

// Voiced returns how many windows the detector has decided were voice
// since it began (Reset does not restart the count). A caller that notes
// the count before and after Push, or inside an event's callback, knows
// whether the samples it pushed held voice: live sessions time their work
// from the arrival of the last voiced window.
func (d *TurnDetector) Voiced() int64 { return d.voiced }

// Windows returns how many whole windows Push would run voice detection
// on for n more samples.
func (d *TurnDetector) Windows(n int) int { return (len(d.pending) + n) / VoiceWindow }

// Push feeds samples and calls emit for each event, in order.
func (d *TurnDetector) Push(pcm []float32, emit func(TurnEvent)) {
	for len(pcm) > 0 {
		k := min(VoiceWindow-len(d.pending), len(pcm))
		d.pending = append(d.pending, pcm[:k]...)
		pcm = pcm[k:]
		if len(d.pending) == VoiceWindow {
			d.window(d.pending, emit)
			d.pending = d.pending[:0]
		}
	}
}

// Flush ends the stream: a turn in progress ends (TurnEnd) with the audio
// held; a candidate too short to be a turn is dropped.
func (d *TurnDetector) Flush(emit func(TurnEvent)) {
	if d.started {
		d.turn = append(d.turn, d.pending...)
		d.end(emit, false)
	}
	d.reset()
	d.pending = d.pending[:0]
}

// Reset forgets everything heard: the listening paused (the tablet speaks)
// or the caller dropped the turn.
func (d *TurnDetector) Reset() {
	d.reset()
	d.pending = d.pending[:0]
}

func (d *TurnDetector) reset() {
	d.pre, d.preProbs = d.pre[:0], d.preProbs[:0]
	d.turn, d.probs = nil, nil
	d.inSpeech, d.candidate, d.started, d.paused = false, false, false, false
	d.speech, d.silence = 0, 0
}

// window decides one window.
func (d *TurnDetector) window(w []float32, emit func(TurnEvent)) {
	p := d.vs.Prob(w)
	switch {
	case p >= d.cfg.Threshold:
		d.inSpeech = true
	case p < max(d.cfg.Threshold-0.15, 0.01):
		d.inSpeech = false
	}
	if d.inSpeech {
		d.voiced++
	}
	if !d.candidate {
		if !d.inSpeech {
			d.keepPreRoll(w, p)
			return
		}
		// Speech: a candidate turn starts with the pre-roll.
		d.candidate = true
		d.turn = append(append(make([]float32, 0, len(d.pre)+8*VoiceWindow), d.pre...), w...)
		d.probs = append(append(make([]float32, 0, len(d.preProbs)+8), d.preProbs...), p)
		d.pre, d.preProbs = d.pre[:0], d.preProbs[:0]
		d.speech, d.silence = VoiceWindow, 0
		d.check(emit)
		return
	}
	d.turn = append(d.turn, w...)
	d.probs = append(d.probs, p)
	if d.inSpeech {
		d.speech += VoiceWindow
		d.silence = 0
		if d.paused {
			d.paused = false
			emit(TurnEvent{Kind: TurnResume})
		}
	} else {
		d.silence += VoiceWindow
	}
	d.check(emit)
}

// check sends the events the counts call for.
func (d *TurnDetector) check(emit func(TurnEvent)) {
	if !d.started && d.speech >= d.minSpeech {
		d.started = true
		emit(TurnEvent{Kind: TurnStart})
	}
	switch {
	case d.silence >= d.endSilence:
		if d.started {
			d.end(emit, false)
		}
		// A candidate that never reached MinSpeech is dropped; the last
		// PreRoll of its audio is the next one's pre-roll.
		tail := d.turn[max(len(d.turn)-d.preRoll, 0):]
		tailProbs := d.probs[max(len(d.probs)-d.preRoll/VoiceWindow, 0):]
		pre, preProbs := append(d.pre[:0], tail...), append(d.preProbs[:0], tailProbs...)
		d.reset()
		d.pre, d.preProbs = pre, preProbs
	case len(d.turn) >= d.maxTurn:
		if d.started {
			d.end(emit, true)
		}
		d.reset()
	case d.started && !d.paused && d.silence >= d.pause && d.pause < d.endSilence:
		d.paused = true
		emit(TurnEvent{Kind: TurnPause, PCM: d.turn, Probs: d.probs})
	}
}

// end sends TurnEnd with the turn's audio.
func (d *TurnDetector) end(emit func(TurnEvent), cut bool) {
	emit(TurnEvent{Kind: TurnEnd, PCM: d.turn, Fresh: !d.paused, Cut: cut, Probs: d.probs})
	d.turn, d.probs = nil, nil
}

// keepPreRoll keeps the last PreRoll samples (whole windows), w included,
// and their probabilities, p included.
func (d *TurnDetector) keepPreRoll(w []float32, p float32) {
	if d.preRoll == 0 {
		return
	}
	d.pre = append(d.pre, w...)
	d.preProbs = append(d.preProbs, p)
	if over := len(d.pre) - d.preRoll; over > 0 {
		copy(d.pre, d.pre[over:])
		d.pre = d.pre[:d.preRoll]
		n := d.preRoll / VoiceWindow
		copy(d.preProbs, d.preProbs[len(d.preProbs)-n:])
		d.preProbs = d.preProbs[:n]
	}
}
