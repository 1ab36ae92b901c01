package whisper

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/replyd/replyd/engine"
)

// No-speech rule of whisper_full: a window whose no-speech probability
// exceeds noSpeechThold while its mean token log-probability is below
// logprobThold produces no text.
const (
	noSpeechThold = 0.6
	logprobThold  = -1.0
	// minContextFrames: a window that starts with fewer frames than this
	// left gets no context from the previous window.
	minContextFrames = 500
)

// windowResult is what greedy decoding produced for one 30 s window.
type windowResult struct {
	seek         int
	prompt       []int
	tokens       []int     // sampled tokens, ending in eot when the window ended on it
	margins      []float32 // per token: picked logit minus the best other allowed logit
	avgLogprob   float64
	noSpeechProb float64 // softmax of the logits at the sot position, at <|nospeech|>
	text         []byte
	noSpeech     bool // the no-speech rule fired: no text, no context
	// With the fallback: the temperature of the kept attempt, how many
	// temperatures were tried, and whether the kept attempt failed
	// whisper.cpp's entropy or loop rule (kept because it was the last).
	temperature float64
	attempts    int
	failed      bool
	// net: the window was encoded at a shortened audio_ctx, failed, and was
	// decoded again at the full window (fallbackWindow's safety net).
	net bool
}

// runResult is the outcome of one transcription.
type runResult struct {
	windows   []windowResult
	lang      int       // language id, -1 for English-only models
	langProbs []float64 // detection probabilities of the 100 ids, nil unless detected
	decoded   int       // tokens decoded in all attempts of all windows
	audioCtx  int       // the first window's encoder positions, 0 for the full window
	net       int       // windows the safety net decoded again at the full window
	mel       *melSpec
	melDur    time.Duration
	encDur    time.Duration
	decDur    time.Duration
}

// Transcribe turns 16 kHz mono samples into text. It is safe for
// concurrent use: one transcription runs at a time per Model, and a caller
// waiting for its turn gives up when ctx ends. A running transcription stops
// between windows and between tokens once ctx ends. Such cancellations
// return an error of kind engine.KindCanceled; empty input or samples that
// are not finite give engine.KindBadAudio; a closed Model gives
// engine.KindNotReady. Audio too short for one window (under about 0.1 s)
// gives an empty transcript, and so does a window that the no-speech rule
// silences.
//
// opts.Language selects the language of a multilingual model; empty, "auto"
// or an unknown code means detect it on the first window. English-only
// models ignore it. The Transcript carries the text tokens (ids below
// <|endoftext|>) of the windows that produced text, the language used, and
// the time spent in the mel, encoder and decoder stages.
//
// The encoder's window follows Options.Window (window.go) for audio that
// fits one window.
func (m *Model) Transcribe(ctx context.Context, pcm []float32, opts engine.TranscribeOptions) (engine.Transcript, error) {
	return m.TranscribeWith(ctx, pcm, opts, CallOptions{})
}

// CallOptions override a Model's window settings for one transcription.
type CallOptions struct {
	// AudioCtx, when above 0, is the encoder's positions (whisper.cpp's
	// audio_ctx; the model's n_audio_ctx and more mean the full window).
	// Audio longer than one 30 s window is refused with an error of kind
	// engine.KindBadAudio wrapping ErrWindowTooLong.
	AudioCtx int
	// Window, when AudioCtx is 0 and Window.Mode is not empty, replaces
	// Options.Window.
	Window Window
}

// window is the window rule of a transcription with c.
func (m *Model) window(c CallOptions) Window {
	if c.Window.Mode != "" {
		return c.Window
	}
	return m.opts.Window
}

