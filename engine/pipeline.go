package engine

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// DecodeFunc turns uploaded audio bytes into 16 kHz mono float32 samples,
// refusing recordings longer than max before allocating for them. Its errors
// wrap the sentinels of engine/audio.
type DecodeFunc func(data []byte, max time.Duration) ([]float32, error)

// Pipeline runs one inference: decode → transcribe → prompt → candidates.
// Its fields are set once at start and never changed; it is safe for
// concurrent use when its engines are.
type Pipeline struct {
	Decode DecodeFunc
	STT    Transcriber
	LLM    Generator
	// VAD keeps only the speech of a recording before it is transcribed;
	// nil transcribes the whole recording.
	VAD      SpeechFilter
	MaxAudio time.Duration // longest accepted recording
	Now      func() time.Time
	// Memory, when set, supplies a remembering user's earlier replies as
	// examples for the prompt (Request.MemoryUser).
	Memory Recaller

	// STTStage and LLMStage admit requests into the two serial steps; see
	// Stage. Their zero values admit everything. A recording is admitted
	// into STTStage before it is decoded, so that a request the stage would
	// refuse costs no decoding.
	STTStage Stage
	LLMStage Stage
	// Workload admits a request only when the work admitted before it is
	// not expected to keep it waiting too long; see Workload. Its zero value
	// admits everything.
	Workload Workload

	// CPU is the budget both engines take their cores from (nil: none).
	// A transcription takes STTThreads cores (the threads the speech
	// engine was loaded with; 0 means all of the budget) for its whole run;
	// the language model takes cores per decode.
	CPU        *Cores
	STTThreads int
	// Overlap evaluates the prompt up to the partner's current turn while
	// the recording is being transcribed, when LLM is a Prefiller. It uses
	// only the cores the transcription leaves free.
	Overlap bool

	sttOnce sync.Once
	sttTurn chan struct{} // one transcription at a time holds cores
	// lastLanguage is the language of the last transcript: the guess
	// Prefill renders the prompt with when the payload names none, since
	// the prompt names the language the transcript turns out to be in.
	lastLanguage atomic.Value
	// Decodes bounds the recordings decoded at once (decoding is the step
	// whose memory grows with the upload); its zero value does not.
	Decodes Slots
}

func (p *Pipeline) now() time.Time {
	if p.Now != nil {
		return p.Now()
	}
	return time.Now()
}