// AudioCtxFor returns the encoder positions a transcription of n samples
// with c uses, 0 for the model's full window; an explicit c.AudioCtx on
// audio longer than one window is an error of kind engine.KindBadAudio
// wrapping ErrWindowTooLong.
func (m *Model) AudioCtxFor(n int, c CallOptions) (int, error) {
	if c.AudioCtx <= 0 {
		return m.audioCtx(n, m.window(c)), nil
	}
	if n > chunkSamples {
		return 0, engine.Errorf(engine.KindBadAudio, ErrWindowTooLong,
			"audio_ctx %d applies only to audio of one 30 s window; the recording is %.1f s", c.AudioCtx, float64(n)/SampleRate)
	}
	if c.AudioCtx >= m.hp.NAudioCtx {
		return 0, nil
	}
	return c.AudioCtx, nil
}

// TranscribeWith is Transcribe with the window settings of c.
func (m *Model) TranscribeWith(ctx context.Context, pcm []float32, opts engine.TranscribeOptions, c CallOptions) (engine.Transcript, error) {
	m.waiting.Add(1)
	select {
	case m.sem <- struct{}{}:
		m.waiting.Add(-1)
	case <-ctx.Done():
		m.waiting.Add(-1)
		return engine.Transcript{}, engine.Errorf(engine.KindCanceled, ctx.Err(), "transcription canceled while queued")
	}
	defer func() { <-m.sem }()
	if m.isClosed() {
		return engine.Transcript{}, engine.Errorf(engine.KindNotReady, nil, "the speech-to-text model is closed")
	}
	if len(pcm) == 0 {
		return engine.Transcript{}, engine.Errorf(engine.KindBadAudio, nil, "the recording has no samples")
	}
	for _, v := range pcm {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return engine.Transcript{}, engine.Errorf(engine.KindBadAudio, nil, "the recording has samples that are not finite")
		}
	}
	audioCtx, err := m.AudioCtxFor(len(pcm), c)
	if err != nil {
		return engine.Transcript{}, err
	}
	win := m.window(c)
	m.start(opts)
	m.stop = ctx
	defer func() { m.grow, m.stop = nil, nil }()
	lang, warning := m.language(opts.Language)
	res, err := m.runWindow(ctx, pcm, lang, m.maxTok, m.fallback, audioCtx)
	if err != nil {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return engine.Transcript{}, engine.Errorf(engine.KindCanceled, err, "transcription canceled")
		}
		return engine.Transcript{}, engine.Errorf(engine.KindSTT, err, "speech-to-text failed")
	}
	tr := engine.Transcript{Language: "en", Warning: warning, Mel: res.melDur, Encoder: res.encDur, Decoder: res.decDur, Tokens: []int{}}
	if res.lang >= 0 && res.lang < len(langCodes) {
		tr.Language = langCodes[res.lang]
	}
	var text []byte
	for _, w := range res.windows {
		if w.noSpeech {
			continue
		}
		text = append(text, w.text...)
		for _, t := range w.tokens {
			if t < m.tok.eot {
				tr.Tokens = append(tr.Tokens, t)
			}
		}
	}
	tr.Text = string(text)
	if res.audioCtx > 0 {
		m.shortened.Add(1)
	}
	m.log.Debug("transcribed", "window", win.String(), "audio_ctx", res.audioCtx, "window_retries", res.net, "samples", len(pcm), "windows", len(res.windows), "tokens", len(tr.Tokens),
		"decoded", res.decoded, "threads", m.base, "steps_lent", fmt.Sprintf("%d/%d", m.grown.lent, m.grown.asked),
		"language", tr.Language, "mel_ms", res.melDur.Milliseconds(), "encoder_ms", res.encDur.Milliseconds(),
		"decoder_ms", res.decDur.Milliseconds())
	return tr, nil
}

// Warnings of Transcript.Warning.
const (
	warnEnglishOnly = "The speech-to-text model is English-only: the recording was transcribed as English. " +
		"A multilingual Whisper model transcribes other languages."
	warnUnknownLanguage = "The speech-to-text model does not know the requested language: the language was detected instead."
)