// Infer runs req through the pipeline. Errors are *Error values whose Kind
// says how the API should answer.
func (p *Pipeline) Infer(ctx context.Context, req Request) (Result, error) {
	start := p.now()
	var res Result
	msgs := append([]Message(nil), req.Messages...)
	greqReserve := 0

	sttWork, own := time.Duration(0), p.LLMStage.Avg()
	if req.Audio != nil {
		sttWork = p.STTStage.Avg()
		own += sttWork
	}
	release, err := p.Workload.Admit(own)
	if err != nil {
		return res, err
	}
	defer release(own)

	if req.Audio != nil {
		res.HasTranscript = true
		// Admitted before decoding: a request the stage would refuse
		// costs no decoding.
		done, err := p.STTStage.Enter(ctx)
		if err != nil {
			return res, err
		}
		t0 := p.now()
		pcm, err := p.decode(ctx, req.Audio)
		res.Timings.Decode = p.now().Sub(t0)
		if err != nil {
			done(0)
			return res, err
		}
		res.AudioSeconds = float64(len(pcm)) / 16000
		if p.VAD != nil {
			sp, err := p.keepSpeech(ctx, pcm)
			if err != nil {
				done(0)
				return res, wrapEngineErr(err, KindSTT, "voice activity detection failed")
			}
			if len(sp.PCM) == 0 {
				// No speech: Whisper never runs and nobody is answered.
				done(0)
				res.NoSpeech = true
				res.Timings.Total = p.now().Sub(start)
				return res, nil
			}
			pcm = sp.PCM
		}
		reserve := TranscriptReserve(time.Duration(len(pcm)) * time.Second / 16000)
		ahead := func() {}
		if pf, ok := p.LLM.(Prefiller); ok && p.Overlap {
			// The turns before the recording's: what the transcript will
			// follow.
			head := msgs
			for i, m := range msgs {
				if m.Audio {
					head = msgs[:i]
					break
				}
			}
			profile := req.Profile
			if l, ok := p.lastLanguage.Load().(string); ok && profile.Language == "" {
				profile.Language = l
			}
			ahead = func() { pf.Prefill(ctx, p.generateRequest(req, profile, head, nil, reserve)) }
		}
		t1 := p.now()
		tr, err := p.transcribe(ctx, pcm, TranscribeOptions{Language: req.Profile.Language}, ahead)
		res.Timings.STT = p.now().Sub(t1)
		// The stage learns the time of the work itself: with one transcription
		// at a time, the wait inside Transcribe is the other requests' work.
		done(tr.Mel + tr.Encoder + tr.Decoder)
		release(sttWork)
		if err != nil {
			return res, wrapEngineErr(err, KindSTT, "speech-to-text failed")
		}
		res.Transcript = tr.Text
		res.TranscriptLanguage = tr.Language
		p.lastLanguage.Store(tr.Language)
		if strings.TrimSpace(tr.Text) == "" {
			// Whisper's no-speech rule silenced every window.
			res.Transcript = ""
			res.NoSpeech = true
			res.Timings.Total = p.now().Sub(start)
			return res, nil
		}
		for i := range msgs {
			if msgs[i].Audio {
				msgs[i].Content = tr.Text
			}
		}
		if req.OnTranscript != nil {
			req.OnTranscript(tr.Text)
		}
		greqReserve = reserve
	}

	res.PartnerTurn = PartnerTurn(msgs)
	var examples []Example
	if req.MemoryUser != "" && p.Memory != nil && res.PartnerTurn != "" {
		// After speech-to-text: the partner's turn is what they are matched on.
		examples, res.RecallErr = p.Memory.Recall(ctx, req.MemoryUser, res.PartnerTurn, MaxExamples)
	}

	profile := req.Profile
	if profile.Language == "" {
		// Reply in the language the partner spoke when the payload does not say.
		profile.Language = res.TranscriptLanguage
	}
	done, err := p.LLMStage.Enter(ctx)
	if err != nil {
		res.Timings.Total = p.now().Sub(start)
		return res, err
	}
	gen, err := p.LLM.Generate(ctx, p.generateRequest(req, profile, msgs, examples, greqReserve))
	done(gen.Prompt + gen.Generation)
	res.PromptTokens, res.CachedTokens, res.GenTokens = gen.PromptTokens, gen.CachedTokens, gen.GenTokens
	res.Examples, res.ExampleTokens = gen.Examples, gen.ExampleTokens
	res.SteerExhausted = gen.SteerExhausted
	res.Timings.Queue = gen.Queue
	res.Timings.Prompt = gen.Prompt
	res.Timings.Generation = gen.Generation
	res.Timings.Total = p.now().Sub(start)
	if err != nil {
		return res, wrapEngineErr(err, KindLLM, "reply generation failed")
	}
	res.Candidates = gen.Candidates
	// This is the one place a candidate's language is set: the language the
	// reply was asked in, that is the payload's language, else the language
	// the recording was transcribed in, else LanguageUnknown.
	lang := profile.Language
	if lang == "" {
		lang = LanguageUnknown
	}
	for i := range res.Candidates {
		res.Candidates[i].Language = lang
	}
	return res, nil
}

// generateRequest is what the language model gets for req with msgs.
func (p *Pipeline) generateRequest(req Request, profile Profile, msgs []Message, examples []Example, reserve int) GenerateRequest {
	return GenerateRequest{
		SystemPrompt:      req.SystemPrompt,
		Profile:           profile,
		Messages:          msgs,
		DialogID:          req.DialogID,
		Examples:          examples,
		N:                 req.MaxCandidates,
		Temperature:       req.Temperature,
		Seed:              req.Seed,
		Steer:             req.Steer,
		TranscriptReserve: reserve,
	}
}

// decode decodes the recording within the Decodes bound (its memory grows
// with the upload), on one core of the CPU budget.
func (p *Pipeline) decode(ctx context.Context, data []byte) ([]float32, error) {
	release, err := p.Decodes.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	n, err := p.CPU.Acquire(ctx, 1, 1)
	if err != nil {
		return nil, classifyAudioErr(err)
	}
	defer p.CPU.Release(n)
	pcm, err := p.Decode(data, p.MaxAudio)
	if err != nil {
		return nil, classifyAudioErr(err)
	}
	return pcm, nil
}

// keepSpeech runs voice activity detection on one core of the CPU budget.
func (p *Pipeline) keepSpeech(ctx context.Context, pcm []float32) (Speech, error) {
	n, err := p.CPU.Acquire(ctx, 1, 1)
	if err != nil {
		return Speech{}, err
	}
	defer p.CPU.Release(n)
	return p.VAD.KeepSpeech(ctx, pcm)
}

// transcribe runs speech-to-text on STTThreads cores of the CPU budget, one
// transcription at a time (a second one would hold its cores idle while it
// waits for the speech engine). ahead runs once the cores are taken, just
// before the transcription: work queued there finds them taken.
func (p *Pipeline) transcribe(ctx context.Context, pcm []float32, opts TranscribeOptions, ahead func()) (Transcript, error) {
	p.sttOnce.Do(func() { p.sttTurn = make(chan struct{}, 1) })
	select {
	case p.sttTurn <- struct{}{}:
	case <-ctx.Done():
		return Transcript{}, ctx.Err()
	}
	defer func() { <-p.sttTurn }()
	want := p.STTThreads
	if want <= 0 {
		want = p.CPU.Total()
	}
	n, err := p.CPU.Acquire(ctx, want, want)
	if err != nil {
		return Transcript{}, err
	}
	held := n
	defer func() { p.CPU.Release(held) }()
	ahead()
	opts.Threads = n
	opts.Grow = func(most int) int {
		if !p.alone() {
			most = n
		}
		held = lendCores(p.CPU, n, held, most)
		return held
	}
	return p.STT.Transcribe(ctx, pcm, opts)
}

// alone reports whether the transcription running is the only request in
// the pipeline's stages: only then does it borrow cores. Under load another
// request's stage would soon want the core back and wait for the
// transcription's next step (the load test's admitted requests took 13-18%
// longer when transcriptions borrowed regardless).
func (p *Pipeline) alone() bool {
	return p.STTStage.InFlight() <= 1 && p.LLMStage.InFlight() == 0
}

// lendCores is how a transcription that was given base cores and holds held
// grows toward most: it takes cores that are free while nobody waits for
// any, and gives back all but base as soon as somebody does (another
// request's stage, or the prompt being evaluated ahead, which so keeps the
// core it was left). It returns the cores held now.
func lendCores(cpu *Cores, base, held, most int) int {
	most = max(most, base)
	if cpu.Contended() {
		most = base
	}
	switch {
	case held > most:
		cpu.Release(held - most)
		held = most
	case held < most:
		held += cpu.TryAcquire(most - held)
	}
	return held
}

// wrapEngineErr keeps an engine's own *Error (overloaded, not ready,
// canceled) and classifies anything else as kind.
func wrapEngineErr(err error, kind Kind, msg string) error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	if isContextErr(err) {
		return &Error{Kind: KindCanceled, Message: "the request was canceled or timed out", Err: err}
	}
	return &Error{Kind: kind, Message: msg, Err: err}
}

func isContextErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}