// language returns the language id of a transcription asked for in code
// (-1: detect it) and the warning when that is not the language asked
// for. As in whisper.cpp, an English-only model transcribes English
// whatever it is asked (its main example warns "model is not
// multilingual, ignoring language"), and a multilingual one detects the
// language when code is empty or "auto" (whisper_full: language "auto"
// runs whisper_lang_auto_detect) or names none it knows.
func (m *Model) language(code string) (int, string) {
	if code == "" || code == "auto" {
		return -1, ""
	}
	id := langID(code)
	if !m.multilingual {
		if id != 0 {
			m.nonEnglish.Add(1)
			// The code is free text from a request: never logged.
			m.log.Debug("English-only model asked for another language: transcribing English")
			return -1, warnEnglishOnly
		}
		return -1, ""
	}
	if id < 0 {
		m.log.Warn("unknown transcription language, detecting instead")
		return -1, warnUnknownLanguage
	}
	return id, ""
}

func (m *Model) isClosed() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.closed
}

// startPrompt returns sot [language transcribe] notimestamps.
func (m *Model) startPrompt(lang int) []int {
	if !m.multilingual {
		return []int{m.tok.sot, m.tok.not}
	}
	return []int{m.tok.sot, m.tok.sot + 1 + lang, m.tok.transcribe, m.tok.not}
}

// detectLanguage decodes [sot] alone on st and returns the softmax over the
// 100 language tokens and its argmax, as whisper_lang_auto_detect does.
func (m *Model) detectLanguage(st *decState) (int, []float64, error) {
	st.reset()
	h, err := m.decode(st, []int{m.tok.sot})
	if err != nil {
		return 0, nil, err
	}
	lg, err := m.logits(h)
	if err != nil {
		return 0, nil, err
	}
	st.reset()
	probs := make([]float64, len(langCodes))
	mx := math.Inf(-1)
	for i := range probs {
		id := m.tok.sot + 1 + i
		probs[i] = float64(lg[id])
		mx = math.Max(mx, probs[i])
	}
	best := 0
	for i := range probs {
		if probs[i] > probs[best] {
			best = i
		}
	}
	var sum float64
	for i := range probs {
		probs[i] = math.Exp(probs[i] - mx)
		sum += probs[i]
	}
	for i := range probs {
		probs[i] /= sum
	}
	return best, probs, nil
}

// run transcribes pcm window by window with greedy decoding alone (README
// §4.3 of the conformance data): lang is a language id or -1 to detect it
// (multilingual models), maxTokens caps the tokens of one window (and so
// does the cap on tokens per second of audio, tokenCap).
func (m *Model) run(ctx context.Context, pcm []float32, lang int, maxTokens int) (*runResult, error) {
	return m.runWindow(ctx, pcm, lang, maxTokens, false, 0)
}

// runWith is run, with whisper.cpp's temperature fallback when fallback is
// set (fallbackWindow).
func (m *Model) runWith(ctx context.Context, pcm []float32, lang int, maxTokens int, fallback bool) (*runResult, error) {
	return m.runWindow(ctx, pcm, lang, maxTokens, fallback, 0)
}

// runWindow is runWith with the encoder on audioCtx positions (0: the
// model's n_audio_ctx), which the caller gives only for audio of one
// window. With the fallback, a shortened window that fails its tests is
// encoded and decoded again at the full window before any higher
// temperature (fallbackWindow's safety net).
func (m *Model) runWindow(ctx context.Context, pcm []float32, lang int, maxTokens int, fallback bool, audioCtx int) (*runResult, error) {
	if len(pcm) == 0 {
		return nil, errors.New("no audio samples")
	}
	for _, v := range pcm {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return nil, errors.New("audio samples are not finite")
		}
	}
	res := &runResult{lang: -1}
	t0 := time.Now()
	mel := m.logMel(pcm)
	res.mel = mel
	res.melDur = time.Since(t0)
	if !m.multilingual {
		lang = -1
	}
	res.lang = lang
	hp := m.hp
	input := make([]float32, hp.NMels*windowFrames)
	var prev []int // context carried to the next window
	temps := temperatures(fallback)
	var rngs decoders
	if fallback {
		rngs = newDecoders()
	}
	for seek := 0; seek+10 < mel.nLenOrg; seek += windowFrames {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if seek+minContextFrames >= mel.nLenOrg {
			prev = nil
		}
		t1 := time.Now()
		mel.window(seek, input)
		positions := audioCtx
		if seek > 0 {
			positions = 0 // never shorten a later window (its audio would be lost)
		}
		st, err := m.encodeWindow(input, positions)
		if err != nil {
			return nil, err // canceled between the encoder's steps, or the graph failed
		}
		m.shrink()
		res.encDur += time.Since(t1)
		if seek == 0 {
			res.audioCtx = positions
		}
		// full encodes the window again at the full window (the safety net).
		var full func() (*decState, error)
		var netDur time.Duration
		if positions > 0 {
			full = func() (*decState, error) {
				t := time.Now()
				defer func() { netDur += time.Since(t) }()
				st, err := m.encodeWindow(input, 0)
				m.shrink()
				return st, err
			}
		}
		t2 := time.Now()
		if m.multilingual && lang < 0 {
			if lang, res.langProbs, err = m.detectLanguage(st); err != nil {
				return nil, err
			}
		}
		res.lang = lang
		// The window's audio: up to 30 s from seek (mel frames are 10 ms).
		limit := min(maxTokens, tokenCap(min(len(pcm)-seek*hopLength, chunkSamples)))
		var w windowResult
		hist := prev
		if fallback {
			var n int
			w, hist, n, err = m.fallbackWindow(ctx, st, seek, prev, lang, limit, temps, rngs, full)
			res.decoded += n
		} else {
			w, err = m.greedyWindow(ctx, st, seek, prev, lang, limit)
			res.decoded += len(w.tokens)
		}
		res.decDur += time.Since(t2) - netDur
		res.encDur += netDur
		if w.net {
			res.net++
		}
		if err != nil {
			return nil, err
		}
		res.windows = append(res.windows, w)
		prev = hist
		if !w.noSpeech {
			next := append([]int(nil), prev...)
			next = append(next, w.tokens...)
			keep := hp.NTextCtx/2 - 1
			if len(next) > keep {
				next = next[len(next)-keep:]
			}
			prev = next
		}
	}
	return res, nil
}

// greedyWindow decodes one window: prompt ([startofprev context...] start
// prompt) as one batch, then one token at a time with whisper.cpp's
// suppression rules until <|endoftext|> or maxTokens tokens.
func (m *Model) greedyWindow(ctx context.Context, st *decState, seek int, prev []int, lang, maxTokens int) (windowResult, error) {
	w := windowResult{seek: seek}
	if len(prev) > 0 {
		w.prompt = append([]int{m.tok.prev}, prev...)
	}
	sotPos := len(w.prompt)
	w.prompt = append(w.prompt, m.startPrompt(max(lang, 0))...)
	st.reset()
	hidden, err := m.decode(st, w.prompt)
	if err != nil {
		return w, err
	}
	d := m.hp.NTextState
	sotLogits, err := m.logits(hidden[sotPos*d : (sotPos+1)*d])
	if err != nil {
		return w, err
	}
	w.noSpeechProb = softmaxAt(sotLogits, m.tok.nosp)
	last := hidden[(len(w.prompt)-1)*d:]
	// suppress_blank: no <|endoftext|> and no blank at the first step.
	first := []int{m.tok.eot}
	if m.tok.space >= 0 {
		first = append(first, m.tok.space)
	}
	// No more OpenBLAS products in this window: stop its spinning threads.
	m.stopBLAS()
	// The mean log-probability decides the window only when the no-speech
	// probability is above the threshold: then compute it exactly.
	exactLogprob := w.noSpeechProb > noSpeechThold
	// Never run past the text context.
	limit := min(maxTokens, m.hp.NTextCtx-len(w.prompt))
	var sumLogprob float64
	for i := 0; i < limit; i++ {
		if err := ctx.Err(); err != nil {
			return w, err
		}
		var banned []int
		if i == 0 {
			banned = first
		}
		p, err := m.next(last, banned, exactLogprob)
		if err != nil {
			return w, err
		}
		sumLogprob += p.logprob
		w.tokens = append(w.tokens, p.id)
		w.margins = append(w.margins, p.logit-p.runner)
		if p.id == m.tok.eot || i == limit-1 {
			break
		}
		if last, err = m.decode(st, []int{p.id}); err != nil {
			return w, err
		}
	}
	if len(w.tokens) > 0 {
		w.avgLogprob = sumLogprob / float64(len(w.tokens))
	}
	w.noSpeech = w.noSpeechProb > noSpeechThold && w.avgLogprob < logprobThold
	if !w.noSpeech {
		for _, t := range w.tokens {
			if t < m.tok.eot && t < len(m.vocab) {
				w.text = append(w.text, m.vocab[t]...)
			}
		}
	}
	return w, nil
}

// softmaxAt returns softmax(logits)[id], computed in float64.
func softmaxAt(logits []float32, id int) float64 {
	mx := math.Inf(-1)
	for _, v := range logits {
		mx = math.Max(mx, float64(v))
	}
	var sum float64
	for _, v := range logits {
		sum += math.Exp(float64(v) - mx)
	}
	return math.Exp(float64(logits[id])-mx) / sum
}

// String describes a window for test failures.
func (w windowResult) String() string {
	return fmt.Sprintf("window seek=%d prompt=%v tokens=%v", w.seek, w.prompt, w.tokens)
}

// start sets the threads of a transcription: opts.Threads (at most the
// model's own setting; 0 means that setting), growing through opts.Grow.
func (m *Model) start(opts engine.TranscribeOptions) {
	m.grown.asked, m.grown.lent = 0, 0
	m.base = m.maxThreads
	if opts.Threads > 0 {
		m.base = min(opts.Threads, m.maxThreads)
	}
	m.grow = opts.Grow
	m.setThreads(m.base)
}

// growThreads asks the caller (TranscribeOptions.Grow) how many threads
// the next products may run, up to the model's setting: before the
// encoder, its second convolution, and each layer's attention and MLP.
func (m *Model) growThreads() {
	if m.grow == nil || m.maxThreads <= m.base {
		return
	}
	m.setThreads(min(max(m.grow(m.maxThreads), m.base), m.maxThreads))
	m.grown.asked++
	if m.threads > m.base {
		m.grown.lent++
	}
}

// shrink goes back to the transcription's own threads once the encoder is
// done, giving back what it was lent: a decoder step is bound by memory
// (base.en q8_0 took 3.0 ms a token on one thread and 3.4-3.9 ms on two
// here; the demo model's tiny steps lose to the handover).
func (m *Model) shrink() {
	if m.grow == nil || m.maxThreads <= m.base {
		return
	}
	m.setThreads(m.base)
	m.grow(m.base)
}

// setThreads makes the products run n threads. Going down stops
// OpenBLAS's workers (they would spin on a core that is no longer this
// transcription's) and lowers its threads at once; going up raises them
// only when the encoder's next products need them (syncBLAS).
func (m *Model) setThreads(n int) {
	if n < m.threads {
		m.stopBLAS()
	}
	m.threads = n
	if m.blasThreads > n {
		m.syncBLAS()
	}
}

// syncBLAS tells OpenBLAS to run the products on m.threads threads. Only
// the encoder calls it, just before its products: telling OpenBLAS more
// threads starts its workers at once, and an idle worker spins for about
// 0.1 s, which would take a core from whatever runs next.
func (m *Model) syncBLAS() {
	if m.blasThreads != m.threads {
		setBLASThreads(m.threads)
		m.blasThreads = m.threads
	}
}

// stopBLAS stops OpenBLAS's workers when it may have run more than one
// thread (cheap when they are stopped already).
func (m *Model) stopBLAS() {
	if m.blasThreads > 1 {
		stopBLASThreads()
	}
}
